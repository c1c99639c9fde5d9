//! `hawkmesh pingmesh eval` from the command line: a small run writes its report, the same
//! seed gives the same results, and an unknown fault family is refused by name.

use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "hawkmesh-pingmesh-cli-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn eval(out: &Path, faults: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .args([
            "pingmesh",
            "eval",
            "--traces",
            "1",
            "--fabrics",
            "k4,rail",
            "--faults",
            faults,
        ])
        .arg("--out")
        .arg(out)
        .output()
        .expect("run hawkmesh")
}

#[test]
fn a_small_evaluation_locates_its_faults_and_is_reproducible() {
    let (a, b) = (scratch("a"), scratch("b"));
    let output = eval(&a, "healthy,link-down,rnic-down,pfc-storm,ecmp-imbalance");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("precision 1.00, detected and located 1.00"),
        "{stdout}"
    );
    let report = std::fs::read_to_string(a.join("report.md")).unwrap();
    assert!(
        report.contains("| rail | link-down | 1 | 1 | 1 | 0 |"),
        "{report}"
    );
    assert!(
        eval(&b, "healthy,link-down,rnic-down,pfc-storm,ecmp-imbalance")
            .status
            .success()
    );
    assert_eq!(
        std::fs::read(a.join("results.json")).unwrap(),
        std::fs::read(b.join("results.json")).unwrap()
    );
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

#[test]
fn an_unknown_fault_family_is_refused_by_name() {
    let out = scratch("bad");
    let output = eval(&out, "healthy,meteor-strike");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unknown fault family \"meteor-strike\"") && stderr.contains("link-loss"),
        "{stderr}"
    );
}

#[test]
fn hostmesh_mode_locates_one_way_faults_on_rails_and_refuses_other_fabrics() {
    let out = scratch("hostmesh");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
            .args(["pingmesh", "eval", "--mode", "hostmesh", "--traces", "2"])
            .args(extra)
            .arg("--out")
            .arg(&out)
            .output()
            .expect("run hawkmesh")
    };
    let output = run(&["--faults", "healthy,link-loss,rnic-down"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["mode"], "hostmesh");
    assert_eq!(results["traces"].as_array().unwrap().len(), 6);
    assert!(results["precision"].as_f64().unwrap() >= 0.95, "{results}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.starts_with("# Hostmesh evaluation") && report.contains("--mode hostmesh"));
    // Hostmesh needs RNICs of one host on different switches, and has no controller.
    let refused = run(&["--fabrics", "clos"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("only rail-optimised fabrics"));
    let refused = run(&["--faults", "host-down"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("cannot be judged under Hostmesh"));
    let _ = std::fs::remove_dir_all(&out);
}
