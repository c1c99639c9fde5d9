//! `hawkmesh pki` makes a lab CA and certificates; `hawkmesh analyzer serve` takes them, and
//! without them serves plaintext only when asked for, on loopback.

use std::path::PathBuf;
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-pki-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn hawkmesh(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .args(args)
        .output()
        .expect("running hawkmesh")
}

#[test]
fn a_lab_pki_is_made_and_the_analyzer_refuses_to_serve_without_it_unless_asked() {
    let dir = scratch("lab");
    let pki = dir.join("pki");
    let pki = pki.to_str().unwrap();
    let init = hawkmesh(&["pki", "init", "--dir", pki]);
    assert!(init.status.success(), "{init:?}");
    let again = hawkmesh(&["pki", "init", "--dir", pki]);
    assert!(
        !again.status.success(),
        "an existing CA is never overwritten"
    );
    for args in [
        &[
            "pki",
            "issue",
            "--dir",
            pki,
            "--name",
            "analyzer",
            "--server-name",
            "localhost",
        ][..],
        &["pki", "issue", "--dir", pki, "--name", "tor0"][..],
    ] {
        let issued = hawkmesh(args);
        assert!(issued.status.success(), "{issued:?}");
    }
    for file in [
        "ca.pem",
        "ca-key.pem",
        "analyzer.pem",
        "analyzer-key.pem",
        "tor0.pem",
    ] {
        assert!(dir.join("pki").join(file).is_file(), "{file}");
    }
    // The analyzer without certificates and without --plaintext: refused, saying how.
    let topology = dir.join("topology.json");
    let sim = hawkmesh(&[
        "sim",
        "run",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scenarios/ring-deadlock.toml"
        ),
        "--out",
        dir.join("sim").to_str().unwrap(),
    ]);
    assert!(sim.status.success(), "{sim:?}");
    std::fs::copy(dir.join("sim/topology.json"), &topology).unwrap();
    let serve = hawkmesh(&[
        "analyzer",
        "serve",
        "--topology",
        topology.to_str().unwrap(),
        "--grpc",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
    ]);
    assert!(!serve.status.success());
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert!(
        stderr.contains("--tls-cert") && stderr.contains("--plaintext"),
        "{stderr}"
    );
    // Plaintext on an address others can reach: refused.
    let serve = hawkmesh(&[
        "analyzer",
        "serve",
        "--topology",
        topology.to_str().unwrap(),
        "--grpc",
        "0.0.0.0:0",
        "--http",
        "127.0.0.1:0",
        "--plaintext",
        "--data",
        dir.join("store").to_str().unwrap(),
    ]);
    assert!(!serve.status.success());
    assert!(String::from_utf8_lossy(&serve.stderr).contains("loopback"));
    let _ = std::fs::remove_dir_all(&dir);
}
