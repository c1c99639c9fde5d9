//! `hawkmesh sim check` / `sim run` on the HPCC reference's own topology format: lines after
//! the declared links are ignored like the reference ignores them, with a warning on stderr.

use std::path::PathBuf;
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-sim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn an_hpcc_topology_with_extra_lines_loads_with_a_warning_naming_them() {
    let dir = scratch("extra-links");
    // Declares 2 links, lists 3; the third names node 3 of a 3-node file (like the
    // reference's mix/topology.txt, "dst: node 66 ≥ node count 66" at line 68).
    std::fs::write(
        dir.join("topology.txt"),
        "3 1 2\n2\n0 2 100Gbps 0.001ms 0\n1 2 100Gbps 0.001ms 0\n0 3 25Gbps 0.001ms 0\n",
    )
    .unwrap();
    std::fs::write(dir.join("flow.txt"), "1\n0 1 3 100 10000 0.000001\n").unwrap();
    std::fs::write(
        dir.join("s.toml"),
        "version = 1\nduration_us = 100\n[topology]\nkind = \"hpcc_file\"\npath = \"topology.txt\"\n\
         [[workload]]\nkind = \"hpcc_flow_file\"\npath = \"flow.txt\"\n",
    )
    .unwrap();
    let topo = dir.join("topology.txt").display().to_string();
    let expected = format!(
        "warning: {topo}:5: ignored 1 line(s) after the 2 links the header declares \
         (the HPCC reference reads only those)"
    );
    let check = Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .args(["sim", "check"])
        .arg(dir.join("s.toml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{stderr}");
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(String::from_utf8_lossy(&check.stdout).contains("ok (3 nodes, 2 links)"));

    let run = Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .args(["sim", "run"])
        .arg(dir.join("s.toml"))
        .arg("--out")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains(&expected), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
