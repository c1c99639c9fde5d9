//! `hawkmesh switch-agent` refuses a bad configuration or a missing CPU port with a message
//! that names the file, the key or the interface (the daemon itself is tested against the
//! model-backed BF Runtime server in `bfrt-model/tests/daemon.rs`).

use std::path::PathBuf;
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-sa-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn switch_agent(config: &str, dir: &std::path::Path) -> (bool, String) {
    let path = dir.join("switch-agent.toml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .args(["switch-agent", "--config", path.to_str().unwrap()])
        .output()
        .expect("running hawkmesh");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const CONFIG: &str = r#"switch = "tor1"
node_id = 3

[bfrt]
address = "127.0.0.1:50052"

[cpu_port]
interface = "hm-no-such0"

[analyzer]
endpoint = "http://127.0.0.1:50051"
"#;

#[test]
fn bad_configurations_and_a_missing_cpu_port_are_named() {
    let dir = scratch("config");
    let (ok, err) = switch_agent(&CONFIG.replace("[bfrt]", "[bfrt]\nhost = \"x\""), &dir);
    assert!(!ok);
    assert!(
        err.contains("switch-agent.toml: TOML parse error at line 5") && err.contains("`host`"),
        "{err}"
    );
    let (ok, err) = switch_agent(
        &CONFIG.replace("http://127.0.0.1", "http://192.0.2.1"),
        &dir,
    );
    assert!(!ok);
    assert!(
        err.contains("analyzer.endpoint: plaintext is for a loopback analyzer only"),
        "{err}"
    );
    let (ok, err) = switch_agent(CONFIG, &dir);
    assert!(!ok);
    assert!(
        err.contains("CPU port `hm-no-such0`: no such network interface"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `hawkmesh poll` sends a polling packet a switch running the program takes: read back on
/// the loopback interface with the agent's own CPU-port reader and classifier. Needs root
/// (an `AF_PACKET` socket), like the network-namespace tests; `HAWKMESH_NO_NETNS=1` skips.
#[test]
fn a_polling_packet_is_sent_out_of_an_interface() {
    use hawkmesh_switch_agent::cpu_port::CpuPort;
    use hawkmesh_switch_agent::CpuFrameKind;
    use hawkmesh_wire::polling::Polling;

    if std::env::var_os("HAWKMESH_NO_NETNS").is_some() {
        eprintln!("HAWKMESH_NO_NETNS is set: skipping the raw-socket test (needs CAP_NET_RAW)");
        return;
    }
    let lo = CpuPort::open("lo", std::time::Duration::from_millis(100))
        .expect("open lo (needs root / CAP_NET_RAW; HAWKMESH_NO_NETNS=1 skips)");
    let event = 0x00ab_cd00_0000_0000 | u64::from(std::process::id());
    let out = Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .args([
            "poll",
            "--interface",
            "lo",
            "--victim",
            "10.0.0.1:49152->10.0.1.1:4791",
            "--event",
            &event.to_string(),
        ])
        .output()
        .expect("running hawkmesh");
    assert!(out.status.success(), "{out:?}");
    let mut buf = vec![0u8; 2048];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let polling = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no polling packet on lo"
        );
        let Some(n) = lo.recv(&mut buf).expect("recv") else {
            continue;
        };
        if CpuFrameKind::of(&buf[..n]) != CpuFrameKind::Polling {
            continue;
        }
        let polling = Polling::parse_packet(&buf[..n]).expect("parses");
        if polling.event_id == event {
            break polling;
        }
    };
    assert_eq!(polling.victim.to_string(), "10.0.0.1:49152->10.0.1.1:4791");
    assert_eq!(polling.hop_limit, 16);

    let bad = Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .args([
            "poll",
            "--interface",
            "lo",
            "--victim",
            "10.0.0.1",
            "--event",
            "1",
        ])
        .output()
        .expect("running hawkmesh");
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--victim 10.0.0.1"),
        "{bad:?}"
    );
}
