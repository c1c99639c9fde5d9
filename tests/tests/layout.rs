//! The crate boundaries of ARCHITECTURE.md, "Dependency rules", read from `cargo metadata`:
//! nothing deployable links the simulator or the simulation glue, `wire` and `knobs` depend
//! on nothing in the workspace, and the data-plane runtime on `wire` only.
//!
//! Normal and build dependencies count, optional ones included (a backend behind a cargo
//! feature is still shipped); dev-dependencies do not (tests may use anything).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Crates that run on switches, hosts or the analyzer server, the code generator, and the
/// BF Runtime model server (a lab tool that runs beside real agents).
const DEPLOYABLE: &[&str] = &[
    "hawkmesh-bfrt-model",
    "hawkmesh-wire",
    "hawkmesh-knobs",
    "hawkmesh-dataplane",
    "hawkmesh-codegen",
    "hawkmesh-switch-agent",
    "hawkmesh-host-agent",
    "hawkmesh-pingmesh",
    "hawkmesh-tuner",
    "hawkmesh-congestion",
    "hawkmesh-analyzer",
    "hawkmesh-proto",
    "hawkmesh-analyzer-server",
];

/// What no deployable crate may reach.
const SIMULATION: &[&str] = &["hawkmesh-netsim", "hawkmesh-lab"];

/// Workspace crate → the workspace crates it depends on directly (normal and build).
fn workspace_graph() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let members: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].as_str() != Some("dev"))
                .filter_map(|d| d["name"].as_str())
                .filter(|n| members.contains(*n))
                .map(str::to_string)
                .collect();
            (p["name"].as_str().expect("name").to_string(), deps)
        })
        .collect()
}

/// Every workspace crate `krate` reaches through normal and build dependencies.
fn reach(graph: &BTreeMap<String, BTreeSet<String>>, krate: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut pending = vec![krate.to_string()];
    while let Some(k) = pending.pop() {
        for d in graph.get(&k).into_iter().flatten() {
            if seen.insert(d.clone()) {
                pending.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn nothing_deployable_depends_on_the_simulator_or_its_glue() {
    let graph = workspace_graph();
    // The check must see the graph it guards: the glue does reach the simulator.
    assert!(
        reach(&graph, "hawkmesh-lab").contains("hawkmesh-netsim"),
        "the metadata graph lost the lab → netsim edge: {graph:?}"
    );
    let mut violations = Vec::new();
    for krate in DEPLOYABLE {
        assert!(
            graph.contains_key(*krate),
            "{krate} is not a workspace member"
        );
        for bad in SIMULATION {
            if reach(&graph, krate).contains(*bad) {
                violations.push(format!("{krate} → {bad}"));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "forbidden dependencies: {violations:?}"
    );
}

#[test]
fn wire_and_knobs_depend_on_nothing_in_the_workspace_and_the_runtime_on_wire_only() {
    let graph = workspace_graph();
    assert_eq!(reach(&graph, "hawkmesh-wire"), BTreeSet::new());
    assert_eq!(reach(&graph, "hawkmesh-knobs"), BTreeSet::new());
    assert_eq!(
        reach(&graph, "hawkmesh-dataplane"),
        BTreeSet::from(["hawkmesh-wire".to_string()])
    );
}

#[test]
fn the_host_agent_does_not_link_the_data_plane_runtime() {
    // A host daemon builds polling packets from wire's layouts; it has no switch model.
    let graph = workspace_graph();
    let reached = reach(&graph, "hawkmesh-host-agent");
    assert!(
        !reached.contains("hawkmesh-dataplane"),
        "host-agent reaches {reached:?}"
    );
}
