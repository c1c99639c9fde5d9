//! `hawkmesh eval` metrics on hand-built diagnoses: a true positive needs the anomaly type
//! *and* the root cause; a wrong root cause is a false positive and, without another correct
//! report, a false negative; attribution, causal switches and aggregation.

use hawkmesh_lab::eval::judge::{attributed, FlowPaths, Window};
use hawkmesh_lab::eval::run::IncidentRecord;
use hawkmesh_lab::eval::run::{summarise, ModeRun, Overhead, Point, RunRecord};
use hawkmesh_lab::eval::{judge, judge_victim, AnomalyClass, Exposure, Score, Truth, Verdict};
use hawkmesh_lab::PollingMode;
use hawkmesh_netsim::truth::SpreadEdge;
use hawkmesh_wire::topology::{FabricTopology, LinkDesc, NodeDesc, NodeKind, PortRef};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

fn port(node: u32, port: u16) -> PortRef {
    PortRef { node, port }
}

fn truth(class: AnomalyClass, expected: &str) -> Truth {
    Truth {
        class,
        expected_type: expected.into(),
        start_ns: 1_000_000,
        end_ns: 1_200_000,
        root_ports: vec![port(19, 0)],
        loop_ports: Vec::new(),
        injector: None,
        anomaly_flows: ["11.0.4.1:49152->11.0.6.1:4791".to_string()].into(),
        roots_end_ns: 1_200_000,
        spreading: Vec::new(),
        realized: true,
        realization: String::new(),
    }
}

fn anomaly(kind: &str, affects: bool, ports: &[(u32, u16)], injector: Option<&str>) -> Value {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(s, p)| json!({ "switch": s, "port": p, "label": format!("s{s}.p{p}"), "peer": "x" }))
        .collect();
    let mut root = json!({ "kind": "flow_contention", "ports": ports,
        "flows": [ { "flow": "11.0.4.1:49152->11.0.6.1:4791", "weight": 10.0, "packets": 5 } ] });
    if let Some(host) = injector {
        root["injector"] = json!(host);
        root["kind"] = json!("host_pfc_injection");
    }
    json!({ "id": 1, "type": kind, "affects_victim": affects, "root_cause": root })
}

fn diagnosis(anomalies: Vec<Value>) -> Value {
    json!({ "schema_version": 1, "anomalies": anomalies })
}

#[test]
fn a_true_positive_needs_the_type_and_the_root_cause() {
    let t = truth(AnomalyClass::PfcBackpressure, "pfc_backpressure");
    let right = diagnosis(vec![anomaly("pfc_backpressure", true, &[(19, 0)], None)]);
    let judged = judge(&t, Some(&right));
    assert_eq!(judged.verdict, Verdict::Correct);
    assert_eq!(judged.top_flow_injected, Some(true));
    assert_eq!(judged.claims, vec!["pfc_backpressure@s19.p0"]);

    let wrong_port = diagnosis(vec![anomaly("pfc_backpressure", true, &[(27, 1)], None)]);
    assert_eq!(
        judge(&t, Some(&wrong_port)).verdict,
        Verdict::WrongRootCause
    );
    let wrong_type = diagnosis(vec![anomaly(
        "normal_flow_contention",
        true,
        &[(19, 0)],
        None,
    )]);
    assert_eq!(judge(&t, Some(&wrong_type)).verdict, Verdict::WrongType);
    // The right anomaly found but not affecting the victim is no report for it.
    let elsewhere = diagnosis(vec![anomaly("pfc_backpressure", false, &[(19, 0)], None)]);
    assert_eq!(judge(&t, Some(&elsewhere)).verdict, Verdict::Silent);
    assert_eq!(judge(&t, Some(&diagnosis(vec![]))).verdict, Verdict::Silent);
    assert_eq!(judge(&t, None).verdict, Verdict::Undiagnosed);
    // Any victim-affecting anomaly may carry the right answer.
    let both = diagnosis(vec![
        anomaly("normal_flow_contention", true, &[(20, 2)], None),
        anomaly("pfc_backpressure", true, &[(19, 0)], None),
    ]);
    assert_eq!(judge(&t, Some(&both)).verdict, Verdict::Correct);
}

#[test]
fn a_wrong_root_cause_is_a_false_positive_and_a_false_negative() {
    let t = truth(AnomalyClass::PfcBackpressure, "pfc_backpressure");
    let wrong = judge(
        &t,
        Some(&diagnosis(vec![anomaly(
            "pfc_backpressure",
            true,
            &[(34, 1)],
            None,
        )])),
    );
    let mut score = Score::default();
    score.add_trace(true, &[wrong.verdict]);
    assert_eq!((score.reports, score.correct, score.wrong), (1, 0, 1));
    assert_eq!((score.detected, score.missed), (0, 1));
    assert_eq!(
        (score.precision, score.recall, score.f1),
        (Some(0.0), Some(0.0), Some(0.0))
    );

    // A second trace with one correct and one wrong report: detected, precision 1/3.
    score.add_trace(
        true,
        &[Verdict::Correct, Verdict::WrongType, Verdict::Silent],
    );
    assert_eq!(
        (score.reports, score.correct, score.wrong, score.silent),
        (3, 1, 2, 1)
    );
    assert_eq!((score.detected, score.missed, score.traces), (1, 1, 2));
    assert_eq!(score.precision, Some(0.3333));
    assert_eq!(score.recall, Some(0.5));
    // Traces whose anomaly did not materialise are counted apart.
    score.add_trace(false, &[Verdict::WrongType]);
    assert_eq!((score.traces, score.unrealized, score.reports), (2, 1, 3));
    // No report at all: precision undefined, recall 0.
    let mut silent = Score::default();
    silent.add_trace(true, &[Verdict::Silent, Verdict::Undiagnosed]);
    assert_eq!(
        (silent.precision, silent.recall, silent.f1),
        (None, Some(0.0), None)
    );
}

#[test]
fn root_causes_per_class() {
    // Storm: the injecting host, or the ToR port facing it.
    let mut storm = truth(AnomalyClass::PfcStorm, "pfc_storm");
    storm.injector = Some("h6".into());
    let by_host = diagnosis(vec![anomaly("pfc_storm", true, &[(19, 0)], Some("h6"))]);
    assert_eq!(judge(&storm, Some(&by_host)).verdict, Verdict::Correct);
    let other_host = diagnosis(vec![anomaly("pfc_storm", true, &[(21, 1)], Some("h9"))]);
    assert_eq!(
        judge(&storm, Some(&other_host)).verdict,
        Verdict::WrongRootCause
    );
    let switch = diagnosis(vec![anomaly("pfc_storm", true, &[(27, 2)], Some("agg3"))]);
    assert_eq!(
        judge(&storm, Some(&switch)).verdict,
        Verdict::WrongRootCause
    );

    // In-loop deadlock: root-cause ports inside the loop.
    let mut in_loop = truth(AnomalyClass::DeadlockInLoop, "deadlock_initiator_in_loop");
    in_loop.loop_ports = vec![port(26, 2), port(32, 1)];
    in_loop.root_ports = in_loop.loop_ports.clone();
    let good = diagnosis(vec![anomaly(
        "deadlock_initiator_in_loop",
        true,
        &[(32, 1)],
        None,
    )]);
    assert_eq!(judge(&in_loop, Some(&good)).verdict, Verdict::Correct);
    let outside = diagnosis(vec![anomaly(
        "deadlock_initiator_in_loop",
        true,
        &[(32, 1), (19, 0)],
        None,
    )]);
    assert_eq!(
        judge(&in_loop, Some(&outside)).verdict,
        Verdict::WrongRootCause
    );
    let empty = diagnosis(vec![anomaly("deadlock_initiator_in_loop", true, &[], None)]);
    assert_eq!(
        judge(&in_loop, Some(&empty)).verdict,
        Verdict::WrongRootCause
    );

    // Out-of-loop deadlock: the subtype names the initiator's kind.
    let mut out = truth(
        AnomalyClass::DeadlockOutOfLoop,
        "deadlock_initiator_out_of_loop_flow_contention",
    );
    out.loop_ports = vec![port(26, 2), port(32, 1)];
    let good = diagnosis(vec![anomaly(
        "deadlock_initiator_out_of_loop_flow_contention",
        true,
        &[(19, 0)],
        None,
    )]);
    assert_eq!(judge(&out, Some(&good)).verdict, Verdict::Correct);
    let subtype = diagnosis(vec![anomaly(
        "deadlock_initiator_out_of_loop_host_injection",
        true,
        &[(19, 0)],
        Some("h6"),
    )]);
    assert_eq!(judge(&out, Some(&subtype)).verdict, Verdict::WrongType);
    let in_loop_claim = diagnosis(vec![anomaly(
        "deadlock_initiator_in_loop",
        true,
        &[(26, 2)],
        None,
    )]);
    assert_eq!(
        judge(&out, Some(&in_loop_claim)).verdict,
        Verdict::WrongType
    );
}

#[test]
fn what_is_correct_follows_how_the_anomaly_reached_the_victim() {
    let never_paused = Exposure {
        paused: false,
        reaches_loop: false,
    };
    let paused_outside_loop = Exposure {
        paused: true,
        reaches_loop: false,
    };
    // Backpressure: a victim never paused met the incast as contention at its port.
    let t = truth(AnomalyClass::PfcBackpressure, "pfc_backpressure");
    let contention = diagnosis(vec![anomaly(
        "normal_flow_contention",
        true,
        &[(19, 0)],
        None,
    )]);
    assert_eq!(
        judge_victim(&t, never_paused, Some(&contention)).verdict,
        Verdict::Correct
    );
    // ... but not a paused victim, and not contention somewhere else.
    assert_eq!(
        judge_victim(&t, Exposure::FULL, Some(&contention)).verdict,
        Verdict::WrongType
    );
    let elsewhere = diagnosis(vec![anomaly(
        "normal_flow_contention",
        true,
        &[(20, 1)],
        None,
    )]);
    assert_eq!(
        judge_victim(&t, never_paused, Some(&elsewhere)).verdict,
        Verdict::WrongType
    );
    // Out-of-loop deadlock: a victim whose PAUSE chain stays outside the loop met the
    // initiator's backpressure; one behind the loop must be told about the deadlock.
    let mut out = truth(
        AnomalyClass::DeadlockOutOfLoop,
        "deadlock_initiator_out_of_loop_flow_contention",
    );
    out.loop_ports = vec![port(26, 2), port(32, 1)];
    let backpressure = diagnosis(vec![anomaly("pfc_backpressure", true, &[(19, 0)], None)]);
    assert_eq!(
        judge_victim(&out, paused_outside_loop, Some(&backpressure)).verdict,
        Verdict::Correct
    );
    assert_eq!(
        judge_victim(&out, Exposure::FULL, Some(&backpressure)).verdict,
        Verdict::WrongType
    );
    // A storm-initiated one: the storm, by its injector.
    out.injector = Some("h6".into());
    let storm = diagnosis(vec![anomaly("pfc_storm", true, &[(19, 0)], Some("h6"))]);
    assert_eq!(
        judge_victim(&out, paused_outside_loop, Some(&storm)).verdict,
        Verdict::Correct
    );
    // In-loop deadlock: a victim whose PAUSE chain did not run into the closed cycle met
    // the loop's congestion at a loop port as backpressure; one behind the cycle must be
    // told about the deadlock.
    let mut in_loop = truth(AnomalyClass::DeadlockInLoop, "deadlock_initiator_in_loop");
    in_loop.loop_ports = vec![port(19, 0), port(20, 1)];
    assert_eq!(
        judge_victim(&in_loop, paused_outside_loop, Some(&backpressure)).verdict,
        Verdict::Correct
    );
    assert_eq!(
        judge_victim(&in_loop, Exposure::FULL, Some(&backpressure)).verdict,
        Verdict::WrongType
    );
    // The storm class accepts nothing but the storm.
    let s = truth(AnomalyClass::PfcStorm, "pfc_storm");
    assert_eq!(
        judge_victim(&s, never_paused, Some(&backpressure)).verdict,
        Verdict::WrongType
    );
}

#[test]
fn exposure_follows_what_each_paused_port_waited_for() {
    let mut t = truth(
        AnomalyClass::DeadlockOutOfLoop,
        "deadlock_initiator_out_of_loop_flow_contention",
    );
    // On the line, tor1.p1 (4,1) is the initiator; agg1.p1 (3,1) and tor1.p0 (4,0) form
    // the loop (a route bouncing between agg1 and tor1). tor1 first pauses agg1.p1 for
    // tor1.p1, then for its own bounce back to agg1 (tor1.p0), which agg1 pauses in turn
    // for agg1.p1: a cycle from 1_000_120 on. agg1 pauses core0.p1 waiting for agg1.p1;
    // core0 pauses agg0.p0 (1,0) waiting for a port (2,0) that is not on the chain.
    t.root_ports = vec![port(4, 1)];
    t.loop_ports = vec![port(3, 1), port(4, 0)];
    let edge = |time_ns, sender: PortRef, paused: PortRef, cause: PortRef| SpreadEdge {
        time_ns,
        last_ns: time_ns,
        until_ns: time_ns,
        sender,
        paused,
        cause,
        priority: 3,
    };
    let lasting = |time_ns, sender: PortRef, paused: PortRef, cause: PortRef| SpreadEdge {
        last_ns: 1_000_600,
        until_ns: 1_000_600,
        ..edge(time_ns, sender, paused, cause)
    };
    t.spreading = vec![
        edge(1_000_100, port(4, 0), port(3, 1), port(4, 1)),
        lasting(1_000_110, port(3, 1), port(4, 0), port(3, 1)),
        lasting(1_000_120, port(4, 0), port(3, 1), port(4, 0)),
        edge(1_000_200, port(3, 0), port(2, 1), port(3, 1)),
        edge(1_000_300, port(2, 0), port(1, 0), port(2, 0)),
    ];
    let topo = line_topology();
    // Through core0.p1: paused, and waiting for the loop.
    let through: BTreeSet<PortRef> = [port(0, 1), port(1, 1), port(2, 1)].into();
    assert_eq!(
        t.exposure(&through, Window::until(1_000_500), &topo),
        Exposure {
            paused: true,
            reaches_loop: true
        }
    );
    // Before core0.p1 was paused: not exposed.
    assert_eq!(
        t.exposure(&through, Window::until(1_000_150), &topo),
        Exposure {
            paused: false,
            reaches_loop: false
        }
    );
    // agg0.p0 was paused for something else at core0: paused, but not behind the loop.
    let other: BTreeSet<PortRef> = [port(1, 0)].into();
    assert_eq!(
        t.exposure(&other, Window::until(1_000_500), &topo),
        Exposure {
            paused: true,
            reaches_loop: false
        }
    );
    // The sender's NIC paused by its ToR for another egress that leads into the loop:
    // paused, but no switch on the victim's path waits for the loop.
    let at_nic: BTreeSet<PortRef> = [port(5, 0), port(0, 1)].into();
    let mut nic = t.clone();
    nic.spreading.push(SpreadEdge {
        time_ns: 1_000_150,
        last_ns: 1_000_600,
        until_ns: 1_000_600,
        sender: port(0, 0),
        paused: port(5, 0),
        cause: port(3, 1),
        priority: 3,
    });
    assert_eq!(
        nic.exposure(&at_nic, Window::until(1_000_500), &topo),
        Exposure {
            paused: true,
            reaches_loop: false
        }
    );
    // What a port waits for is its current cause: agg0.p0 waited for the loop port between
    // 1_000_150 and 1_000_160, then for core0's other port from 1_000_300 on.
    let mut switched = t.clone();
    switched.spreading.push(SpreadEdge {
        time_ns: 1_000_150,
        last_ns: 1_000_160,
        until_ns: 1_000_160,
        sender: port(2, 0),
        paused: port(1, 0),
        cause: port(3, 1),
        priority: 3,
    });
    assert!(
        switched
            .exposure(&other, Window::until(1_000_170), &topo)
            .reaches_loop
    );
    assert!(
        !switched
            .exposure(&other, Window::until(1_000_500), &topo)
            .reaches_loop
    );
    // Loop ports all paused, but agg1.p1 still waiting for the initiator's queue: a chain
    // into the initiator, not a cycle.
    let mut chain = t.clone();
    chain.spreading[0].last_ns = 1_000_600;
    chain.spreading[0].until_ns = 1_000_600;
    chain.spreading.remove(2);
    assert!(
        !chain
            .exposure(&through, Window::until(1_000_500), &topo)
            .reaches_loop
    );
    // A victim whose chain enters the closed cycle has the whole loop as causal switches,
    // also the loop switches its chain does not walk through (core0, with a third loop
    // port core0.p1 that waits for agg1.p1).
    let mut wider = t.clone();
    wider.loop_ports.push(port(2, 1));
    let in_loop: BTreeSet<PortRef> = [port(3, 1)].into();
    assert_eq!(
        wider
            .causal_switches_for(&in_loop, Window::until(1_000_500), &topo)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![2, 3, 4]
    );
    assert_eq!(
        t.causal_switches_for(&in_loop, Window::until(1_000_500), &topo)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![3, 4]
    );
    // A loop whose cycle has not closed is no deadlock yet: with a second loop port that
    // nothing paused — even one on the victim's own path — the same victim met only the
    // initiator.
    t.loop_ports.push(port(0, 1));
    assert_eq!(
        t.exposure(&through, Window::until(1_000_500), &topo),
        Exposure {
            paused: true,
            reaches_loop: false
        }
    );
}

/// tor0(0) - agg0(1) - core0(2) - agg1(3) - tor1(4), hosts h0 on tor0 and h1 on tor1.
fn line_topology() -> FabricTopology {
    let names = ["tor0", "agg0", "core0", "agg1", "tor1", "h0", "h1"];
    let nodes = names
        .iter()
        .enumerate()
        .map(|(id, name)| NodeDesc {
            id: id as u32,
            name: name.to_string(),
            kind: if name.starts_with('h') {
                NodeKind::Host
            } else {
                NodeKind::Switch
            },
            tier: None,
            ipv4: None,
        })
        .collect();
    let link = |a: (u32, u16), b: (u32, u16)| LinkDesc {
        a: port(a.0, a.1),
        b: port(b.0, b.1),
        gbps: 100.0,
        delay_ns: 2000,
    };
    FabricTopology {
        nodes,
        links: vec![
            link((5, 0), (0, 0)),
            link((0, 1), (1, 0)),
            link((1, 1), (2, 0)),
            link((2, 1), (3, 0)),
            link((3, 1), (4, 0)),
            link((4, 1), (6, 0)),
        ],
    }
}

/// A spreading edge: `sender` paused `paused` from `time_ns` (one XOFF) until `until_ns`,
/// waiting for `cause`.
fn spread(
    time_ns: u64,
    until_ns: u64,
    sender: PortRef,
    paused: PortRef,
    cause: PortRef,
) -> SpreadEdge {
    SpreadEdge {
        time_ns,
        last_ns: time_ns,
        until_ns,
        sender,
        paused,
        cause,
        priority: 3,
    }
}

#[test]
fn a_storm_hosts_pause_ends_the_chain_however_its_own_nic_is_paused() {
    let topology = line_topology();
    let mut t = truth(AnomalyClass::PfcStorm, "pfc_storm");
    t.root_ports = vec![port(4, 1)];
    let edge = |time_ns, sender, paused, cause| spread(time_ns, 2_000_000, sender, paused, cause);
    t.spreading = vec![
        // h1 injects PAUSE into tor1.p1 (the storm's origin: it waits for nothing).
        edge(1_000_000, port(6, 0), port(4, 1), port(6, 0)),
        // tor1 pauses h1's own NIC, whose traffic waits for tor1's uplink, which agg1
        // pauses: the other direction, which did not make h1 pause.
        edge(1_000_100, port(4, 1), port(6, 0), port(4, 0)),
        edge(1_000_200, port(3, 1), port(4, 0), port(3, 0)),
    ];
    // A victim into h1 waits at tor1.p1: tor1 is causal, agg1 is not.
    let victim: BTreeSet<PortRef> = [port(4, 1)].into();
    assert_eq!(
        t.causal_switches_for(&victim, Window::until(1_000_500), &topology)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![4]
    );
    // A victim whose path crosses tor1's uplink does wait for agg1's pause.
    let up: BTreeSet<PortRef> = [port(4, 0)].into();
    assert_eq!(
        t.causal_switches_for(&up, Window::until(1_000_500), &topology)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![3, 4]
    );
}

#[test]
fn causal_switches_follow_the_spreading_paths_back_from_the_victim() {
    let topology = line_topology();
    let mut t = truth(AnomalyClass::PfcBackpressure, "pfc_backpressure");
    // Congestion at tor1.p1 (toward h1); tor1 pauses agg1.p1, agg1 pauses core0.p1, and a
    // branch: core0 pauses agg0.p1 only later.
    t.root_ports = vec![port(4, 1)];
    // On this line every switch's congested direction is port 1.
    let edge = |time_ns, sender: PortRef, paused| {
        spread(time_ns, time_ns, sender, paused, port(sender.node, 1))
    };
    t.spreading = vec![
        edge(1_000_100, port(4, 0), port(3, 1)),
        edge(1_000_200, port(3, 0), port(2, 1)),
        edge(1_000_900, port(2, 0), port(1, 1)),
    ];
    // A victim h0 → h1 crossing core0.p1: core0 is paused by agg1, which is paused by tor1.
    let victim: BTreeSet<PortRef> = [
        port(5, 0),
        port(0, 1),
        port(1, 1),
        port(2, 1),
        port(3, 1),
        port(4, 1),
    ]
    .into();
    let causal = t.causal_switches_for(&victim, Window::until(1_000_500), &topology);
    assert_eq!(causal.into_iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    // A victim that only crosses agg0 → core0 before anything paused agg0: nothing ties it
    // to the origin yet, so only its own path is causal for it.
    let short: BTreeSet<PortRef> = [port(1, 1)].into();
    assert_eq!(
        t.causal_switches_for(&short, Window::until(1_000_500), &topology)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![1]
    );
    // Later agg0.p1 is paused by core0: the chain core0 → agg1 → tor1 becomes causal.
    assert_eq!(
        t.causal_switches_for(&short, Window::until(1_001_000), &topology)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    // A second congestion point of the same incast (tor0's uplink) that this victim's chain
    // never reaches is not causal for it.
    t.root_ports.push(port(0, 1));
    assert_eq!(
        t.causal_switches_for(&short, Window::until(1_001_000), &topology)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    // A chain that enters a loop whose cycle has not closed (agg1.p1 waits for tor1.p1,
    // outside it) meets congestion like any other: only the switches it walks through are
    // causal, not the rest of the loop.
    t.loop_ports = vec![port(3, 1), port(0, 1)];
    assert_eq!(
        t.causal_switches_for(&short, Window::until(1_001_000), &topology)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(
        t.causal_switches_for(&short, Window::until(1_000_500), &topology)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![1]
    );
    // tor0 pausing the sender h0 for the queue of its own egress toward agg0 (head-of-line
    // blocking at the sender) does not start a chain: only switch ports of the path do.
    let mut hol = truth(AnomalyClass::PfcBackpressure, "pfc_backpressure");
    hol.spreading = vec![
        SpreadEdge {
            time_ns: 1_000_100,
            last_ns: 1_000_100,
            until_ns: 1_000_100,
            sender: port(0, 0),
            paused: port(5, 0),
            cause: port(0, 1),
            priority: 3,
        },
        SpreadEdge {
            time_ns: 1_000_100,
            last_ns: 1_000_100,
            until_ns: 1_000_100,
            sender: port(1, 0),
            paused: port(0, 1),
            cause: port(1, 1),
            priority: 3,
        },
    ];
    let sender_only: BTreeSet<PortRef> = [port(5, 0)].into();
    assert!(hol
        .causal_switches_for(&sender_only, Window::until(1_000_500), &topology)
        .is_empty());
}

#[test]
fn incidents_are_attributed_by_window_and_causal_path() {
    let mut t = truth(AnomalyClass::PfcBackpressure, "pfc_backpressure");
    t.spreading = vec![SpreadEdge {
        time_ns: 1_050_000,
        last_ns: 1_050_000,
        until_ns: 1_050_000,
        sender: port(19, 2),
        paused: port(27, 1),
        cause: port(19, 0),
        priority: 3,
    }];
    let mut paths = BTreeMap::new();
    paths.insert(
        "a".to_string(),
        [port(16, 3), port(27, 1)].into_iter().collect(),
    );
    paths.insert(
        "b".to_string(),
        [port(16, 2), port(24, 1)].into_iter().collect(),
    );
    let paths = FlowPaths::from_paths(paths);
    // The anomaly's own flow, inside the window.
    assert!(attributed(
        &t,
        &paths,
        "11.0.4.1:49152->11.0.6.1:4791",
        Window::until(1_100_000)
    ));
    // Before the anomaly, or after end + 500 µs: not attributed.
    assert!(!attributed(
        &t,
        &paths,
        "11.0.4.1:49152->11.0.6.1:4791",
        Window::until(999_999)
    ));
    assert!(attributed(
        &t,
        &paths,
        "11.0.4.1:49152->11.0.6.1:4791",
        Window::until(1_700_000)
    ));
    assert!(!attributed(
        &t,
        &paths,
        "11.0.4.1:49152->11.0.6.1:4791",
        Window::until(1_700_001)
    ));
    // A flow through a port only once it has been paused.
    assert!(!attributed(&t, &paths, "a", Window::until(1_040_000)));
    assert!(attributed(&t, &paths, "a", Window::until(1_060_000)));
    // A flow elsewhere, or unknown: never.
    assert!(!attributed(&t, &paths, "b", Window::until(1_060_000)));
    assert!(!attributed(&t, &paths, "c", Window::until(1_060_000)));
    // The pause of port 27.1 ended at 1_050_200: a sample sent after that met no pause
    // of the anomaly there (slowed by something else); one in flight then did.
    t.spreading[0].until_ns = 1_050_200;
    assert!(!attributed(
        &t,
        &paths,
        "a",
        Window::of_sample(1_100_000, 40_000)
    ));
    assert!(attributed(
        &t,
        &paths,
        "a",
        Window::of_sample(1_100_000, 60_000)
    ));
    // Its own flows and the initial congestion ports stay tied to the anomaly throughout.
    t.root_ports.push(port(16, 3));
    assert!(attributed(
        &t,
        &paths,
        "a",
        Window::of_sample(1_100_000, 40_000)
    ));
}

fn run(class: AnomalyClass, point: Point, verdicts: &[Verdict]) -> RunRecord {
    let attributed = verdicts
        .iter()
        .enumerate()
        .map(|(i, v)| IncidentRecord {
            event_id: i as u64 + 1,
            trigger_ns: 1_000_000,
            victim: "v".into(),
            state: "complete".into(),
            verdict: *v,
            exposure: Exposure::FULL,
            claims: vec![format!("pfc_storm@tor{i}.p1")],
            top_flow_injected: None,
            switches_collected: 4,
            causal_switches: 5,
            causal_collected: 4,
            causal_missed: Vec::new(),
            report_bytes: 1000,
        })
        .collect();
    RunRecord {
        trace: format!("{class}-000"),
        family: hawkmesh_lab::eval::Family::K4,
        class,
        point,
        realized: true,
        realization: String::new(),
        expected: Default::default(),
        pause_frames: 0,
        modes: vec![ModeRun {
            mode: PollingMode::Hawkeye,
            incidents: verdicts.len() + 1,
            unattributed: 1,
            verdicts: verdicts.to_vec(),
            attributed,
            overhead: Overhead::default(),
        }],
        ablations: Vec::new(),
    }
}

#[test]
fn summaries_pick_the_best_point_and_mix_the_classes() {
    let fixed = Point::fixed();
    let small = Point {
        epoch_log2_ns: 17,
        threshold_percent: 300,
    };
    let storm = AnomalyClass::PfcStorm;
    let burst = AnomalyClass::PfcBackpressure;
    let runs = vec![
        run(storm, fixed, &[Verdict::Correct, Verdict::WrongRootCause]),
        run(storm, small, &[Verdict::Correct, Verdict::Correct]),
        run(burst, fixed, &[Verdict::WrongType]),
        run(burst, small, &[Verdict::Silent]),
    ];
    let summary = summarise(&[burst, storm], &[small, fixed], &runs);
    let score = |class: Option<AnomalyClass>, point: Point| {
        summary
            .scores
            .iter()
            .find(|r| r.class == class && r.point == point && r.mode == PollingMode::Hawkeye)
            .unwrap()
            .score
            .clone()
    };
    assert_eq!(score(Some(storm), fixed).precision, Some(0.5));
    assert_eq!(score(Some(storm), small).precision, Some(1.0));
    assert_eq!(score(Some(burst), small).precision, None);
    let mixed = score(None, fixed);
    assert_eq!(
        (mixed.reports, mixed.correct, mixed.detected, mixed.traces),
        (3, 1, 1, 2)
    );
    let best = |class| {
        summary
            .best
            .iter()
            .find(|b| b.class == class && b.mode == PollingMode::Hawkeye)
            .unwrap()
            .point
    };
    assert_eq!(best(storm), small);
    // Both points score 0 for the bursts (undefined ratios rank as 0): the tie goes to the
    // first (smaller) point.
    assert_eq!(best(burst), small);
    let overhead = summary
        .overhead
        .iter()
        .find(|o| o.class == Some(storm) && o.mode == PollingMode::Hawkeye)
        .unwrap();
    assert_eq!((overhead.runs, overhead.incidents), (1, 2));
    assert_eq!(overhead.coverage, 0.8);
    let verdicts = summary
        .verdicts
        .iter()
        .find(|v| v.class == storm && v.mode == PollingMode::Hawkeye)
        .unwrap();
    assert_eq!(verdicts.counts.get("correct"), Some(&1));
    assert_eq!(
        verdicts.wrong_claims,
        vec![("pfc_storm@tor.p".to_string(), 1)]
    );
}

#[test]
fn a_pause_counts_for_a_victim_only_if_its_sampled_packet_could_meet_it() {
    let topology = line_topology();
    let mut t = truth(AnomalyClass::PfcStorm, "pfc_storm");
    // agg1 pauses core0.p1 waiting for agg1.p1 from 1_000_100; the pause ends (XON) at
    // 1_000_300.
    t.spreading = vec![SpreadEdge {
        time_ns: 1_000_100,
        last_ns: 1_000_100,
        until_ns: 1_000_300,
        sender: port(3, 0),
        paused: port(2, 1),
        cause: port(3, 1),
        priority: 3,
    }];
    let victim: BTreeSet<PortRef> = [port(2, 1)].into();
    let causal = |window| -> Vec<u32> {
        t.causal_switches_for(&victim, window, &topology)
            .into_iter()
            .collect()
    };
    // In force at the trigger.
    assert_eq!(causal(Window::of_sample(1_000_250, 50)), vec![2, 3]);
    // Ended while the sampled packet (sent at 1_000_280) was in flight: it met the pause.
    assert_eq!(causal(Window::of_sample(1_000_400, 120)), vec![2, 3]);
    // Ended before the sampled packet was sent: its RTT owes nothing to it.
    assert_eq!(causal(Window::of_sample(1_000_400, 50)), vec![2]);
    assert!(
        !t.exposure(&victim, Window::of_sample(1_000_400, 50), &topology)
            .paused,
        "the pause was over before the sampled packet was sent"
    );
    assert!(
        t.exposure(&victim, Window::of_sample(1_000_400, 120), &topology)
            .paused
    );
}

#[test]
fn victim_paths_follow_the_routes_in_force_at_the_trigger() {
    // h2 (tor1, pod 0) → h12 (tor6, pod 3); from 500 µs agg1 and core2 send h12's traffic
    // to each other: a routing loop that captures the flow.
    let text = r#"
version = 1
name = "loop-paths"
seed = 3
duration_us = 1000

[topology]
kind = "fat_tree"
k = 4
host_gbps = 100
fabric_gbps = 100
delay_ns = 2000

[[workload]]
kind = "flows"
flows = [{ src = "h2", dst = "h12", size_bytes = 100000, start_us = 10 }]

[[route]]
switch = "tor1"
dst = "h12"
via = ["agg1"]
start_us = 0

[[route]]
switch = "agg1"
dst = "h12"
via = ["core2"]
start_us = 500

[[route]]
switch = "core2"
dst = "h12"
via = ["agg1"]
start_us = 500
"#;
    let loaded =
        hawkmesh_netsim::Scenario::parse(text, "loop-paths.toml", std::path::PathBuf::new())
            .expect("scenario");
    let sim = hawkmesh_netsim::Simulation::new(&loaded).expect("simulation");
    let id = |name: &str| sim.topology().node_by_name(name).expect("node").id;
    let (tor1, agg1, core2, tor6) = (id("tor1"), id("agg1"), id("core2"), id("tor6"));
    let paths = FlowPaths::of(&loaded).expect("paths");
    let tuple = "11.0.2.1:49152->11.0.12.1:4791";
    let nodes =
        |ports: &BTreeSet<PortRef>| -> BTreeSet<u32> { ports.iter().map(|p| p.node).collect() };
    let before = nodes(paths.ports_at(tuple, 400_000).expect("path before"));
    let after = nodes(paths.ports_at(tuple, 600_000).expect("path after"));
    // Before the loop the flow reaches h12's ToR through agg1 (pinned by tor1's route).
    assert!(before.contains(&tor1) && before.contains(&agg1) && before.contains(&tor6));
    // Once the loop is in force it circles agg1 ↔ core2 and never reaches tor6.
    assert!(after.contains(&agg1) && after.contains(&core2));
    assert!(!after.contains(&tor6), "{after:?}");
    // Attribution still sees both routings.
    let all = nodes(paths.ports(tuple).expect("any path"));
    assert!(all.is_superset(&before) && all.is_superset(&after));
}

#[test]
fn a_slow_receiver_is_correct_only_as_a_slow_receiver_naming_its_host_or_port() {
    let mut t = truth(AnomalyClass::SlowReceiver, "slow_receiver");
    t.injector = Some("h6".into());
    // The analyzer names the host as the receiver (root_cause.receiver), the sink port as
    // its root port.
    let mut by_host = anomaly("slow_receiver", true, &[(27, 1)], None);
    by_host["root_cause"]["receiver"] = json!("h6");
    let judged = judge(&t, Some(&diagnosis(vec![by_host])));
    assert_eq!(judged.verdict, Verdict::Correct);
    assert_eq!(judged.claims, vec!["slow_receiver@s27.p1,at h6"]);
    let by_port = anomaly("slow_receiver", true, &[(19, 0)], None);
    assert_eq!(
        judge(&t, Some(&diagnosis(vec![by_port]))).verdict,
        Verdict::Correct
    );
    let mut other_host = anomaly("slow_receiver", true, &[(27, 1)], None);
    other_host["root_cause"]["receiver"] = json!("h9");
    assert_eq!(
        judge(&t, Some(&diagnosis(vec![other_host]))).verdict,
        Verdict::WrongRootCause
    );
    // A drain-rate limit reported as an injection by the same host is the wrong diagnosis.
    let storm = anomaly("pfc_storm", true, &[(19, 0)], Some("h6"));
    assert_eq!(
        judge(&t, Some(&diagnosis(vec![storm]))).verdict,
        Verdict::WrongType
    );
}

#[test]
fn an_out_of_loop_initiator_that_congested_a_loop_port_may_be_named_in_the_loop() {
    // The incast's congestion points are s19.p0 (outside the loop) and s20.p1, which is
    // also a loop port: its path crosses the loop link. Contention at a loop port is the
    // in-loop signature (Table 2), so an in-loop initiator naming that port is correct.
    let mut t = truth(
        AnomalyClass::DeadlockOutOfLoop,
        "deadlock_initiator_out_of_loop_flow_contention",
    );
    t.root_ports = vec![port(19, 0), port(20, 1)];
    t.loop_ports = vec![port(20, 1), port(21, 2)];
    let at_shared = diagnosis(vec![anomaly(
        "deadlock_initiator_in_loop",
        true,
        &[(20, 1)],
        None,
    )]);
    assert_eq!(judge(&t, Some(&at_shared)).verdict, Verdict::Correct);
    // Another loop port, not congested by the initiator, is not the cause.
    let elsewhere = diagnosis(vec![anomaly(
        "deadlock_initiator_in_loop",
        true,
        &[(21, 2)],
        None,
    )]);
    assert_eq!(judge(&t, Some(&elsewhere)).verdict, Verdict::WrongType);
    // With the initiator's congestion off the loop, no in-loop claim is accepted.
    t.root_ports = vec![port(19, 0)];
    assert_eq!(judge(&t, Some(&at_shared)).verdict, Verdict::WrongType);
}

#[test]
fn a_victim_crossing_a_port_the_initiator_congested_long_before_is_not_the_deadlocks() {
    // An out-of-loop deadlock: an incast congests s19.p0 from 1.0 to 1.2 ms and the loop
    // s20.p1 ↔ s21.p2 it froze lasts to 2.0 ms. A background victim through s19.p0 at
    // 1.95 ms met no queue of the incast there (drained 750 µs before) and no PFC of the
    // anomaly: something else slowed it, so it is not judged against the deadlock.
    let mut t = truth(
        AnomalyClass::DeadlockOutOfLoop,
        "deadlock_initiator_out_of_loop_flow_contention",
    );
    t.root_ports = vec![port(19, 0)];
    t.loop_ports = vec![port(20, 1), port(21, 2)];
    t.end_ns = 2_000_000;
    t.roots_end_ns = 1_200_000;
    let mut paths = BTreeMap::new();
    paths.insert(
        "via-root".to_string(),
        [port(16, 3), port(19, 0)].into_iter().collect(),
    );
    paths.insert(
        "via-loop".to_string(),
        [port(16, 2), port(20, 1)].into_iter().collect(),
    );
    let paths = FlowPaths::from_paths(paths);
    // While the incast's queue may still be there (its end + 500 µs): attributed.
    assert!(attributed(&t, &paths, "via-root", Window::until(1_700_000)));
    // Long after: not, though the deadlock's window is still open …
    assert!(!attributed(
        &t,
        &paths,
        "via-root",
        Window::until(1_950_000)
    ));
    // … for which a victim crossing the loop still counts.
    assert!(attributed(&t, &paths, "via-loop", Window::until(1_950_000)));
    // A port the anomaly's PFC holds paused when the sample flies counts whenever.
    t.spreading = vec![spread(
        1_900_000,
        2_100_000,
        port(20, 0),
        port(19, 0),
        port(20, 1),
    )];
    assert!(attributed(&t, &paths, "via-root", Window::until(1_950_000)));
}

#[test]
fn a_sender_held_for_the_congested_port_it_crosses_met_contention_there() {
    // An incast congests tor0.p1 (0,1), and tor0 pauses its host h0's NIC (5,0) for it.
    let mut t = truth(AnomalyClass::PfcBackpressure, "pfc_backpressure");
    t.root_ports = vec![port(0, 1)];
    t.spreading = vec![spread(
        1_000_100,
        1_100_000,
        port(0, 0),
        port(5, 0),
        port(0, 1),
    )];
    let topo = line_topology();
    // h0's flow crosses tor0.p1 itself: its NIC held for that port is its contention there.
    let through_root: BTreeSet<PortRef> = [port(5, 0), port(0, 1), port(1, 1)].into();
    let exposure = t.exposure(&through_root, Window::until(1_050_000), &topo);
    assert!(!exposure.paused, "{exposure:?}");
    let contention = diagnosis(vec![anomaly(
        "normal_flow_contention",
        true,
        &[(0, 1)],
        None,
    )]);
    assert_eq!(
        judge_victim(&t, exposure, Some(&contention)).verdict,
        Verdict::Correct
    );
    // Held for tor0.p2, a port off its path: head-of-line blocking by PFC, paused.
    t.spreading[0].cause = port(0, 2);
    t.root_ports = vec![port(0, 2)];
    let exposure = t.exposure(&through_root, Window::until(1_050_000), &topo);
    assert!(exposure.paused, "{exposure:?}");
}
