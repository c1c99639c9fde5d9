//! The whole HAWKEYE loop on a K=4 fat-tree: netsim + the generated data-plane model in every
//! switch + host RTT triggers + switch agents + the analyzer service over gRPC.

use hawkmesh_lab::{run, LoopConfig};
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

/// (type, root-cause ports as (switch, port), loop ports, injector) of every anomaly of
/// every diagnosed incident.
type Found = (String, Vec<(u64, u64)>, Vec<(u64, u64)>, Option<String>);

fn anomalies(outcome: &hawkmesh_lab::LoopOutcome) -> Vec<Found> {
    let ports = |v: &serde_json::Value| -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = v
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| Some((p["switch"].as_u64()?, p["port"].as_u64()?)))
            .collect();
        out.sort_unstable();
        out
    };
    let mut found = Vec::new();
    for incident in &outcome.incidents {
        assert_ne!(
            incident.summary.state,
            hawkmesh_analyzer_server::incidents::IncidentState::Collecting,
            "every incident is concluded"
        );
        let Some(diagnosis) = &incident.diagnosis else {
            continue;
        };
        for anomaly in diagnosis["anomalies"].as_array().into_iter().flatten() {
            found.push((
                anomaly["type"].as_str().unwrap_or("").to_string(),
                ports(&anomaly["root_cause"]["ports"]),
                ports(&anomaly["loop_ports"]),
                anomaly["root_cause"]["injector"]
                    .as_str()
                    .map(str::to_string),
            ));
        }
    }
    found
}

fn texts(outcome: &hawkmesh_lab::LoopOutcome) -> String {
    outcome
        .incidents
        .iter()
        .filter_map(|i| i.text.as_deref())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

const STORM: &str = r#"
version = 1
name = "e2e-storm"
seed = 5
duration_us = 2500
[topology]
kind = "fat_tree"
k = 4
[switch]
buffer_mb = 3
[[workload]]
kind = "poisson"
load = 0.2
cdf = "websearch"
duration_us = 2500
[[workload]]
kind = "flows"
flows = [
  { src = "h4", dst = "h0", size_bytes = 1000000, start_us = 700 },
  { src = "h9", dst = "h1", size_bytes = 1000000, start_us = 700 },
  { src = "h13", dst = "h1", size_bytes = 1000000, start_us = 700 },
]
[[fault]]
kind = "pfc_injection"
host = "h0"
start_us = 500
duration_us = 1200
"#;

#[test]
fn a_host_pfc_storm_is_diagnosed_as_a_storm_injected_by_that_host() {
    let loaded = Scenario::parse(STORM, "storm.toml", ".".into()).unwrap();
    let dir = data_dir("storm");
    let outcome = run(&loaded, &LoopConfig::new(dir.clone())).unwrap();
    let truth = &outcome.sim.ground_truth[0];
    let initial = truth.initial_ports[0];
    let injector = &outcome.sim.topology.nodes[truth.nodes[0] as usize].name;
    let found = anomalies(&outcome);
    assert!(
        found.iter().any(|(kind, ports, _, by)| kind == "pfc_storm"
            && ports == &vec![(u64::from(initial.node), u64::from(initial.port))]
            && by.as_deref() == Some(injector.as_str())),
        "no incident names the storm from {injector} at its ToR port:\n{}",
        texts(&outcome)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cyclic_buffer_dependency_is_diagnosed_as_a_deadlock_with_its_loop() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/ring-deadlock.toml");
    let loaded = Scenario::load(&path).unwrap();
    let dir = data_dir("deadlock");
    let outcome = run(&loaded, &LoopConfig::new(dir.clone())).unwrap();
    assert!(!outcome.triggers.is_empty(), "stalled flows must poll");
    let truth = &outcome.sim.ground_truth[0];
    let mut expected: Vec<(u64, u64)> = truth
        .loop_ports
        .iter()
        .map(|p| (u64::from(p.node), u64::from(p.port)))
        .collect();
    expected.sort_unstable();
    let found = anomalies(&outcome);
    assert!(
        found.iter().any(
            |(kind, _, loop_ports, _)| kind == "deadlock_initiator_in_loop"
                && loop_ports == &expected
        ),
        "no incident names the loop {expected:?}:\n{}",
        texts(&outcome)
    );
    // Every incident's victim is a loop flow: none of them may blame plain contention.
    assert!(
        found
            .iter()
            .all(|(kind, _, _, _)| kind != "normal_flow_contention"),
        "{}",
        texts(&outcome)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const CONTENTION: &str = r#"
version = 1
name = "e2e-contention"
seed = 9
duration_us = 1500
[topology]
kind = "fat_tree"
k = 4
[switch]
buffer_mb = 64
[[workload]]
kind = "incast"
senders = ["h4", "h8", "h12"]
receiver = "h1"
size_bytes = 300000
start_us = 100
congestion_control = false
"#;

#[test]
fn contention_without_pfc_is_diagnosed_as_normal_flow_contention_at_the_receiver_port() {
    let loaded = Scenario::parse(CONTENTION, "contention.toml", ".".into()).unwrap();
    let dir = data_dir("contention");
    let outcome = run(&loaded, &LoopConfig::new(dir.clone())).unwrap();
    assert!(
        outcome.sim.pfc_events.is_empty(),
        "a 64 MB buffer absorbs the incast without PFC"
    );
    assert!(!outcome.triggers.is_empty(), "the queue inflates RTTs");
    // Where the queue really built (ECMP decides whether the senders collide at an
    // aggregation or core port or only at the receiver's ToR port): the simulator's own
    // per-port maximum queue.
    let deepest = outcome
        .sim
        .ports
        .iter()
        .map(|p| p.counters.max_queue_bytes)
        .max()
        .unwrap_or(0);
    assert!(deepest > 100_000, "the incast builds a queue");
    let congested: Vec<(u64, u64)> = outcome
        .sim
        .ports
        .iter()
        .filter(|p| p.counters.max_queue_bytes * 2 >= deepest)
        .map(|p| (u64::from(p.node), u64::from(p.port)))
        .collect();
    let found = anomalies(&outcome);
    let contention: Vec<&Found> = found
        .iter()
        .filter(|(kind, _, _, _)| kind == "normal_flow_contention")
        .collect();
    assert!(
        !contention.is_empty(),
        "no incident names flow contention:\n{}",
        texts(&outcome)
    );
    for (_, ports, _, _) in &contention {
        assert!(
            ports.iter().all(|p| congested.contains(p)),
            "contention blamed on {ports:?}, the queues built at {congested:?}:\n{}",
            texts(&outcome)
        );
    }
    assert!(
        found
            .iter()
            .all(|(kind, _, _, _)| !kind.starts_with("pfc") && !kind.starts_with("deadlock")),
        "no PFC happened, none may be blamed:\n{}",
        texts(&outcome)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_deadlock_started_outside_its_loop_is_traced_to_the_incast_that_started_it() {
    // HAWKEYE's evaluation point (262 µs epochs, 300 % RTT threshold).
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/k4-out-of-loop-deadlock.toml");
    let loaded = Scenario::load(&path).unwrap();
    let dir = data_dir("out-of-loop");
    let mut config = LoopConfig::new(dir.clone());
    config.epoch_log2_ns = 18;
    config.detector.threshold = 3.0;
    let outcome = run(&loaded, &config).unwrap();
    let incast = outcome
        .sim
        .ground_truth
        .iter()
        .find(|a| a.kind == hawkmesh_netsim::truth::AnomalyKind::IncastBurst)
        .expect("the incast");
    let looped = outcome
        .sim
        .ground_truth
        .iter()
        .find(|a| a.kind == hawkmesh_netsim::truth::AnomalyKind::RoutingLoop)
        .expect("the loop");
    let root = incast.initial_ports[0];
    let root = (u64::from(root.node), u64::from(root.port));
    let loop_ports: std::collections::BTreeSet<(u64, u64)> = looped
        .loop_ports
        .iter()
        .map(|p| (u64::from(p.node), u64::from(p.port)))
        .collect();
    let found = anomalies(&outcome);
    assert!(
        found.iter().any(|(kind, ports, loop_found, _)| kind
            == "deadlock_initiator_out_of_loop_flow_contention"
            && ports == &vec![root]
            && !loop_found.is_empty()
            && loop_found.iter().all(|p| loop_ports.contains(p))),
        "no incident traces the loop {loop_ports:?} out to the incast at {root:?}:\n{}",
        texts(&outcome)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Simulated time decides everything in the loop: the same scenario and seed give the same
/// incidents whether the machine is idle or every core is busy (no wall-clock timeout
/// concludes an incident early on a loaded machine).
#[test]
fn the_same_scenario_gives_the_same_incidents_under_machine_load() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let loaded = Scenario::parse(INCAST, "e2e.toml", ".".into()).unwrap();
    let quiet = run(&loaded, &LoopConfig::new(data_dir("quiet"))).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hogs: Vec<_> = (0..cores * 2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x: u64 = 1;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::black_box(x);
                }
            })
        })
        .collect();
    let loaded_run = run(&loaded, &LoopConfig::new(data_dir("loaded")));
    stop.store(true, Ordering::Relaxed);
    for hog in hogs {
        hog.join().unwrap();
    }
    let busy = loaded_run.unwrap();

    assert!(
        !quiet.incidents.is_empty(),
        "the incast must raise incidents"
    );
    assert_eq!(quiet.triggers, busy.triggers);
    assert_eq!(
        serde_json::to_string(&quiet.incidents).unwrap(),
        serde_json::to_string(&busy.incidents).unwrap(),
        "incidents differ between a quiet and a loaded run"
    );
}

/// The loop once more with every switch agent talking BF Runtime (gRPC over TCP, rbfrt) to
/// a model-backed BF Runtime server per switch — as on Tofinos — instead of reading the model
/// in process: the same reports, so the same incidents and diagnoses (the incast's PFC
/// backpressure).
#[test]
fn the_loop_over_bf_runtime_gives_the_diagnoses_of_the_in_process_loop() {
    let loaded = Scenario::parse(INCAST, "e2e.toml", ".".into()).unwrap();
    // The program a Tofino runs (p4/tna): 64 ports, 1-ms epochs.
    let deployed = |dir: &str| {
        let mut config = LoopConfig::new(data_dir(dir));
        config.ports = Some(64);
        config.epoch_log2_ns = 20;
        config
    };
    let local = run(&loaded, &deployed("incast-local")).unwrap();
    let mut config = deployed("incast-bfrt");
    config.hosting = hawkmesh_lab::switch_pipeline::Hosting::BfRuntime;
    let served = run(&loaded, &config).unwrap();
    assert!(
        anomalies(&local)
            .iter()
            .any(|(kind, ..)| kind == "pfc_backpressure"),
        "the in-process loop diagnoses the incast's backpressure:\n{}",
        texts(&local)
    );
    assert_eq!(local.triggers, served.triggers);
    assert_eq!(local.collections.len(), served.collections.len());
    assert_eq!(
        serde_json::to_string(&local.incidents).unwrap(),
        serde_json::to_string(&served.incidents).unwrap(),
        "incidents differ between the in-process and the BF Runtime loop"
    );
    // Over BF Runtime the switches run the deployed program, which the agent checks.
    let mut fitted = LoopConfig::new(data_dir("incast-fitted"));
    fitted.hosting = hawkmesh_lab::switch_pipeline::Hosting::BfRuntime;
    let refused = run(&loaded, &fitted).expect_err("a variant other than the deployed one");
    assert!(
        refused.to_string().contains("ports must be 64, not 8"),
        "{refused}"
    );
    let _ = std::fs::remove_dir_all(data_dir("incast-local"));
    let _ = std::fs::remove_dir_all(data_dir("incast-bfrt"));
}
