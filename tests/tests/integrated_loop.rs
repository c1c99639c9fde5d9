//! The loop none of the seed systems closes: R-Pingmesh's service tracing probes the
//! service's connections on their own 5-tuples; when a probe's RTT crosses HAWKEYE's
//! threshold the host sends the polling packet for that connection; the switches collect,
//! the analyzer diagnoses why; and the same analyzer service's pingmesh controller says
//! where — both in one incident report.

use hawkmesh_lab::{run, LoopConfig, PingmeshLoop};
use hawkmesh_netsim::Scenario;

const INCAST: &str = r#"
version = 1
name = "e2e-integrated"
seed = 3
duration_us = 3000
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
start_us = 1200
congestion_control = false
[[fault]]
kind = "incast_burst"
workload = 0
"#;

#[test]
fn service_tracing_triggers_hawkeye_and_the_report_says_why_and_where() {
    let loaded = Scenario::parse(INCAST, "e2e.toml", ".".into()).unwrap();
    let dir = std::env::temp_dir().join(format!("hawkmesh-e2e-integrated-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = LoopConfig::new(dir.clone());
    config.pingmesh = Some(PingmeshLoop::new(loaded.scenario.switch.control_priority));
    let outcome = run(&loaded, &config).unwrap();
    let pingmesh = outcome.pingmesh.as_ref().expect("pingmesh ran");
    // Every period of the run was analysed from the results the agents uploaded.
    assert!(
        pingmesh.periods.len() >= 3,
        "{} periods",
        pingmesh.periods.len()
    );
    assert!(pingmesh.results > 1000, "{} results", pingmesh.results);
    assert_eq!(pingmesh.registrations, 16);
    // The polling came from service tracing, for the service's own connections.
    assert!(!outcome.triggers.is_empty());
    let tuples: Vec<_> = outcome.sim.flows.iter().map(|f| f.five_tuple).collect();
    for trigger in &outcome.triggers {
        assert!(
            tuples.contains(&trigger.victim),
            "{} is not a connection",
            trigger.victim
        );
    }
    assert!(!outcome.incidents.is_empty());
    let mut met = 0;
    for incident in &outcome.incidents {
        let Some(joint) = &incident.pingmesh else {
            continue;
        };
        assert!(joint.analysed, "{joint:?}");
        assert!(joint.source.is_some() && joint.destination.is_some());
        let html = incident.html.as_deref().unwrap_or("");
        assert!(
            html.contains("Where: the pingmesh view") && html.contains(&joint.verdict),
            "the incident page carries the pingmesh view"
        );
        // HAWKEYE's why: the incast's contention at h0's ToR; pingmesh's where: the slow
        // link into that ToR on the service's paths.
        let why_at_tor0 = incident
            .summary
            .verdict
            .as_deref()
            .is_some_and(|v| v.contains("at tor0"));
        let where_at_tor0 = joint.problems.iter().any(|p| {
            p.affects_service
                && p.links
                    .iter()
                    .any(|l| l.a.starts_with("tor0:") || l.b.starts_with("tor0:"))
        });
        if why_at_tor0 && where_at_tor0 {
            met += 1;
        }
    }
    assert!(
        met > 0,
        "no incident where the why and the where meet at tor0"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
