//! The counter-only PFC watchdog (SONiC pfcwd style, from counters alone) on the shipped
//! scenarios: every port read every 20 µs, detection and restoration scaled to 200 µs,
//! checked against what each scenario injects (the simulation's ground truth).

use std::collections::BTreeSet;
use std::path::Path;

use hawkmesh_congestion::Verdict;
use hawkmesh_lab::watchdog_eval::{run, WatchdogEval, WatchdogEvalConfig};
use hawkmesh_netsim::Scenario;

fn eval(name: &str) -> WatchdogEval {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(name);
    let loaded = Scenario::load(&path).expect("a shipped scenario loads");
    run(&loaded, &WatchdogEvalConfig::default()).expect("the watchdog runs")
}

/// k4-pfc-storm: h0's NIC sends PAUSE on priority 3 from 1 ms to 2 ms. The first storm is
/// the ToR port toward h0 (the injection's initial port), declared one detection time after
/// the injection began; the pause then spreads and the queues it stalls are storms too (as
/// pfcwd would see them), all after the injection began; once it ends, the ToR port is
/// restored; nothing waits in a cycle.
#[test]
fn a_host_pfc_storm_is_a_storm_on_the_tor_port_toward_that_host() {
    let e = eval("k4-pfc-storm.toml");
    let truth = &e.truth[0];
    assert_eq!(truth.kind, "PfcStorm");
    assert_eq!(truth.initial_ports, ["tor0:0"]);
    let storms = e.storms();
    let (port, prio, since, detected) = *storms.iter().min_by_key(|s| (s.2, s.3)).expect("a storm");
    assert_eq!(port.to_string(), "tor0:0");
    assert_eq!(prio, 3);
    let (start, end) = (truth.start_ns, truth.end_ns);
    let sweep = e.config.spacing_ns + 100 * e.config.turnaround_ns.1;
    assert!(
        since >= start && since <= start + 2 * sweep,
        "stalled from {since}"
    );
    assert!(detected >= since + e.config.detection_ns);
    assert!(
        detected <= start + e.config.detection_ns + 3 * sweep,
        "declared at {detected}"
    );
    assert!(
        storms.iter().all(|s| s.2 >= start),
        "a storm before the injection"
    );
    let restored = e.verdicts.iter().find_map(|v| match v {
        Verdict::Restored {
            port, restored_ns, ..
        } if port.to_string() == "tor0:0" => Some(*restored_ns),
        _ => None,
    });
    let restored = restored.expect("tor0:0 restored");
    assert!(
        restored >= end + e.config.restoration_ns,
        "restored at {restored}"
    );
    assert!(e.deadlocks.is_empty(), "{:?}", e.deadlocks);
}

/// ring-deadlock: every flow routed the long way round a ring of four switches. The
/// watchdog finds one cycle, made of exactly the ring ports of the cyclic buffer dependency,
/// within a few sweeps of the start, and it lasts the whole run.
#[test]
fn a_ring_deadlock_is_a_cycle_of_the_ring_ports() {
    let e = eval("ring-deadlock.toml");
    assert_eq!(e.deadlocks.len(), 1, "{:?}", e.deadlocks);
    let d = &e.deadlocks[0];
    assert_eq!(d.priority, 3);
    let found: BTreeSet<String> = d.cycle.iter().map(|p| p.to_string()).collect();
    let truth: BTreeSet<String> = e.truth[0].loop_ports.iter().cloned().collect();
    assert_eq!(e.truth[0].kind, "RoutingLoop");
    assert_eq!(found, truth);
    assert!(d.first_ns < 200_000, "found at {}", d.first_ns);
    assert!(
        d.sweeps as usize + 5 >= e.sweeps,
        "{} of {} sweeps",
        d.sweeps,
        e.sweeps
    );
}

/// The out-of-loop deadlock: an incast's PFC reaches a two-switch routing loop, which then
/// deadlocks. The cycle found is the loop's two ports.
#[test]
fn an_out_of_loop_deadlock_is_the_routing_loops_cycle() {
    let e = eval("k4-out-of-loop-deadlock.toml");
    let truth = e
        .truth
        .iter()
        .find(|t| t.kind == "RoutingLoop")
        .expect("the loop");
    assert_eq!(e.deadlocks.len(), 1, "{:?}", e.deadlocks);
    let found: BTreeSet<String> = e.deadlocks[0].cycle.iter().map(|p| p.to_string()).collect();
    assert_eq!(found, truth.loop_ports.iter().cloned().collect());
}

/// k4-incast: ten senders burst into h0 and PFC spreads up the tree, but every paused queue
/// keeps transmitting between pauses (per-priority transmitted packets rise in every
/// interval): backpressure, not a storm, and no cycle.
#[test]
fn an_incast_is_neither_a_storm_nor_a_deadlock() {
    let e = eval("k4-incast.toml");
    assert_eq!(e.truth[0].kind, "IncastBurst");
    assert!(e.storms().is_empty(), "{}", e.summary());
    assert!(e.deadlocks.is_empty(), "{}", e.summary());
    assert!(e.sweeps > 100);
}
