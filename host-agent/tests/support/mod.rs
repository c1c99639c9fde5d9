//! What the network-namespace tests share: namespaces that are deleted whatever the test
//! did, commands run in them, threads that enter them, and the lock that keeps the tests
//! apart.
//!
//! The tests run one at a time ([`serial`]): a test's `ip` commands are forked from this
//! process, and a child holds copies of every socket the process has open until it execs
//! `ip`, so another test re-binding a port it just closed could find it still bound.

#![allow(dead_code)]

#[cfg(feature = "daemon")]
pub mod daemon_lab;

use std::fs::File;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::{self, JoinHandle};

use nix::sched::{setns, CloneFlags};

static NEXT_NS: AtomicU32 = AtomicU32::new(0);
static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the tests apart (see the module's comment); a failed test does not block others.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A network namespace, deleted (with its interfaces) when dropped, whatever the test did.
pub struct Netns {
    pub name: String,
}

/// Runs a command, panicking with its output when it fails.
pub fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{program}`: {e}"));
    assert!(
        out.status.success(),
        "`{program} {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Netns {
    /// A new namespace named after `tag`, with its loopback up.
    pub fn add(tag: &str) -> Netns {
        let name = format!(
            "hm-{tag}-{}-{}",
            std::process::id(),
            NEXT_NS.fetch_add(1, Ordering::Relaxed)
        );
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .unwrap_or_else(|e| panic!("cannot run `ip` (iproute2 is needed): {e}"));
        assert!(
            out.status.success(),
            "`ip netns add {name}` failed; these tests need root (CAP_SYS_ADMIN) and iproute2: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n <ns> args…`.
    pub fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    /// `ip -n <ns> args…`, its standard output.
    pub fn ip_output(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// `ip netns exec <ns> program args…`, its standard output.
    pub fn exec(&self, program: &str, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", self.name.as_str(), program];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Sets a sysctl of this namespace (`net.ipv4.ip_forward=1`), through `/proc/sys` from
    /// a thread inside it (network sysctls are the opening thread's namespace's).
    pub fn sysctl(&self, setting: &str) {
        let (key, value) = setting
            .split_once('=')
            .unwrap_or_else(|| panic!("{setting:?} is not key=value"));
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let value = value.to_string();
        self.spawn(move || std::fs::write(&path, value).map_err(|e| format!("{path}: {e}")))
            .join()
            .expect("the sysctl thread")
            .unwrap_or_else(|e| panic!("sysctl in {}: {e}", self.name));
    }

    /// Runs `f` on a new thread inside this namespace (setns changes only that thread;
    /// threads it creates inherit the namespace).
    pub fn spawn<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> JoinHandle<R> {
        let path = format!("/run/netns/{}", self.name);
        thread::spawn(move || {
            enter(&path);
            f()
        })
    }
}

/// Moves the calling thread into the namespace at `path`.
pub fn enter(path: &str) {
    let file = File::open(path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    setns(&file, CloneFlags::CLONE_NEWNET).unwrap_or_else(|e| panic!("setns {path}: {e}"));
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
