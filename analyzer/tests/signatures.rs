//! Every signature of HAWKEYE Table 2 and the tricky cases, from hand-built telemetry. Each
//! test asserts what an operator needs: the anomaly type, the root cause and where it is.

mod common;

use common::*;
use hawkmesh_analyzer::model::{AnomalyType, RootCauseKind};
use hawkmesh_analyzer::testkit::{Hop, IncidentBuilder};
use hawkmesh_analyzer::{
    diagnose_reports, loaded, render, Anomaly, DiagnoseOptions, DiagnosisOutput,
};
use hawkmesh_wire::telemetry::{FiveTuple, PollingContext, PollingEgress, TraceFlags};

fn victim_anomalies(output: &DiagnosisOutput) -> Vec<&Anomaly> {
    output
        .diagnosis
        .anomalies
        .iter()
        .filter(|a| a.affects_victim)
        .collect()
}

fn labels(ports: &[hawkmesh_analyzer::model::PortId]) -> Vec<&str> {
    ports.iter().map(|p| p.label.as_str()).collect()
}

fn root_flows(anomaly: &Anomaly) -> Vec<FiveTuple> {
    anomaly.root_cause.flows.iter().map(|f| f.flow).collect()
}

#[test]
fn micro_burst_incast_backpressure_off_the_victim_path() {
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    incast(&mut builder);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(anomaly.anomaly_type, AnomalyType::PfcBackpressure);
    assert_eq!(anomaly.root_cause.kind, RootCauseKind::FlowContention);
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["tor2.p6"]);
    assert_eq!(anomaly.root_cause.ports[0].peer, "h9");
    assert_eq!(anomaly.root_cause.micro_burst, Some(true));
    let mut flows = root_flows(anomaly);
    flows.sort();
    assert_eq!(flows, vec![burst(1), burst(2), burst(3)]);
    assert!(anomaly
        .root_cause
        .flows
        .iter()
        .all(|f| f.burst == Some(true)));
    // The spreading path runs from the victim's paused port to tor2, which the victim
    // never crosses.
    assert_eq!(anomaly.spreading_paths.len(), 1);
    assert_eq!(
        labels(&anomaly.spreading_paths[0]),
        vec!["tor0.p0", "agg0.p2", "tor2.p6"]
    );
    let victim_ports: Vec<&str> = output
        .diagnosis
        .victim_path
        .iter()
        .map(|h| h.port.label.as_str())
        .collect();
    assert_eq!(victim_ports, vec!["tor0.p0", "agg0.p1", "tor1.p2"]);
    assert!(!victim_ports.contains(&"tor2.p6"));
    // F2 carries the PFC from tor0 to agg0 and from agg0 to tor2.
    assert!(anomaly.spreading_flows.iter().any(|s| s.flow == f2()));
    assert!(anomaly.evidence.iter().any(|e| e.rule == "victim_paused"));
    assert!(anomaly.evidence.iter().any(|e| e.rule == "pfc_wait_for"));
    assert!(output.diagnosis.verdict.contains("micro-burst"));
}

#[test]
fn a_victim_held_at_its_own_nic_follows_the_pfc_branch_its_tor_took_from_the_host() {
    // h0's other flow (h0 → h9) waits at tor0.p(agg0), paused by the incast at tor2.p(h9);
    // tor0's buffer for h0 fills and tor0 pauses h0's NIC, so the victim h0 → h1 — on a
    // path nothing pauses (tor0 → agg1 → tor1) — is held at its sender. The host saw its
    // NIC paused and polled with the PFC bit; tor0's data plane branched the polling packet
    // from h0's port to the paused tor0.p(agg0). That branch leads to the incast.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    builder.flow(
        0,
        victim(),
        &["h0", "tor0", "agg1", "tor1", "h1"],
        &[Hop::new(300), Hop::new(300), Hop::new(300)],
    );
    builder.flow(
        0,
        flow(1, 49300, 19),
        &["h0", "tor0", "agg0", "tor2", "h9"],
        &[
            Hop::new(200).paused(150, 200_000).depth(20_000),
            Hop::new(200).paused(150, 300_000).depth(30_000),
            Hop::new(200).depth(30_000),
        ],
    );
    micro_bursts_into_h9(&mut builder);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(anomaly.anomaly_type, AnomalyType::PfcBackpressure);
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["tor2.p6"]);
    let held = anomaly
        .evidence
        .iter()
        .find(|e| e.rule == "sender_held")
        .expect("sender_held evidence");
    assert_eq!(held.to, "tor0.p0");
}

#[test]
fn a_pause_in_force_on_a_frozen_switch_waits_for_what_the_live_downstream_holds_now() {
    // tor0 froze in epoch 0 with the victim held at tor0.p(agg0), still paused at
    // collection; its ring stopped there. agg0 kept running: it reports epoch 1 only, in
    // which its port toward tor2 is paused behind the incast at tor2.p(h9). The pause at
    // tor0 spans both rings: it waits for what agg0 holds now, not for telemetry that
    // does not exist (an unresolved origin).
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 2, victim());
    builder.flow(
        0,
        victim(),
        &["h0", "tor0", "agg0", "tor1", "h1"],
        &[Hop::new(300).paused(300, 200_000), Hop::new(0), Hop::new(0)],
    );
    builder.flow(
        1,
        flow(4, 49400, 19),
        &["h3", "tor1", "agg0", "tor2", "h9"],
        &[
            Hop::new(200),
            Hop::new(200).paused(150, 300_000).depth(30_000),
            Hop::new(200).depth(30_000),
        ],
    );
    micro_bursts_into_h9_in(&mut builder, 1);
    builder.paused_at_collection("tor0", "agg0");
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::PfcBackpressure,
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["tor2.p6"]);
    assert_eq!(
        labels(&anomaly.spreading_paths[0]),
        vec!["tor0.p0", "agg0.p2", "tor2.p6"]
    );
    assert!(output
        .diagnosis
        .findings
        .iter()
        .any(|f| f.code == "pause_across_rings"));
}

#[test]
fn large_flow_blocked_by_bursts_is_a_victim_not_a_contributor() {
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    incast(&mut builder);
    let output = run(&builder);
    let sink = port(builder.topology(), "tor2", "h9");
    let weights = output.graph.contributions(sink);
    let long = weights
        .iter()
        .find(|(f, _)| *f == long_flow())
        .map(|(_, w)| *w)
        .expect("the long flow has a port→flow edge");
    assert!(long < 0.0, "long flow weight {long} must be negative");
    for index in 1..=3 {
        let w = weights
            .iter()
            .find(|(f, _)| *f == burst(index))
            .map(|(_, w)| *w)
            .expect("burst edge");
        assert!(w > 0.0 && w > long);
    }
    let anomaly = victim_anomalies(&output)[0];
    assert!(!root_flows(anomaly).contains(&long_flow()));
}

#[test]
fn pfc_storm_from_host_injection() {
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    storm_at_h7(&mut builder, true);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(anomaly.anomaly_type, AnomalyType::PfcStorm);
    assert_eq!(anomaly.root_cause.kind, RootCauseKind::HostPfcInjection);
    assert_eq!(anomaly.root_cause.injector.as_deref(), Some("h7"));
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["tor2.p7"]);
    assert!(anomaly.root_cause.flows.is_empty());
    assert_eq!(
        labels(&anomaly.spreading_paths[0]),
        vec!["tor0.p1", "agg1.p2", "tor2.p7"]
    );
    assert!(anomaly
        .evidence
        .iter()
        .any(|e| e.rule == "no_flow_contention"));
    assert!(anomaly
        .evidence
        .iter()
        .any(|e| e.rule == "host_pfc_injection"));
}

#[test]
fn a_storm_whose_paused_packets_never_left_is_still_traced_to_the_host() {
    // The storm froze the path: every packet counted at enqueue is still queued, so no
    // queue depth was measured anywhere (depths are taken when packets leave). The bytes
    // held behind the pause must still make the wait-for edges.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    builder.flow(
        0,
        flow(4, 49300, 17),
        &["h3", "tor1", "agg1", "tor2", "h7"],
        &[
            Hop::new(300).paused(300, 0),
            Hop::new(300).paused(300, 0),
            Hop::new(300).paused(300, 0),
        ],
    );
    builder.flow(
        0,
        victim(),
        &["h0", "tor0", "agg1", "tor2", "h7"],
        &[
            Hop::new(250).paused(250, 0),
            Hop::new(250).paused(250, 0),
            Hop::new(250).paused(250, 0),
        ],
    );
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(anomaly.anomaly_type, AnomalyType::PfcStorm);
    assert_eq!(anomaly.root_cause.injector.as_deref(), Some("h7"));
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["tor2.p7"]);
}

/// Epoch 0: two micro-bursts h1 → h2 contend at s1.p(s2).
fn bursts_into_the_ring(builder: &mut IncidentBuilder) {
    bursts_into_the_ring_in(builder, 0);
}

/// [`bursts_into_the_ring`] in `epoch`.
fn bursts_into_the_ring_in(builder: &mut IncidentBuilder, epoch: usize) {
    for index in 0..2u8 {
        builder.flow(
            epoch,
            flow(30 + index, 52000 + u16::from(index), 3),
            &["h1", "s1", "s2", "h2"],
            &[
                Hop::new(400).depth(200_000).window(10_000, 30_000),
                Hop::new(400),
            ],
        );
    }
}

#[test]
fn deadlock_with_initiator_in_loop() {
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 2, victim());
    // Epoch 0: micro-bursts h1 → h2 contend at s1.p(s2) and start the pause cascade.
    bursts_into_the_ring(&mut builder);
    // Epoch 1: the cyclic buffer dependency is paused all around.
    ring_flows(&mut builder, 1);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(anomaly.anomaly_type, AnomalyType::DeadlockInitiatorInLoop);
    assert_eq!(anomaly.root_cause.kind, RootCauseKind::FlowContention);
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["s1.p1"]);
    let mut loop_ports = labels(&anomaly.loop_ports);
    loop_ports.sort();
    assert_eq!(loop_ports, vec!["s0.p0", "s1.p1", "s2.p1", "s3.p1"]);
    let mut flows = root_flows(anomaly);
    flows.sort();
    assert_eq!(flows, vec![flow(30, 52000, 3), flow(31, 52001, 3)]);
    assert!(anomaly.loop_flows.contains(&victim()));
    assert_eq!(anomaly.loop_flows.len(), 4);
    assert!(anomaly
        .evidence
        .iter()
        .any(|e| e.rule == "cyclic_buffer_dependency"));
}

#[test]
fn a_loop_whose_initiating_burst_predates_the_window_names_the_loop_ports_as_root() {
    // Only the frozen cycle is in the telemetry: no loop port shows contention (the burst
    // that closed it is older than the ring). The root cause is the loop itself — its
    // ports, which an operator breaks it at — not an empty list.
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 1, victim());
    ring_flows(&mut builder, 0);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(anomaly.anomaly_type, AnomalyType::DeadlockInitiatorInLoop);
    assert_eq!(anomaly.root_cause.kind, RootCauseKind::Unknown);
    let mut root = labels(&anomaly.root_cause.ports);
    root.sort();
    assert_eq!(root, vec!["s0.p0", "s1.p1", "s2.p1", "s3.p1"]);
    assert!(anomaly
        .evidence
        .iter()
        .any(|e| e.rule == "no_contention_in_loop"));
}

#[test]
fn a_trickle_out_of_a_frozen_loop_is_not_an_out_of_loop_initiator() {
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 2, victim());
    bursts_into_the_ring(&mut builder);
    ring_flows(&mut builder, 1);
    // A few packets from h1 cross the frozen loop port s1.p(s2) and leave the loop toward
    // h9, meeting some queue there.
    builder.flow(
        1,
        flow(60, 52100, 19),
        &["h1", "s1", "s2", "h9"],
        &[
            Hop::new(30).paused(25, 300_000).depth(50_000),
            Hop::new(30).depth(60_000).window(1_000, 100_000),
        ],
    );
    let reports = builder.build_reports().expect("reports");
    let diagnose = |options: &DiagnoseOptions| {
        diagnose_reports(
            loaded(reports.clone()),
            builder.topology().clone(),
            victim(),
            options,
        )
        .expect("diagnosis")
    };
    let output = diagnose(&DiagnoseOptions::default());
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(
        anomalies[0].anomaly_type,
        AnomalyType::DeadlockInitiatorInLoop,
        "{}",
        render::to_text(&output.diagnosis)
    );
    let toward_h9 = port(builder.topology(), "s2", "h9");
    let toward_h9 = format!("s2.p{}", toward_h9.port);
    assert!(
        anomalies[0]
            .evidence
            .iter()
            .any(|e| e.rule == "weak_loop_exit" && e.to == toward_h9),
        "{:?}",
        anomalies[0].evidence
    );
    // Counting every exit, the loop's own contention still outweighs the trickle's queue.
    let output = diagnose(&DiagnoseOptions {
        min_loop_exit_share: 0.0,
        ..DiagnoseOptions::default()
    });
    let anomalies = victim_anomalies(&output);
    assert_eq!(
        anomalies[0].anomaly_type,
        AnomalyType::DeadlockInitiatorInLoop,
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert!(
        anomalies[0]
            .evidence
            .iter()
            .any(|e| e.rule == "loop_contention_dominates"),
        "{:?}",
        anomalies[0].evidence
    );
    // Counting every exit with no contention check (HAWKEYE Alg. 2 as written) makes the
    // trickle the initiator.
    let output = diagnose(&DiagnoseOptions {
        min_loop_exit_share: 0.0,
        loop_contention_check: false,
        ..DiagnoseOptions::default()
    });
    let anomalies = victim_anomalies(&output);
    assert_ne!(
        anomalies[0].anomaly_type,
        AnomalyType::DeadlockInitiatorInLoop,
        "{}",
        render::to_text(&output.diagnosis)
    );
}

/// Epoch 0: traffic all around the ring, queues building, nothing paused. Epoch 1: the
/// victim paused at s0 and s1, a flow h1 → h3 paused at s1 and s2 that never reached s3,
/// and s3's port toward s0 paused at collection.
fn ring_frozen_after_epoch_0() -> IncidentBuilder {
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 2, victim());
    let queued = [
        Hop::new(200).depth(50_000),
        Hop::new(200).depth(50_000),
        Hop::new(200),
    ];
    ring_flows_all(&mut builder, 0, &queued, &queued);
    builder.flow(
        1,
        victim(),
        &["h0", "s0", "s1", "s2", "h2"],
        &[
            Hop::new(200).paused(180, 300_000),
            Hop::new(200).paused(180, 300_000),
            Hop::new(200),
        ],
    );
    builder.flow(
        1,
        flow(2, 49401, 4),
        &["h1", "s1", "s2", "s3", "h3"],
        &[
            Hop::new(200).paused(180, 300_000),
            Hop::new(200).paused(180, 300_000),
            Hop::new(0),
        ],
    );
    builder.paused_at_collection("s3", "s0");
    builder
}

/// The victim's one anomaly is the ring's deadlock, initiator in the loop, all four ports.
fn assert_ring_deadlock_in_loop(output: &DiagnosisOutput) {
    let anomalies = victim_anomalies(output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(
        anomalies[0].anomaly_type,
        AnomalyType::DeadlockInitiatorInLoop,
        "{}",
        render::to_text(&output.diagnosis)
    );
    let mut loop_ports = labels(&anomalies[0].loop_ports);
    loop_ports.sort();
    assert_eq!(loop_ports, vec!["s0.p0", "s1.p1", "s2.p1", "s3.p1"]);
}

#[test]
fn a_frozen_loop_switch_closes_the_cycle_with_its_last_recorded_epoch() {
    // s3 records nothing in epoch 1 (no packet enters it any more), yet s2.p(s3) holds
    // paused packets and s3.p(s0) is paused at collection: the edge s2.p(s3) → s3.p(s0)
    // can only come from s3's last recorded epoch.
    let builder = ring_frozen_after_epoch_0();
    let output = run(&builder);
    assert_ring_deadlock_in_loop(&output);
    assert!(output
        .diagnosis
        .findings
        .iter()
        .any(|f| f.code == "held_traffic" && f.message.contains("s3")));
}

#[test]
fn a_port_paused_all_epoch_waits_for_what_its_traffic_left_downstream() {
    // As above, but s3 is not frozen: a flow from h3 enters it in epoch 1 and is held at
    // s3.p(s0). s2.p(s3) and s3.p(s0) sent nothing downstream in epoch 1 (paused all
    // along), so the downstream switches' epoch 1 meters have no row from them; what they
    // wait for is what their traffic left there in epoch 0.
    let mut builder = ring_frozen_after_epoch_0();
    builder.flow(
        1,
        flow(70, 52200, 1),
        &["h3", "s3", "s0", "h0"],
        &[Hop::new(20).paused(20, 300_000), Hop::new(0)],
    );
    let output = run(&builder);
    assert_ring_deadlock_in_loop(&output);
}

#[test]
fn a_victim_held_behind_a_pause_is_traced_from_the_polling_verdict() {
    // A deadlock where the victim's packets never left the paused queues: its flow records
    // count no paused packet, but the polling packet found its egress ports paused (the
    // CPU copy's PFC bit on the victim port). The walk must still follow the PFC causality.
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 2, victim());
    bursts_into_the_ring(&mut builder);
    // The victim h0 → h2: a few packets left before the deadlock, none of them paused.
    ring_flows_with_victim(&mut builder, 1, &[Hop::new(5), Hop::new(5), Hop::new(5)]);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert!(
        anomalies
            .iter()
            .any(|a| a.anomaly_type == AnomalyType::DeadlockInitiatorInLoop),
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert!(
        anomalies
            .iter()
            .all(|a| a.anomaly_type != AnomalyType::NormalFlowContention),
        "a paused victim is not a contention victim: {}",
        render::to_text(&output.diagnosis)
    );
}

/// h9 hangs off s2 and pauses s2.p(h9); flow G h1 → h9 feeds it from s1, paused at both
/// hops.
fn h9_pauses_s2(builder: &mut IncidentBuilder) {
    h9_pauses_s2_in(builder, 0);
}

/// [`h9_pauses_s2`] in `epoch`.
fn h9_pauses_s2_in(builder: &mut IncidentBuilder, epoch: usize) {
    builder.flow(
        epoch,
        flow(2, 49500, 19),
        &["h1", "s1", "s2", "h9"],
        &[
            Hop::new(200).paused(180, 300_000),
            Hop::new(200).paused(190, 400_000).depth(100_000),
        ],
    );
}

#[test]
fn deadlock_with_initiator_out_of_loop_by_host_injection() {
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 1, victim());
    ring_flows(&mut builder, 0);
    h9_pauses_s2(&mut builder);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::DeadlockInitiatorOutOfLoopHostInjection
    );
    assert_eq!(anomaly.root_cause.kind, RootCauseKind::HostPfcInjection);
    assert_eq!(anomaly.root_cause.injector.as_deref(), Some("h9"));
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["s2.p3"]);
    assert_eq!(anomaly.loop_ports.len(), 4);
    assert!(anomaly.evidence.iter().any(|e| e.rule == "loop_exit"));
    // The path goes from the victim's port into the loop and out to the injector's port.
    let path = labels(&anomaly.spreading_paths[0]);
    assert_eq!(path.first(), Some(&"s0.p0"));
    assert_eq!(path.last(), Some(&"s2.p3"));
}

/// Three bursts h1 → s1 → s2 → `to` (a host of s2 with address 10.0.0.`to_ip`), paused at
/// s1.p(s2) and contending unpaused at s2.p(`to`) with mean queue `depth` bytes.
fn bursts_from_h1_via_s2(builder: &mut IncidentBuilder, to: &str, to_ip: u8, depth: u64) {
    bursts_from_h1_via_s2_in(builder, 0, to, to_ip, depth);
}

/// [`bursts_from_h1_via_s2`] in `epoch`.
fn bursts_from_h1_via_s2_in(
    builder: &mut IncidentBuilder,
    epoch: usize,
    to: &str,
    to_ip: u8,
    depth: u64,
) {
    for index in 0..3u8 {
        builder.flow(
            epoch,
            flow(40 + index, 53000 + u16::from(index), to_ip),
            &["h1", "s1", "s2", to],
            &[
                Hop::new(150).paused(100, 300_000),
                Hop::new(300).depth(depth).window(60_000, 70_000),
            ],
        );
    }
}

#[test]
fn deadlock_with_initiator_out_of_loop_by_flow_contention() {
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 1, victim());
    ring_flows(&mut builder, 0);
    // Bursts h1 → h9 contend at s2.p(h9), which is not paused.
    bursts_from_h1_via_s2(&mut builder, "h9", 19, 150_000);
    let output = run(&builder);
    let anomaly = victim_anomalies(&output)[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::DeadlockInitiatorOutOfLoopFlowContention,
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["s2.p3"]);
    assert_eq!(anomaly.root_cause.flows.len(), 3);
    assert_eq!(anomaly.root_cause.micro_burst, Some(true));
    assert_eq!(anomaly.loop_ports.len(), 4);
}

#[test]
fn a_pause_a_loop_port_waited_out_before_the_loop_formed_is_not_its_initiator() {
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 3, victim());
    // Epoch 0: bursts h1 → h9 contend at s2.p(h9) and pause s1's port toward s2 — a loop
    // port waits for a queue outside the loop, but no loop has formed yet.
    bursts_from_h1_via_s2(&mut builder, "h9", 19, 150_000);
    // Epoch 1: micro-bursts h1 → h2 contend at s1.p(s2), unpaused.
    bursts_into_the_ring_in(&mut builder, 1);
    // Epoch 2: the cyclic buffer dependency is paused all around.
    ring_flows(&mut builder, 2);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::DeadlockInitiatorInLoop,
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["s1.p1"]);
    let toward_h9 = port(builder.topology(), "s2", "h9");
    let toward_h9 = format!("s2.p{}", toward_h9.port);
    assert!(
        anomaly
            .evidence
            .iter()
            .any(|e| e.rule == "loop_exit_apart" && e.from == "s1.p1" && e.to == toward_h9),
        "{:?}",
        anomaly.evidence
    );
}

/// The ring's four flows in `epoch`, moving freely: nothing paused, no queue.
fn ring_flows_unpaused(builder: &mut IncidentBuilder, epoch: usize) {
    let free = [Hop::new(200), Hop::new(200), Hop::new(200)];
    ring_flows_all(builder, epoch, &free, &free);
}

#[test]
fn a_queue_outside_that_a_deadlocked_loop_meets_later_did_not_initiate_it() {
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 3, victim());
    // Epoch 0: the ring's flows move freely. Epoch 1: the cyclic buffer dependency is
    // paused all around — deadlocked (its initiating burst left no contention behind).
    ring_flows_unpaused(&mut builder, 0);
    ring_flows(&mut builder, 1);
    // Epoch 2: still deadlocked, and now bursts h1 → h9 queue deeply at s2.p(h9), so the
    // loop port s1.p(s2) also waits for a queue outside the loop — one that only appeared
    // after the loop had deadlocked, so it cannot be what started it (an out-of-loop
    // initiator's PFC is what pauses the loop's ports).
    ring_flows(&mut builder, 2);
    bursts_from_h1_via_s2_in(&mut builder, 2, "h9", 19, 400_000);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::DeadlockInitiatorInLoop,
        "{}",
        render::to_text(&output.diagnosis)
    );
    let mut root = labels(&anomaly.root_cause.ports);
    root.sort();
    assert_eq!(root, vec!["s0.p0", "s1.p1", "s2.p1", "s3.p1"]);
    let toward_h9 = port(builder.topology(), "s2", "h9");
    let toward_h9 = format!("s2.p{}", toward_h9.port);
    assert!(
        anomaly
            .evidence
            .iter()
            .any(|e| e.rule == "loop_exit_after_deadlock" && e.to == toward_h9),
        "{:?}",
        anomaly.evidence
    );

    // The same queue already there while the ring still moved, before the loop
    // deadlocked, is the out-of-loop initiator.
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 3, victim());
    ring_flows_unpaused(&mut builder, 0);
    bursts_from_h1_via_s2_in(&mut builder, 0, "h9", 19, 400_000);
    ring_flows(&mut builder, 1);
    ring_flows(&mut builder, 2);
    bursts_from_h1_via_s2_in(&mut builder, 2, "h9", 19, 400_000);
    let output = run(&builder);
    let anomaly = victim_anomalies(&output)[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::DeadlockInitiatorOutOfLoopFlowContention,
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert_eq!(labels(&anomaly.root_cause.ports), vec![toward_h9.as_str()]);

    // A pause a host injects beyond the exit freezes the path to it, so its weight can
    // show only after the loop's ports all paused: such an exit still holds the loop.
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 3, victim());
    ring_flows_unpaused(&mut builder, 0);
    ring_flows(&mut builder, 1);
    ring_flows(&mut builder, 2);
    h9_pauses_s2_in(&mut builder, 2);
    let output = run(&builder);
    let anomaly = victim_anomalies(&output)[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::DeadlockInitiatorOutOfLoopHostInjection,
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert_eq!(anomaly.root_cause.injector.as_deref(), Some("h9"));
}

/// Three long flows h1 → s1 → s2 → h9 in `epoch`, paused at s1.p(s2) and queueing at
/// s2.p(h9) over the whole epoch: sustained contention, not a micro-burst.
fn sustained_from_h1_via_s2_in(builder: &mut IncidentBuilder, epoch: usize) {
    for index in 0..3u8 {
        builder.flow(
            epoch,
            flow(70 + index, 54000 + u16::from(index), 19),
            &["h1", "s1", "s2", "h9"],
            &[
                Hop::new(800).paused(400, 300_000),
                Hop::new(800).depth(60_000).window(WHOLE.0, WHOLE.1),
            ],
        );
    }
}

#[test]
fn a_sustained_queue_that_paused_a_loop_port_before_the_loop_formed_initiated_it() {
    // Epoch 0: long flows h1 → h9 queue at s2.p(h9) all epoch and pause s1.p(s2) — no loop
    // yet. Epoch 1: the ring closes; bursts h1 → h2 also contend at the loop port s1.p(s2),
    // more than the queue outside, while the queue toward h9 lasts. The queue that was
    // already holding a loop port before the loop's own dependencies existed, and lasted,
    // started the deadlock: out of loop, although the loop's own contention is larger
    // (HAWKEYE Table 2: the initiator's PFC spreads into the loop).
    // 3,400 kB from h1 in an epoch of 131 µs: its link is a 400G one.
    let mut builder = IncidentBuilder::new(ring_with_fast_h1(), EPOCH_NS, 2, victim());
    sustained_from_h1_via_s2_in(&mut builder, 0);
    ring_flows(&mut builder, 1);
    bursts_into_the_ring_in(&mut builder, 1);
    sustained_from_h1_via_s2_in(&mut builder, 1);
    let output = run(&builder);
    let anomaly = victim_anomalies(&output)[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::DeadlockInitiatorOutOfLoopFlowContention,
        "{}",
        render::to_text(&output.diagnosis)
    );
    let toward_h9 = port(builder.topology(), "s2", "h9");
    assert_eq!(
        labels(&anomaly.root_cause.ports),
        vec![format!("s2.p{}", toward_h9.port).as_str()]
    );
}

/// Two long flows h1 → s1 → s2 → h2 queueing deeply at the loop port s1.p(s2) over most
/// of `epoch` (longer than a micro-burst): the loop's own lasting contention.
fn sustained_into_the_ring_in(builder: &mut IncidentBuilder, epoch: usize) {
    for index in 0..2u8 {
        builder.flow(
            epoch,
            flow(30 + index, 52000 + u16::from(index), 3),
            &["h1", "s1", "s2", "h2"],
            &[
                Hop::new(1_200).depth(400_000).window(0, 80_000),
                Hop::new(1_200),
            ],
        );
    }
}

#[test]
fn a_small_queue_outside_that_the_loops_own_lasting_contention_outgrew_did_not_initiate_it() {
    // Epoch 0: long flows h1 → h9 queue a little at s2.p(h9) and pause s1.p(s2) — no loop
    // yet. Epoch 1: the ring closes while long flows h1 → h2 queue at the loop port
    // s1.p(s2) far more deeply, and for as long, as anything outside: the loop's own
    // traffic congested it, and the early exit was background it outgrew.
    let mut builder = IncidentBuilder::new(ring_with_fast_h1(), EPOCH_NS, 2, victim());
    sustained_from_h1_via_s2_in(&mut builder, 0);
    ring_flows(&mut builder, 1);
    sustained_into_the_ring_in(&mut builder, 1);
    sustained_from_h1_via_s2_in(&mut builder, 1);
    let output = run(&builder);
    let anomaly = victim_anomalies(&output)[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::DeadlockInitiatorInLoop,
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["s1.p1"]);
    let toward_h9 = port(builder.topology(), "s2", "h9");
    assert!(
        anomaly
            .evidence
            .iter()
            .any(|e| e.rule == "loop_outgrew_early_exit"
                && e.to == format!("s2.p{}", toward_h9.port)),
        "{:?}",
        anomaly.evidence
    );
}

#[test]
fn a_queue_outside_that_appears_after_the_loop_began_forming_did_not_initiate_it() {
    // Epoch 0: ring flows F1 and F2 are paused at their ring hops — the cyclic buffer
    // dependency is forming (s0.p(s1) is not paused yet, so the loop is not deadlocked).
    // Epoch 1: the ring is paused all around, and only now do bursts h1 → h9 queue deeply
    // at s2.p(h9), deeper than anything in the loop: that queue came after the loop's
    // dependencies had begun and cannot have started them.
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 2, victim());
    let paused = [
        Hop::new(200).paused(180, 300_000).depth(50_000),
        Hop::new(200).paused(180, 300_000).depth(50_000),
        Hop::new(200),
    ];
    let free = [Hop::new(200), Hop::new(200), Hop::new(200)];
    for i in 0..4u8 {
        let f = if i == 0 {
            victim()
        } else {
            flow(1 + i, 49400 + u16::from(i), 1 + (i + 2) % 4)
        };
        let path = [
            format!("h{i}"),
            format!("s{i}"),
            format!("s{}", (i + 1) % 4),
            format!("s{}", (i + 2) % 4),
            format!("h{}", (i + 2) % 4),
        ];
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        builder.flow(0, f, &path, if i == 1 || i == 2 { &paused } else { &free });
    }
    ring_flows(&mut builder, 1);
    bursts_from_h1_via_s2_in(&mut builder, 1, "h9", 19, 400_000);
    let output = run(&builder);
    let anomaly = victim_anomalies(&output)[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::DeadlockInitiatorInLoop,
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert!(
        anomaly
            .evidence
            .iter()
            .any(|e| e.rule == "loop_before_exits"),
        "{:?}",
        anomaly.evidence
    );
}

#[test]
fn normal_flow_contention_without_pfc() {
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    let elephant = flow(3, 49999, 2);
    builder.flow(
        0,
        victim(),
        &["h0", "tor0", "agg0", "tor1", "h1"],
        &[Hop::new(150), Hop::new(150), Hop::new(150).depth(60_000)],
    );
    builder.flow(
        0,
        elephant,
        &["h2", "tor0", "agg1", "tor1", "h1"],
        &[
            Hop::new(1200),
            Hop::new(1200),
            Hop::new(1200).depth(120_000).window(20_000, 80_000),
        ],
    );
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(anomaly.anomaly_type, AnomalyType::NormalFlowContention);
    assert_eq!(anomaly.root_cause.kind, RootCauseKind::FlowContention);
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["tor1.p2"]);
    assert_eq!(root_flows(anomaly), vec![elephant]);
    assert!(anomaly.spreading_paths.is_empty());
    assert_eq!(output.graph.stats.port_port_edges, 0);
}

#[test]
fn contention_and_pfc_at_the_same_port() {
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    incast(&mut builder);
    // Two short flows also contend among the non-paused packets at tor0.p(agg0).
    let local = [flow(3, 49600, 2), flow(3, 49601, 2)];
    for f in local {
        builder.flow(
            0,
            f,
            &["h2", "tor0", "agg0", "tor1", "h1"],
            &[
                Hop::new(400).depth(180_000).window(90_000, 100_000),
                Hop::new(400),
                Hop::new(400),
            ],
        );
    }
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    // The root cause stays the incast downstream, not the shared port.
    assert_eq!(anomaly.anomaly_type, AnomalyType::PfcBackpressure);
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["tor2.p6"]);
    let shared = anomaly
        .local_contention
        .iter()
        .find(|c| c.port.label == "tor0.p0")
        .expect("local contention at the shared port is reported");
    let mut flows: Vec<FiveTuple> = shared.flows.iter().map(|f| f.flow).collect();
    flows.sort();
    assert_eq!(flows, local.to_vec());
}

#[test]
fn two_independent_anomalies_are_reported_separately() {
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    incast(&mut builder);
    storm_at_h7(&mut builder, false);
    let output = run(&builder);
    let anomalies = &output.diagnosis.anomalies;
    assert_eq!(anomalies.len(), 2, "{}", render::to_text(&output.diagnosis));
    assert_eq!(anomalies[0].anomaly_type, AnomalyType::PfcBackpressure);
    assert!(anomalies[0].affects_victim);
    assert_eq!(anomalies[1].anomaly_type, AnomalyType::PfcStorm);
    assert!(!anomalies[1].affects_victim);
    assert_eq!(anomalies[1].root_cause.injector.as_deref(), Some("h7"));
    assert_eq!(
        labels(&anomalies[1].spreading_paths[0]),
        vec!["tor1.p1", "agg1.p2", "tor2.p7"]
    );
    assert_eq!(anomalies[0].id, 1);
    assert_eq!(anomalies[1].id, 2);
}

#[test]
fn missing_downstream_report_is_explicitly_unresolved() {
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    incast(&mut builder);
    builder.silence("tor2");
    let output = run(&builder);
    let anomaly = victim_anomalies(&output)[0];
    assert_eq!(anomaly.anomaly_type, AnomalyType::UnresolvedPfc);
    assert_eq!(anomaly.root_cause.kind, RootCauseKind::Unknown);
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["agg0.p2"]);
    let codes: Vec<&str> = output
        .diagnosis
        .findings
        .iter()
        .map(|f| f.code.as_str())
        .collect();
    assert!(codes.contains(&"pfc_path_leaves_telemetry"), "{codes:?}");
    assert!(codes.contains(&"polled_switch_missing"), "{codes:?}");
}

#[test]
fn eviction_digests_are_merged_and_losses_reported() {
    let mut plain = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    incast(&mut plain);
    let mut split = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    // Same incident, but every burst record is half an eviction digest.
    split.flow(
        0,
        victim(),
        &["h0", "tor0", "agg0", "tor1", "h1"],
        &[
            Hop::new(300)
                .paused(200, 200_000)
                .depth(20_000)
                .evicted_half(),
            Hop::new(300),
            Hop::new(300),
        ],
    );
    split.flow(
        0,
        f2(),
        &["h2", "tor0", "agg0", "tor2", "h9"],
        &[
            Hop::new(200).paused(150, 200_000).depth(20_000),
            Hop::new(200).paused(150, 300_000).depth(30_000),
            Hop::new(200).depth(30_000),
        ],
    );
    for index in 1..=3 {
        let host = format!("a{index}");
        split.flow(
            0,
            burst(index),
            &[host.as_str(), "tor2", "h9"],
            &[Hop::new(200)
                .depth(150_000)
                .window(40_000, 55_000)
                .evicted_half()],
        );
    }
    split.flow(
        0,
        long_flow(),
        &["a4", "tor2", "h9"],
        &[Hop::new(700).depth(30_000)],
    );
    split.lose_evictions("tor1", 0, 3);
    let a = run(&plain);
    let b = run(&split);
    assert_eq!(
        a.diagnosis.anomalies[0].root_cause,
        b.diagnosis.anomalies[0].root_cause
    );
    assert!(b
        .diagnosis
        .findings
        .iter()
        .any(|f| f.code == "lost_evictions" && f.message.contains("tor1")));
}

#[test]
fn untimed_records_fall_back_to_the_paper_replay_and_say_so() {
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    builder.flow(
        0,
        victim(),
        &["h0", "tor0", "agg0", "tor1", "h1"],
        &[
            Hop::new(100),
            Hop::new(100),
            Hop::new(100).depth(90_000).untimed(),
        ],
    );
    builder.flow(
        0,
        flow(3, 49999, 2),
        &["h2", "tor0", "agg1", "tor1", "h1"],
        &[
            Hop::new(1400),
            Hop::new(1400),
            Hop::new(1400).depth(40_000).untimed(),
        ],
    );
    let output = run(&builder);
    let anomaly = victim_anomalies(&output)[0];
    assert_eq!(anomaly.anomaly_type, AnomalyType::NormalFlowContention);
    assert_eq!(root_flows(anomaly), vec![flow(3, 49999, 2)]);
    assert!(output
        .diagnosis
        .findings
        .iter()
        .any(|f| f.code == "untimed_replay"));
}

#[test]
fn healthy_fabric_has_no_anomaly() {
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 2, victim());
    for epoch in 0..2 {
        builder.flow(
            epoch,
            victim(),
            &["h0", "tor0", "agg0", "tor1", "h1"],
            &[Hop::new(500), Hop::new(500), Hop::new(500).depth(1_000)],
        );
    }
    let output = run(&builder);
    assert!(output.diagnosis.anomalies.is_empty());
    assert!(output.diagnosis.verdict.starts_with("no anomaly"));
}

/// Contention at tor2.p(h7) from two bursts toward h7 in `epoch`, nobody paused.
fn burst_toward_h7(builder: &mut IncidentBuilder, epoch: usize) {
    for index in 0..2u8 {
        builder.flow(
            epoch,
            flow(40 + index, 53000 + u16::from(index), 17),
            &["a1", "tor2", "h7"],
            &[Hop::new(400).depth(150_000).window(10_000, 30_000)],
        );
    }
}

#[test]
fn a_storm_that_outlasts_an_earlier_burst_is_a_storm() {
    // Epoch 0: a burst contends at tor2.p(h7). Epoch 1: h7 pauses the port and the pause
    // spreads to the victim. The port's latest state is the host's pause.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 2, victim());
    burst_toward_h7(&mut builder, 0);
    // Packets of the victim in epoch 0 keep its path known.
    builder.flow(
        0,
        victim(),
        &["h0", "tor0", "agg1", "tor2", "h7"],
        &[Hop::new(50), Hop::new(50), Hop::new(50)],
    );
    let mut storm = builder.clone();
    storm_in_epoch(&mut storm, 1);
    let output = run(&storm);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(anomalies[0].anomaly_type, AnomalyType::PfcStorm);
    assert_eq!(anomalies[0].root_cause.injector.as_deref(), Some("h7"));
    assert!(anomalies[0]
        .evidence
        .iter()
        .any(|e| e.rule == "earlier_flow_contention"));
}

/// storm_at_h7's pattern in `epoch`, the victim paused along it.
fn storm_in_epoch(builder: &mut IncidentBuilder, epoch: usize) {
    builder.flow(
        epoch,
        flow(4, 49300, 17),
        &["h3", "tor1", "agg1", "tor2", "h7"],
        &[
            Hop::new(300).paused(220, 250_000).depth(40_000),
            Hop::new(300).paused(240, 300_000).depth(40_000),
            Hop::new(300).paused(260, 400_000).depth(120_000),
        ],
    );
    builder.flow(
        epoch,
        victim(),
        &["h0", "tor0", "agg1", "tor2", "h7"],
        &[
            Hop::new(250).paused(180, 200_000).depth(30_000),
            Hop::new(250).paused(200, 300_000).depth(40_000),
            Hop::new(250).paused(220, 400_000).depth(120_000),
        ],
    );
}

#[test]
fn a_pause_still_in_force_at_collection_decides_a_port_that_also_saw_a_burst() {
    // Epochs 0–1: a burst contends at tor2.p(h7); h7 pauses the port in epoch 1 — the
    // contention came first and lasted as long as the pause seen in the counters, so it
    // dominates. Epoch 2: nothing could reach the frozen port, but the switch reports it
    // still paused at collection: the pause outlasted the burst.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 3, victim());
    burst_toward_h7(&mut builder, 0);
    burst_toward_h7(&mut builder, 1);
    storm_in_epoch(&mut builder, 1);
    // Some traffic elsewhere at tor2 in epoch 2, so that epoch is read at tor2.
    builder.flow(
        2,
        flow(44, 53100, 19),
        &["a2", "tor2", "h9"],
        &[Hop::new(20)],
    );
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(anomalies[0].anomaly_type, AnomalyType::PfcBackpressure);

    builder.paused_at_collection("tor2", "h7");
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(anomalies[0].anomaly_type, AnomalyType::PfcStorm);
    assert_eq!(anomalies[0].root_cause.injector.as_deref(), Some("h7"));
    assert!(anomalies[0]
        .evidence
        .iter()
        .any(|e| e.rule == "host_pfc_injection" && e.note.contains("still paused")));
}

#[test]
fn the_reported_end_of_a_host_pause_decides_whether_it_outlasted_the_burst() {
    // A burst toward h7 contends at tor2.p(h7) in epochs 0–1 (enqueues up to 30 µs into
    // each epoch) and h7 pauses the port in epoch 1. By epochs alone the contention came
    // first and lasted as long; the pause's reported end decides to the nanosecond.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 2, victim());
    burst_toward_h7(&mut builder, 0);
    burst_toward_h7(&mut builder, 1);
    storm_in_epoch(&mut builder, 1);
    let epoch1 = builder.epoch_start(1);

    let mut ended_after = builder.clone();
    ended_after.pause_ended("tor2", "h7", epoch1 + 200_000);
    let output = run(&ended_after);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(anomalies[0].anomaly_type, AnomalyType::PfcStorm);
    assert_eq!(anomalies[0].root_cause.injector.as_deref(), Some("h7"));

    let mut ended_before = builder.clone();
    ended_before.pause_ended("tor2", "h7", epoch1 + 20_000);
    let output = run(&ended_before);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(anomalies[0].anomaly_type, AnomalyType::PfcBackpressure);
}

#[test]
fn a_burst_and_a_host_pause_in_the_same_epoch_is_a_storm() {
    // The pause's backlog: h7 pauses tor2.p(h7) and the packets that queue behind it show
    // as contention in the same epoch. The NIC's pause is the cause.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    burst_toward_h7(&mut builder, 0);
    storm_in_epoch(&mut builder, 0);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(anomalies[0].anomaly_type, AnomalyType::PfcStorm);
    assert_eq!(anomalies[0].root_cause.injector.as_deref(), Some("h7"));
    assert!(anomalies[0]
        .evidence
        .iter()
        .any(|e| e.rule == "earlier_flow_contention"));
}

#[test]
fn a_victim_contending_at_the_root_of_a_pfc_tree_is_told_about_the_backpressure() {
    // The incast's bursts contend at tor2.p(h9), whose congestion paused agg0 and tor0
    // upstream. The victim here is one of the bursts: it was never paused, it met the
    // queue at the root itself.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, burst(1));
    incast(&mut builder);
    let reports = builder.build_reports().expect("reports");
    let output = hawkmesh_analyzer::diagnose_reports(
        hawkmesh_analyzer::loaded(reports),
        builder.topology().clone(),
        burst(1),
        &hawkmesh_analyzer::DiagnoseOptions::default(),
    )
    .expect("diagnosis");
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(anomaly.anomaly_type, AnomalyType::PfcBackpressure);
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["tor2.p6"]);
    assert!(anomaly
        .evidence
        .iter()
        .any(|e| e.rule == "victim_at_pfc_origin"));
    assert!(!output
        .diagnosis
        .anomalies
        .iter()
        .any(|a| a.anomaly_type == AnomalyType::NormalFlowContention));
}

#[test]
fn a_loop_held_by_a_host_injection_and_a_contention_is_told_as_the_injection() {
    // Two sinks behind the loop's exits at s2: h9 pauses s2.p(h9) (flow G h1 → h9), and
    // bursts h1 → h2 contend at s2.p(h2), unpaused. The contended queue drains; the
    // injected pause holds: the loop's initiator type is the injection, both ports roots.
    let mut builder = IncidentBuilder::new(ring(), EPOCH_NS, 1, victim());
    ring_flows(&mut builder, 0);
    h9_pauses_s2(&mut builder);
    bursts_from_h1_via_s2(&mut builder, "h2", 3, 400_000);
    let output = run(&builder);
    let anomaly = victim_anomalies(&output)[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::DeadlockInitiatorOutOfLoopHostInjection,
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert_eq!(anomaly.root_cause.injector.as_deref(), Some("h9"));
    let roots = labels(&anomaly.root_cause.ports);
    assert!(roots.contains(&"s2.p3") && roots.len() == 2, "{roots:?}");
}

#[test]
fn a_pause_that_ended_before_anything_queued_behind_it_still_waits_for_its_downstream() {
    // h7 paused tor2.p(h7) and the pause spread to agg1.p(tor2); both pauses ended within
    // the epoch (port status) before agg1 enqueued anything more toward tor2, so agg1
    // counted no paused packet there. The victim, paused at tor0.p(agg1), must still be
    // traced through agg1.p(tor2) to the host's pause.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    builder.flow(
        0,
        flow(4, 49300, 17),
        &["h3", "tor1", "agg1", "tor2", "h7"],
        &[
            Hop::new(300).depth(20_000),
            Hop::new(300).depth(200_000),
            Hop::new(300).paused(300, 300_000),
        ],
    );
    builder.flow(
        0,
        victim(),
        &["h0", "tor0", "agg1", "tor2", "h7"],
        &[
            Hop::new(250).paused(250, 200_000),
            Hop::new(250).depth(200_000),
            Hop::new(250).paused(250, 300_000),
        ],
    );
    let epoch0 = builder.epoch_start(0);
    builder
        .pause_ended("tor2", "h7", epoch0 + 150_000)
        .pause_ended("agg1", "tor2", epoch0 + 160_000);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(anomalies[0].anomaly_type, AnomalyType::PfcStorm);
    assert_eq!(anomalies[0].root_cause.injector.as_deref(), Some("h7"));
    assert_eq!(labels(&anomalies[0].root_cause.ports), vec!["tor2.p7"]);
}

/// Five switches in a ring, s0 - s1 - s2 - s3 - s4 - s0, host hK on sK (10.0.0.K+1).
fn ring5() -> hawkmesh_wire::topology::FabricTopology {
    let mut topology = hawkmesh_analyzer::testkit::TopologyBuilder::new();
    for i in 0..5u8 {
        topology = topology.switch(&format!("s{i}"), None);
    }
    for i in 0..5u8 {
        topology = topology.host(&format!("h{i}"), [10, 0, 0, i + 1]);
    }
    for i in 0..5u8 {
        topology = topology.link(&format!("s{i}"), &format!("s{}", (i + 1) % 5));
    }
    for i in 0..5u8 {
        topology = topology.link(&format!("h{i}"), &format!("s{i}"));
    }
    topology.build().expect("ring of five")
}

#[test]
fn a_deadlock_claim_names_every_port_of_a_five_switch_loop_in_cycle_order() {
    // Flows F_i: h_i → s_i → s_{i+1} → s_{i+2} → h_{i+2}, paused at both ring hops (F0 is
    // the victim) — except at s2.p(s3): its packets were all enqueued before its pause and
    // none has left since, so it counts no paused packet and no queue depth. Its switch
    // reports it paused at collection (port status): it is congested all the same, and the
    // wait-for edge s1.p(s2) → s2.p(s3) closes the loop. Without it the loop is cut, and
    // s1.p(s2) looks like a port paused by s2 with nothing congested behind it.
    let topology = ring5();
    let mut builder = IncidentBuilder::new(topology.clone(), EPOCH_NS, 1, victim());
    let frozen = port(&topology, "s2", "s3");
    for i in 0..5u8 {
        let f = if i == 0 {
            victim()
        } else {
            flow(1 + i, 49400 + u16::from(i), 1 + (i + 2) % 5)
        };
        let names = [
            format!("h{i}"),
            format!("s{i}"),
            format!("s{}", (i + 1) % 5),
            format!("s{}", (i + 2) % 5),
            format!("h{}", (i + 2) % 5),
        ];
        let ring_hop = |switch: u8, next: u8| {
            if port(&topology, &format!("s{switch}"), &format!("s{next}")) == frozen {
                Hop::new(200)
            } else {
                Hop::new(200).paused(180, 300_000).depth(50_000)
            }
        };
        let hops = [
            ring_hop(i, (i + 1) % 5),
            ring_hop((i + 1) % 5, (i + 2) % 5),
            Hop::new(200),
        ];
        let path: Vec<&str> = names.iter().map(String::as_str).collect();
        builder.flow(0, f, &path, &hops);
    }
    builder.paused_at_collection("s2", "s3");
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::DeadlockInitiatorInLoop,
        "{}",
        render::to_text(&output.diagnosis)
    );
    let loop_ports = labels(&anomaly.loop_ports);
    assert_eq!(loop_ports.len(), 5, "{loop_ports:?}");
    // In cycle order: each port waits for the next, the last for the first.
    let ring_ports: Vec<String> = (0..5u8)
        .map(|i| {
            let p = port(&topology, &format!("s{i}"), &format!("s{}", (i + 1) % 5));
            format!("s{i}.p{}", p.port)
        })
        .collect();
    let at = ring_ports
        .iter()
        .position(|p| p == loop_ports[0])
        .expect("a ring port");
    for (k, label) in loop_ports.iter().enumerate() {
        assert_eq!(*label, ring_ports[(at + k) % 5], "{loop_ports:?}");
    }
    let loop_edges = anomaly
        .evidence
        .iter()
        .filter(|e| e.rule == "cyclic_buffer_dependency")
        .count();
    assert_eq!(loop_edges, 5, "{:?}", anomaly.evidence);
}

#[test]
fn a_switch_with_a_congested_egress_behind_its_pause_is_not_named_an_injector() {
    // agg1.p(tor2) holds the victim's packets (paused all epoch, none reached tor2). The
    // only traffic tor2 metered from agg1 went to an idle port, so the causality meter ties
    // the pause to nothing congested; but tor2 pauses agg1 because its buffer fills behind
    // tor2.p(h7), which host h7 pauses (flow Z reaches it through agg0). The victim waits
    // for h7's storm, not for an injection by tor2.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    builder.flow(
        0,
        victim(),
        &["h0", "tor0", "agg1", "tor2", "h7"],
        &[
            Hop::new(250).paused(200, 200_000).depth(20_000),
            Hop::new(250).paused(250, 0),
            Hop::new(0),
        ],
    );
    builder.flow(
        0,
        flow(4, 49310, 11),
        &["h3", "tor1", "agg1", "tor2", "a1"],
        &[Hop::new(20), Hop::new(20), Hop::new(20)],
    );
    builder.flow(
        0,
        flow(3, 49320, 17),
        &["h2", "tor0", "agg0", "tor2", "h7"],
        &[
            Hop::new(100),
            Hop::new(100),
            Hop::new(100).paused(90, 200_000),
        ],
    );
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(anomaly.anomaly_type, AnomalyType::PfcStorm);
    assert_eq!(
        anomaly.root_cause.kind,
        RootCauseKind::HostPfcInjection,
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert_eq!(anomaly.root_cause.injector.as_deref(), Some("h7"));
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["tor2.p7"]);
}

/// Flow S (h3 → h7) and the victim (h0 → h7) in `epoch`, paused at tor1/tor0 and agg1, and
/// at tor2.p(h7) with `at_h7`.
fn toward_h7(builder: &mut IncidentBuilder, epoch: usize, at_h7: Hop) {
    builder.flow(
        epoch,
        flow(4, 49300, 17),
        &["h3", "tor1", "agg1", "tor2", "h7"],
        &[
            Hop::new(300).paused(220, 250_000).depth(40_000),
            Hop::new(300).paused(240, 300_000).depth(40_000),
            at_h7,
        ],
    );
    builder.flow(
        epoch,
        victim(),
        &["h0", "tor0", "agg1", "tor2", "h7"],
        &[
            Hop::new(250).paused(180, 200_000).depth(30_000),
            Hop::new(250).paused(200, 300_000).depth(40_000),
            at_h7,
        ],
    );
}

#[test]
fn a_host_draining_slower_than_its_link_is_a_slow_receiver_not_a_storm() {
    // h7 drains at a fraction of the link rate: in both epochs tor2.p(h7) is paused for
    // most of its packets but keeps sending between pauses — a third of its packets go in
    // unpaused, meet the queue the pauses leave, and leave. The pause comes and goes with
    // the queue: a drain-rate limit, not an injection.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 2, victim());
    for epoch in 0..2 {
        toward_h7(
            &mut builder,
            epoch,
            Hop::new(300).paused(200, 300_000).depth(100_000),
        );
    }
    builder.paused_at_collection("tor2", "h7");
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::SlowReceiver,
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert_eq!(anomaly.root_cause.kind, RootCauseKind::SlowReceiver);
    assert_eq!(anomaly.root_cause.receiver.as_deref(), Some("h7"));
    assert_eq!(anomaly.root_cause.injector, None);
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["tor2.p7"]);
    assert!(anomaly.evidence.iter().any(|e| e.rule == "slow_receiver"));
    let json = render::to_json(&output.diagnosis).expect("json");
    assert!(json.contains("\"type\": \"slow_receiver\""), "{json}");
    assert!(json.contains("\"receiver\": \"h7\""), "{json}");

    // The same host holding the port for a whole epoch — every packet of epoch 1 enqueued
    // while paused, none let through — is an injection: a PFC storm.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 2, victim());
    toward_h7(
        &mut builder,
        0,
        Hop::new(300).paused(200, 300_000).depth(100_000),
    );
    toward_h7(&mut builder, 1, Hop::new(300).paused(300, 300_000));
    builder.paused_at_collection("tor2", "h7");
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(anomalies[0].anomaly_type, AnomalyType::PfcStorm);
    assert_eq!(anomalies[0].root_cause.injector.as_deref(), Some("h7"));
}

#[test]
fn a_host_that_resumes_its_pause_by_xon_is_a_slow_receiver_even_in_its_first_paused_epoch() {
    // The first poll of a slow receiver: h7 paused tor2.p(h7) in the latest epoch only and
    // every packet enqueued there since is held (its upstream paused too), so the port's
    // packets cannot tell a drain-rate limit from an injection. But the port received an
    // XON from h7 in that epoch — h7 released the pause itself when its receive buffer
    // drained, and paused again: receive-buffer flow control, not a storm.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    toward_h7(&mut builder, 0, Hop::new(300).paused(300, 300_000));
    builder.paused_at_collection("tor2", "h7");
    builder.xons("tor2", "h7", 0, 2);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    let anomaly = anomalies[0];
    assert_eq!(
        anomaly.anomaly_type,
        AnomalyType::SlowReceiver,
        "{}",
        render::to_text(&output.diagnosis)
    );
    assert_eq!(anomaly.root_cause.receiver.as_deref(), Some("h7"));
    assert_eq!(labels(&anomaly.root_cause.ports), vec!["tor2.p7"]);
    let note = &anomaly
        .evidence
        .iter()
        .find(|e| e.rule == "slow_receiver")
        .expect("slow receiver evidence")
        .note;
    assert!(note.contains("XON 2 time(s)"), "{note}");

    // XONs in an epoch where the port enqueued nothing (held by the pause) count too.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 2, victim());
    toward_h7(&mut builder, 0, Hop::new(300).paused(300, 300_000));
    builder.paused_at_collection("tor2", "h7");
    builder.xons("tor2", "h7", 1, 1);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies[0].anomaly_type, AnomalyType::SlowReceiver);

    // The same pause without an XON is an injection.
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 1, victim());
    toward_h7(&mut builder, 0, Hop::new(300).paused(300, 300_000));
    builder.paused_at_collection("tor2", "h7");
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies[0].anomaly_type, AnomalyType::PfcStorm);
    assert_eq!(anomalies[0].root_cause.injector.as_deref(), Some("h7"));
}

/// s0 — s1 with h0 on s0 and h1 (and h2 with `h2`) on s1; the victim h0 → h1 and a flow
/// h1 → h0 each paused at their first switch's port toward the other, nothing metered
/// across: a two-switch loop frozen before the ring's epochs.
fn frozen_two_switch_loop(h2: bool) -> IncidentBuilder {
    let mut topology = hawkmesh_analyzer::testkit::TopologyBuilder::new()
        .switch("s0", None)
        .switch("s1", None)
        .host("h0", [10, 0, 0, 1])
        .host("h1", [10, 0, 0, 2]);
    if h2 {
        topology = topology.host("h2", [10, 0, 0, 3]);
    }
    topology = topology.link("s0", "s1").link("h0", "s0").link("h1", "s1");
    if h2 {
        topology = topology.link("h2", "s1");
    }
    let mut builder = IncidentBuilder::new(
        topology.build().expect("two switches"),
        EPOCH_NS,
        1,
        victim(),
    );
    builder.flow(
        0,
        victim(),
        &["h0", "s0", "s1", "h1"],
        &[Hop::new(250).paused(250, 0), Hop::new(0)],
    );
    builder.flow(
        0,
        flow(2, 49500, 1),
        &["h1", "s1", "s0", "h0"],
        &[Hop::new(250).paused(250, 0), Hop::new(0)],
    );
    builder
}

#[test]
fn a_frozen_two_switch_loop_follows_the_data_planes_pfc_branch_back_across_the_loop() {
    // s0 and s1 route each other's traffic back (a two-switch routing loop frozen before
    // the ring's epochs: no meter row ties either pause to anything). s1 also queues
    // toward h1 (background from h2, not paused). Read from the queues alone, s0.p(s1)
    // would wait for that queue; the polling packet that came into s1 from s0 left for
    // PFC causality by the port back toward s0, still paused at collection — the switch's
    // own record of what that ingress holds — so the wait-for edge goes back around the
    // loop.
    let mut builder = frozen_two_switch_loop(true);
    builder.flow(
        0,
        flow(3, 49600, 2),
        &["h2", "s1", "h1"],
        &[Hop::new(400).depth(200_000)],
    );
    builder.paused_at_collection("s0", "s1");
    builder.paused_at_collection("s1", "s0");
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(
        anomalies[0].anomaly_type,
        AnomalyType::DeadlockInitiatorInLoop,
        "{}",
        render::to_text(&output.diagnosis)
    );
    let mut loop_ports = labels(&anomalies[0].loop_ports);
    loop_ports.sort();
    assert_eq!(loop_ports, vec!["s0.p0", "s1.p0"]);
}

/// s0 → s1 → s2 → s0 with h0 and h3 on s0, h1 on s1, h2 on s2: the victim h0 → h1 and two
/// flows that carry the loop on around (h1 → h2, h2 → h0), each paused at its first ring
/// port and never metered across — a three-switch loop frozen before the ring's epochs.
/// s0 also queues toward h0 (h3's traffic, not paused).
fn frozen_three_switch_loop() -> IncidentBuilder {
    let topology = hawkmesh_analyzer::testkit::TopologyBuilder::new()
        .switch("s0", None)
        .switch("s1", None)
        .switch("s2", None)
        .host("h0", [10, 0, 0, 1])
        .host("h1", [10, 0, 0, 2])
        .host("h2", [10, 0, 0, 3])
        .host("h3", [10, 0, 0, 4])
        .link("s0", "s1")
        .link("s1", "s2")
        .link("s2", "s0")
        .link("h0", "s0")
        .link("h1", "s1")
        .link("h2", "s2")
        .link("h3", "s0")
        .build()
        .expect("three switches");
    let mut builder = IncidentBuilder::new(topology, EPOCH_NS, 1, victim());
    let frozen = || [Hop::new(250).paused(250, 0), Hop::new(0)];
    builder.flow(0, victim(), &["h0", "s0", "s1", "h1"], &frozen());
    builder.flow(0, flow(2, 49500, 3), &["h1", "s1", "s2", "h2"], &frozen());
    builder.flow(0, flow(3, 49600, 1), &["h2", "s2", "s0", "h0"], &frozen());
    builder.flow(
        0,
        flow(4, 49700, 1),
        &["h3", "s0", "h0"],
        &[Hop::new(400).depth(200_000)],
    );
    for (switch, toward) in [("s0", "s1"), ("s1", "s2"), ("s2", "s0")] {
        builder.paused_at_collection(switch, toward);
    }
    builder
}

#[test]
fn a_frozen_loop_closes_through_the_branch_of_the_polling_packets_return_by_another_port() {
    // The victim's polling packet goes s0 → s1, follows the PFC branch s1 → s2 → s0 and
    // comes back into s0 by the port from s2. s0 already holds a report for the event
    // (its first arrival, from h0), so that return is a later arrival in the same report,
    // with the branch the data plane took from s2's port: back to s1. Nothing metered
    // ties s2.p(s0) to anything, and s0's only queue is toward h0: without the return's
    // branch the loop does not close and the queue toward h0 is blamed.
    let builder = frozen_three_switch_loop();
    let port = |from: &str, to: &str| {
        hawkmesh_analyzer::testkit::port_towards(builder.topology(), from, to)
            .expect("linked")
            .port
    };
    let mut reports = builder.build_reports().expect("reports");
    let s0 = builder
        .topology()
        .nodes
        .iter()
        .find(|n| n.name == "s0")
        .expect("s0")
        .id;
    let s0_report = reports
        .iter_mut()
        .find(|r| r.switch == s0)
        .expect("s0 reported");
    s0_report.more_polling.push(PollingContext {
        ingress_port: port("s0", "s2"),
        flags: TraceFlags::PFC_CAUSALITY,
        victim: victim(),
        egress: vec![PollingEgress {
            port: port("s0", "s1"),
            reason: TraceFlags::PFC_CAUSALITY,
        }],
    });
    let output = run_reports(&builder, reports);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(
        anomalies[0].anomaly_type,
        AnomalyType::DeadlockInitiatorInLoop,
        "{}",
        render::to_text(&output.diagnosis)
    );
    let mut loop_ports = labels(&anomalies[0].loop_ports);
    loop_ports.sort();
    assert_eq!(loop_ports, vec!["s0.p0", "s1.p1", "s2.p1"]);

    // The first arrivals alone leave the loop open.
    let output = run(&builder);
    assert!(
        victim_anomalies(&output)
            .iter()
            .all(|a| a.anomaly_type != AnomalyType::DeadlockInitiatorInLoop),
        "{}",
        render::to_text(&output.diagnosis)
    );
}

#[test]
fn two_switches_pausing_each_other_are_a_loop_not_two_injectors() {
    // A two-switch routing loop frozen before the ring's epochs: s0.p(s1) and s1.p(s0)
    // hold packets that never got across, so neither switch metered anything from the
    // other. Each one's only congested egress is the port back toward the other — the
    // loop's own U-turn edge — so each port waits for the other: a cyclic buffer
    // dependency, not two switches pausing out of nothing.
    let builder = frozen_two_switch_loop(false);
    let output = run(&builder);
    let anomalies = victim_anomalies(&output);
    assert_eq!(anomalies.len(), 1, "{}", render::to_text(&output.diagnosis));
    assert_eq!(
        anomalies[0].anomaly_type,
        AnomalyType::DeadlockInitiatorInLoop,
        "{}",
        render::to_text(&output.diagnosis)
    );
    let mut loop_ports = labels(&anomalies[0].loop_ports);
    loop_ports.sort();
    assert_eq!(loop_ports, vec!["s0.p0", "s1.p0"]);
    assert!(output
        .diagnosis
        .anomalies
        .iter()
        .all(|a| a.root_cause.kind != RootCauseKind::SwitchPfcInjection));
}
