//! Shared by the tests that need a network namespace: a veth pair standing for the switch's
//! CPU port. Needs root (namespaces, `CAP_NET_RAW`) and `ip` (iproute2);
//! `HAWKMESH_NO_NETNS=1` skips such tests, saying so.

#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

use hawkmesh_switch_agent::cpu_port::CpuPort;

/// A network namespace with a veth pair `cpu-sw` (the switch's side) ↔ `cpu-host`,
/// removed on drop.
pub struct Netns {
    name: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    pub fn new() -> Netns {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("hm-cpu-{}-{n}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        // No IPv6: the kernel would send neighbour discovery out of the interfaces.
        ip(&[
            "netns",
            "exec",
            &ns.name,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]);
        ip(&[
            "-n", &ns.name, "link", "add", "cpu-sw", "type", "veth", "peer", "name", "cpu-host",
        ]);
        ip(&["-n", &ns.name, "link", "set", "cpu-sw", "up"]);
        ip(&["-n", &ns.name, "link", "set", "cpu-host", "up"]);
        ns
    }

    /// Opens the interfaces from inside the namespace (a socket stays in the namespace it
    /// was made in).
    pub fn open(&self, names: [&'static str; 2]) -> [CpuPort; 2] {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("netns file");
            nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            names.map(|n| CpuPort::open(n, Duration::from_millis(20)).expect("open"))
        })
        .join()
        .expect("netns thread")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

pub fn skip() -> bool {
    if std::env::var_os("HAWKMESH_NO_NETNS").is_some() {
        eprintln!("HAWKMESH_NO_NETNS is set: skipping the CPU-port test over veth");
        return true;
    }
    assert!(
        nix::unistd::geteuid().is_root(),
        "the CPU-port test needs root for a network namespace (set HAWKMESH_NO_NETNS=1 to skip it)"
    );
    false
}
