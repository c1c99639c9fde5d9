//! `hawkmesh demo`, as a newcomer runs it: the same scenario and seed give the same output,
//! and a rerun into the same directory starts from a fresh analyzer store.

use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-demo-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs the demo; returns its stdout without the wall-clock lines.
fn demo(out: &Path, seed: u64) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .args(["demo", "--seed", &seed.to_string(), "--out"])
        .arg(out)
        .output()
        .expect("hawkmesh runs");
    assert!(
        output.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.starts_with("done in") && !l.starts_with("report:"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_demo_is_reproducible_for_a_seed_and_reruns_start_from_a_fresh_store() {
    let (a, b) = (scratch("a"), scratch("b"));
    let first = demo(&a, 11);
    assert!(
        first.contains("(seed 11)"),
        "the seed is the one asked for:\n{first}"
    );
    assert!(first.contains("the analyzer concluded"), "{first}");
    let second = demo(&b, 11);
    assert_eq!(first, second, "same scenario and seed, different output");
    let incidents = |dir: &Path| std::fs::read(dir.join("incidents.json")).unwrap();
    assert_eq!(incidents(&a), incidents(&b));
    // Into the same directory again: the old store is not replayed into the new run.
    let again = demo(&a, 11);
    assert_eq!(first, again, "a rerun into the same directory differs");
    assert_eq!(incidents(&a), incidents(&b));
    let other = demo(&b, 12);
    assert!(other.contains("(seed 12)"), "{other}");
}
