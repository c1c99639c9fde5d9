//! The daemon-only binary `hawkmesh-host-agent` as an operator runs it: its arguments, a
//! configuration it refuses, and a stop by SIGTERM while the analyzer is not there yet.

#![cfg(all(target_os = "linux", feature = "daemon"))]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const BINARY: &str = env!("CARGO_BIN_EXE_hawkmesh-host-agent");

#[test]
fn without_a_configuration_it_prints_its_usage_and_exits_2() {
    let out = Command::new(BINARY).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--config FILE is required"), "{err}");
    assert!(
        err.contains("usage: hawkmesh-host-agent --config FILE"),
        "{err}"
    );
    let out = Command::new(BINARY)
        .args(["--config", "a.toml", "extra"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_bad_configuration_is_refused_naming_the_file_and_key() {
    let dir = std::env::temp_dir().join(format!("hm-agent-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let config = dir.join("bad.toml");
    std::fs::write(
        &config,
        "host = \"h0\"\nstate_dir = \"/tmp\"\n[analyzer]\nendpoint = \"http://127.0.0.1:1\"\n[probing]\ntick_us = 9\n[[interface]]\nnic = 0\nip = \"127.0.0.1\"\nid = 1\n",
    )
    .expect("writes");
    let out = Command::new(BINARY)
        .arg("--config")
        .arg(&config)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml"), "{err}");
    assert!(err.contains("probing.tick_us"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A network namespace with a veth pair, one end at 10.77.0.1 (the agent refuses
/// loopback), removed when dropped.
struct Namespace(String);

impl Namespace {
    fn new() -> Namespace {
        let name = format!("hm-agent-bin-{}", std::process::id());
        let ip = |args: &[&str]| {
            let status = Command::new("ip").args(args).status().expect("runs ip");
            assert!(status.success(), "ip {args:?}: {status}");
        };
        ip(&["netns", "add", &name]);
        let ns = Namespace(name.clone());
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        ip(&[
            "-n", &name, "link", "add", "d0", "type", "veth", "peer", "name", "d1",
        ]);
        ip(&["-n", &name, "addr", "add", "10.77.0.1/24", "dev", "d0"]);
        ip(&["-n", &name, "link", "set", "d0", "up"]);
        ip(&["-n", &name, "link", "set", "d1", "up"]);
        ns
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn sigterm_stops_it_cleanly_while_the_analyzer_is_away() {
    let dir = std::env::temp_dir().join(format!("hm-agent-term-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let config = dir.join("agent.toml");
    // Nothing listens at the analyzer's address: the agent keeps trying to register.
    std::fs::write(
        &config,
        format!(
            "host = \"h0\"\nstate_dir = \"{}\"\n[analyzer]\nendpoint = \"http://127.0.0.1:50051\"\n[[interface]]\nnic = 0\nip = \"10.77.0.1\"\nid = 1\n",
            dir.join("state").display(),
        ),
    )
    .expect("writes");
    let ns = Namespace::new();
    // `ip netns exec` execs the binary in place: the child's pid is the agent's.
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.0, BINARY, "--config"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    std::thread::sleep(Duration::from_millis(1500));
    if let Some(status) = child.try_wait().expect("waits") {
        let mut err = String::new();
        let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
        panic!("it exited before it was stopped ({status}): {err}");
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waits") {
            break status;
        }
        assert!(Instant::now() < deadline, "no exit 15 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    let mut err = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("reads");
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("reads");
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("SIGTERM"), "{err}");
    assert!(
        out.contains("host agent `h0` (incarnation 1) stopped: 0 probes sent"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
