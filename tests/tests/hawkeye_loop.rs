//! The whole HAWKEYE loop on a K=4 fat-tree: netsim + the generated data-plane model in every
//! switch + host RTT triggers + switch agents + the analyzer service over gRPC.

use hawkmesh_e2e::{run, LoopConfig};
use hawkmesh_netsim::Scenario;

const INCAST: &str = r#"
version = 1
name = "e2e-incast"
seed = 3
duration_us = 1500
[topology]
kind = "fat_tree"
k = 4
[switch]
buffer_mb = 3
[[workload]]
kind = "incast"
senders = ["h4", "h5", "h6", "h7", "h8", "h9", "h10", "h11"]
receiver = "h0"
size_bytes = 400000
start_us = 100
congestion_control = false
[[fault]]
kind = "incast_burst"
workload = 0
"#;

fn data_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn an_incast_is_detected_polled_collected_and_diagnosed_at_its_initial_congestion_point() {
    let loaded = Scenario::parse(INCAST, "e2e.toml", ".".into()).unwrap();
    let dir = data_dir("incast");
    let outcome = run(&loaded, &LoopConfig::new(dir.clone())).unwrap();
    assert!(
        !outcome.triggers.is_empty(),
        "the incast must inflate RTTs past 300 %"
    );
    assert!(
        !outcome.collections.is_empty(),
        "switch agents must collect"
    );
    let truth = &outcome.sim.ground_truth[0];
    let initial = truth.initial_ports[0];
    assert!(
        outcome.collections.iter().any(|c| c.switch == initial.node),
        "the receiver's ToR reports"
    );
    assert!(!outcome.incidents.is_empty());
    for incident in &outcome.incidents {
        assert_ne!(
            incident.summary.state,
            hawkmesh_analyzer_server::incidents::IncidentState::Collecting
        );
    }
    // Some incident names the receiver's ToR port as the root cause with the incast flows.
    let incast: std::collections::BTreeSet<String> = truth
        .root_cause_flows
        .iter()
        .map(|f| outcome.sim.flows[*f as usize].tuple.clone())
        .collect();
    let found = outcome.incidents.iter().any(|incident| {
        let Some(diagnosis) = &incident.diagnosis else {
            return false;
        };
        diagnosis["anomalies"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|anomaly| {
                let kind = anomaly["type"].as_str().unwrap_or("");
                let at_port = anomaly["root_cause"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| {
                        p["switch"].as_u64() == Some(u64::from(initial.node))
                            && p["port"].as_u64() == Some(u64::from(initial.port))
                    });
                let flows_right = anomaly["root_cause"]["flows"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f["flow"].as_str())
                    .any(|f| incast.contains(f));
                (kind == "pfc_backpressure" || kind == "normal_flow_contention")
                    && at_port
                    && flows_right
            })
    });
    let texts: Vec<&str> = outcome
        .incidents
        .iter()
        .filter_map(|i| i.text.as_deref())
        .collect();
    assert!(
        found,
        "no incident names the incast at its ToR port:\n{}",
        texts.join("\n---\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
