//! `hawkmesh eval` refuses bad input before running anything.

use std::process::Command;

fn eval(args: &[&str]) -> (bool, String) {
    let out = std::env::temp_dir().join(format!("hawkmesh-cli-eval-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .arg("eval")
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        !out.join("results.json").exists(),
        "a refused run must not write results"
    );
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn bad_classes_counts_and_grids_are_refused_with_a_message() {
    let (ok, stderr) = eval(&["--classes", "pfc-storm,pfc-hurricane"]);
    assert!(!ok);
    assert!(
        stderr.contains("pfc-hurricane") && stderr.contains("deadlock-out-of-loop"),
        "{stderr}"
    );
    let (ok, stderr) = eval(&["--traces", "0"]);
    assert!(!ok);
    assert!(
        stderr.contains("--traces must be within 1..=1000"),
        "{stderr}"
    );
    let (ok, stderr) = eval(&["--traces", "many"]);
    assert!(!ok);
    assert!(stderr.contains("many"), "{stderr}");
    let (ok, stderr) = eval(&["--grid", "diagonal"]);
    assert!(!ok);
    assert!(
        stderr.contains("diagonal") && stderr.contains("sweep"),
        "{stderr}"
    );
    let (ok, stderr) = eval(&["--classes", "pfc-storm,pfc-storm"]);
    assert!(!ok);
    assert!(stderr.contains("twice"), "{stderr}");
}

#[test]
fn bad_fabric_families_are_refused_with_a_message() {
    let (ok, stderr) = eval(&["--fabrics", "k4,torus"]);
    assert!(!ok);
    assert!(
        stderr.contains("torus") && stderr.contains("leaf-spine") && stderr.contains("rail"),
        "{stderr}"
    );
    let (ok, stderr) = eval(&["--fabrics", "clos,clos"]);
    assert!(!ok);
    assert!(stderr.contains("fabric family is listed twice"), "{stderr}");
}
