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
