//! `hawkmesh diagnose` on report files, as an operator runs it.

use hawkmesh_analyzer::testkit::sample_pfc_storm;
use hawkmesh_wire::telemetry::FiveTuple;
use std::path::Path;
use std::process::Command;

/// h0 and h3 on tor0, h7 on tor1; both tors under agg0. h7's NIC storms: tor1's port
/// toward h7 is paused without any flow contention, the pause spreads to agg0 and tor0.
fn write_storm_incident(dir: &Path) -> FiveTuple {
    let (topology, victim, reports) = sample_pfc_storm().unwrap();
    let report_dir = dir.join("reports");
    std::fs::create_dir_all(&report_dir).unwrap();
    for report in &reports {
        let path = report_dir.join(format!("switch-{}.json", report.switch));
        std::fs::write(path, serde_json::to_string_pretty(report).unwrap()).unwrap();
    }
    std::fs::write(
        dir.join("topology.json"),
        serde_json::to_string(&topology).unwrap(),
    )
    .unwrap();
    victim
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn diagnose_names_the_storm_and_writes_every_output() {
    let dir = scratch("storm");
    let victim = write_storm_incident(&dir);
    let out = dir.join("out");
    let run = Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .args(["diagnose", "--reports"])
        .arg(dir.join("reports"))
        .arg("--topology")
        .arg(dir.join("topology.json"))
        .args(["--victim", &victim.to_string(), "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.to_lowercase().contains("storm"), "{stdout}");
    assert!(
        stdout.contains("h7"),
        "the injecting host is named: {stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("diagnosis.json")).unwrap())
            .unwrap();
    let types: Vec<&str> = json["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["type"].as_str())
        .collect();
    assert!(types.contains(&"pfc_storm"), "{json}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("h7"));
    assert!(std::fs::read_to_string(out.join("provenance.dot"))
        .unwrap()
        .starts_with("digraph"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_inputs_fail_with_a_message_that_names_them() {
    let dir = scratch("bad");
    write_storm_incident(&dir);
    let run = |victim: &str, topology: &Path| {
        Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
            .args(["diagnose", "--reports"])
            .arg(dir.join("reports"))
            .arg("--topology")
            .arg(topology)
            .args(["--victim", victim])
            .output()
            .unwrap()
    };
    let bad_victim = run("10.0.0.1->nowhere", &dir.join("topology.json"));
    assert!(!bad_victim.status.success());
    assert!(String::from_utf8_lossy(&bad_victim.stderr).contains("10.0.0.1->nowhere"));
    std::fs::write(dir.join("broken.json"), "{\"nodes\": [").unwrap();
    let bad_topology = run("10.0.0.1:49152->10.0.0.8", &dir.join("broken.json"));
    assert!(!bad_topology.status.success());
    assert!(String::from_utf8_lossy(&bad_topology.stderr).contains("broken.json"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sim_run_rejects_a_bad_scenario_with_file_and_line() {
    let dir = scratch("scenario");
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "version = 1\nduration_us = 10\n[topology]\nkind = \"fat_tree\"\nk = 3\n",
    )
    .unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .args(["sim", "run"])
        .arg(&path)
        .arg("--out")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("bad.toml:5: topology.k"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
