//! Faults a network engineer injects to rehearse incidents, and the data-queue scheduler.

use hawkmesh_netsim::{Scenario, SimResult};

fn run(text: &str) -> SimResult {
    let loaded = Scenario::parse(text, "test.toml", ".".into()).unwrap_or_else(|e| panic!("{e}"));
    hawkmesh_netsim::run_loaded(&loaded).unwrap()
}

/// h0, h1 → s0 → h2 (100G, 2 µs).
const DUMBBELL: &str = r#"
version = 1
duration_us = 3000
[topology]
kind = "graph"
switches = ["s0"]
hosts = ["h0", "h1", "h2"]
links = [{ a = "h0", b = "s0" }, { a = "h1", b = "s0" }, { a = "s0", b = "h2" }]
"#;

#[test]
fn dwrr_weights_split_a_congested_port() {
    let text = format!(
        r#"{DUMBBELL}
[switch]
scheduler = "dwrr"
dwrr_weights = [1, 1, 3, 1, 1, 1, 1, 1]
[[workload]]
kind = "flows"
flows = [
  {{ src = "h0", dst = "h2", size_bytes = 100000000, priority = 2, congestion_control = false }},
  {{ src = "h1", dst = "h2", size_bytes = 100000000, priority = 4, congestion_control = false }},
]
"#
    );
    let loaded = Scenario::parse(&text, "t.toml", ".".into()).unwrap();
    let mut sim = hawkmesh_netsim::Simulation::new(&loaded).unwrap();
    sim.run_until(1_000_000_000);
    let before = [
        sim.flow_delivered(0).unwrap(),
        sim.flow_delivered(1).unwrap(),
    ];
    sim.run_until(3_000_000_000);
    let heavy = (sim.flow_delivered(0).unwrap() - before[0]) as f64;
    let light = (sim.flow_delivered(1).unwrap() - before[1]) as f64;
    let ratio = heavy / light;
    assert!((ratio - 3.0).abs() < 0.3, "DWRR 3:1 gave {ratio:.2}");
    let result = sim.result("dwrr", 1, &[u64::MAX]);
    assert_eq!(result.totals.drops_buffer, 0, "PFC keeps it lossless");
}

#[test]
fn a_slow_receiver_pauses_its_tor_and_its_flows_finish_after_it_recovers() {
    let text = format!(
        r#"{DUMBBELL}
[[workload]]
kind = "flows"
flows = [{{ src = "h0", dst = "h2", size_bytes = 10000000, start_us = 10 }}]
[[fault]]
kind = "slow_receiver"
host = "h2"
drain_gbps = 10
start_us = 0
duration_us = 1000
"#
    );
    let result = run(&text);
    let nic = result.ports.iter().find(|p| p.name == "h2").unwrap();
    assert!(
        nic.counters.pause_frames_sent[3] > 0,
        "the NIC sends PAUSE when its buffer fills"
    );
    let tor = result
        .ports
        .iter()
        .find(|p| p.name == "s0" && p.peer == "h2")
        .unwrap();
    assert!(
        tor.counters.pause_duration_ns[3] > 100_000,
        "the ToR port toward it is paused"
    );
    let flow = &result.flows[0];
    let fct = flow
        .fct_ns
        .expect("finishes once the receiver drains at line rate again");
    // 10 MB at 10 Gbit/s for the first ms, then line rate.
    assert!(fct > 1_000_000, "slowed by the receiver: {fct} ns");
    assert_eq!(result.totals.drops_buffer, 0);
    assert_eq!(result.ground_truth[0].initial_ports.len(), 1);
}

#[test]
fn a_link_flap_loses_packets_and_go_back_n_recovers_them() {
    let text = format!(
        r#"{DUMBBELL}
[nic]
retransmit_timeout_us = 100
[[workload]]
kind = "flows"
flows = [{{ src = "h0", dst = "h2", size_bytes = 5000000, start_us = 10 }}]
[[fault]]
kind = "link_flap"
a = "s0"
b = "h2"
down_us = 100
up_us = 200
"#
    );
    let result = run(&text);
    assert!(result.totals.drops_link_down > 0);
    let flow = &result.flows[0];
    assert!(
        flow.fct_ns.is_some(),
        "the flow completes after the link returns"
    );
    assert!(flow.retransmitted_bytes > 0);
}

#[test]
fn random_loss_is_repaired_by_retransmission() {
    let text = format!(
        r#"{DUMBBELL}
[[workload]]
kind = "flows"
flows = [{{ src = "h0", dst = "h2", size_bytes = 20000000, start_us = 10 }}]
[[fault]]
kind = "random_loss"
a = "s0"
b = "h2"
rate = 0.001
"#
    )
    .replacen("version = 1\n", "version = 1\nseed = 4\n", 1);
    let result = run(&text.replacen("duration_us = 3000", "duration_us = 6000", 1));
    assert!(result.totals.drops_random_loss > 0);
    let flow = &result.flows[0];
    assert!(
        flow.fct_ns.is_some(),
        "every lost packet is resent (go-back-N)"
    );
    assert!(flow.retransmitted_bytes > 0);
    assert_eq!(result.totals.delivered_bytes, 20_000_000);
}

#[test]
fn ecmp_imbalance_skews_the_uplinks() {
    let text = r#"
version = 1
seed = 2
duration_us = 500
[topology]
kind = "leaf_spine"
leaves = 2
spines = 2
hosts_per_leaf = 8
[[workload]]
kind = "flows"
flows = [
  { src = "h0", dst = "h8", size_bytes = 200000 }, { src = "h1", dst = "h9", size_bytes = 200000 },
  { src = "h2", dst = "h10", size_bytes = 200000 }, { src = "h3", dst = "h11", size_bytes = 200000 },
  { src = "h4", dst = "h12", size_bytes = 200000 }, { src = "h5", dst = "h13", size_bytes = 200000 },
  { src = "h6", dst = "h14", size_bytes = 200000 }, { src = "h7", dst = "h15", size_bytes = 200000 },
  { src = "h0", dst = "h9", size_bytes = 200000, sport = 50000 }, { src = "h1", dst = "h10", size_bytes = 200000, sport = 50001 },
  { src = "h2", dst = "h11", size_bytes = 200000, sport = 50002 }, { src = "h3", dst = "h12", size_bytes = 200000, sport = 50003 },
]
[[fault]]
kind = "ecmp_imbalance"
switch = "leaf0"
toward = "spine0"
fraction = 1.0
"#;
    let result = run(text);
    let up = |spine: &str| {
        result
            .ports
            .iter()
            .find(|p| p.name == "leaf0" && p.peer == spine)
            .unwrap()
            .counters
            .tx_bytes
    };
    assert!(up("spine0") > 0);
    assert_eq!(up("spine1"), 0, "every flow pinned to spine0");
    assert_eq!(result.totals.flows_completed, 12);
}

/// Two leaves under one spine, four hosts per leaf, all links 100G: 4:1 oversubscription.
const OVERSUBSCRIBED: &str = r#"
version = 1
duration_us = 1500
[topology]
kind = "leaf_spine"
leaves = 2
spines = 1
hosts_per_leaf = 4
[switch]
buffer_mb = 32
"#;

fn port_name(result: &SimResult, port: &hawkmesh_wire::topology::PortRef) -> String {
    let node = &result.topology.nodes[port.node as usize];
    let peer = result
        .topology
        .peer(*port)
        .map(|p| result.topology.nodes[p.node as usize].name.clone())
        .unwrap_or_default();
    format!("{}→{peer}", node.name)
}

#[test]
fn an_incast_congested_upstream_is_not_blamed_on_the_receivers_port() {
    // Three senders under leaf0 send at line rate to h4 under leaf1: leaf0's one uplink
    // carries 300G of offered traffic, the receiver's port gets at most 100G and never queues.
    let text = format!(
        r#"{OVERSUBSCRIBED}
[[workload]]
kind = "incast"
senders = ["h0", "h1", "h2"]
receiver = "h4"
size_bytes = 300000
start_us = 10
congestion_control = false
[[fault]]
kind = "incast_burst"
workload = 0
"#
    );
    let result = run(&text);
    let truth = &result.ground_truth[0];
    let points: Vec<String> = truth
        .initial_ports
        .iter()
        .map(|p| port_name(&result, p))
        .collect();
    assert_eq!(points, vec!["leaf0→spine0".to_string()], "{points:?}");
    // The peaks it decided from are in the ground truth: the uplink's is large, the
    // receiver's port stayed under the floor (or never held the incast at all).
    let peak = |name: &str| {
        truth
            .queue_peaks
            .iter()
            .find(|(p, _)| port_name(&result, p) == name)
            .map_or(0, |(_, peak)| *peak)
    };
    assert!(peak("leaf0→spine0") > 100_000, "{:?}", truth.queue_peaks);
    assert!(peak("leaf1→h4") < hawkmesh_netsim::truth::INCAST_QUEUE_MIN_BYTES);

    // The same senders spread over both leaves' hosts into h4: now the receiver's port is
    // where the incast queues.
    let text = text.replace(
        r#"senders = ["h0", "h1", "h2"]"#,
        r#"senders = ["h0", "h5", "h6"]"#,
    );
    let result = run(&text);
    let points: Vec<String> = result.ground_truth[0]
        .initial_ports
        .iter()
        .map(|p| port_name(&result, p))
        .collect();
    assert!(points.contains(&"leaf1→h4".to_string()), "{points:?}");
}

#[test]
fn incast_burst_labels_explicit_flows_to_one_receiver() {
    let text = format!(
        r#"{OVERSUBSCRIBED}
[[workload]]
kind = "flows"
flows = [
  {{ src = "h5", dst = "h4", size_bytes = 200000, start_us = 30, congestion_control = false }},
  {{ src = "h6", dst = "h4", size_bytes = 200000, start_us = 20, congestion_control = false }},
]
[[fault]]
kind = "incast_burst"
workload = 0
"#
    );
    let result = run(&text);
    let truth = &result.ground_truth[0];
    assert_eq!(truth.root_cause_flows.len(), 2);
    assert_eq!(truth.start_ns, 20_000, "the first flow starts the burst");
    let points: Vec<String> = truth
        .initial_ports
        .iter()
        .map(|p| port_name(&result, p))
        .collect();
    assert_eq!(points, vec!["leaf1→h4".to_string()]);

    // Flows to two receivers are not an incast: refused, naming the fault and the flow.
    let bad = text.replace(r#"{ src = "h6", dst = "h4""#, r#"{ src = "h6", dst = "h7""#);
    let e = Scenario::parse(&bad, "x.toml", ".".into())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("fault[0].workload") && e.contains("flows[1]"),
        "{e}"
    );
}

#[test]
fn incast_poisson_and_alltoall_run_on_the_chosen_rail() {
    // Two groups of two hosts with two NICs each: rail r of every host hangs off rail switch r.
    let text = r#"
version = 1
duration_us = 400
[topology]
kind = "rail"
groups = 2
hosts_per_group = 2
rails = 2
spines = 1
[[workload]]
kind = "incast"
senders = ["h1", "h2"]
receiver = "h0"
size_bytes = 20000
start_us = 5
nic = 1
[[workload]]
kind = "poisson"
load = 0.3
cdf = "websearch"
duration_us = 200
nic = 1
[[workload]]
kind = "alltoall"
size_bytes = 5000
rounds = 1
nic = 1
[[fault]]
kind = "incast_burst"
workload = 0
"#;
    let result = run(text);
    assert!(!result.flows.is_empty());
    for flow in &result.flows {
        // NIC 1 of host i ends in .2 (HPCC addressing: NIC n ends in n + 1).
        for ip in flow
            .tuple
            .split("->")
            .map(|side| side.split(':').next().unwrap())
        {
            assert!(ip.ends_with(".2"), "flow {} left rail 1", flow.tuple);
        }
    }
    let truth = &result.ground_truth[0];
    let receiver_switch = &result.topology.nodes[truth.initial_ports[0].node as usize].name;
    assert!(receiver_switch.ends_with("_1"), "{receiver_switch}");
    // A NIC a host does not have is refused, naming the workload.
    let bad = text.replace(
        "nic = 1\n[[workload]]\nkind = \"poisson\"",
        "nic = 2\n[[workload]]\nkind = \"poisson\"",
    );
    let loaded = Scenario::parse(&bad, "x.toml", ".".into()).unwrap();
    let e = hawkmesh_netsim::run_loaded(&loaded)
        .unwrap_err()
        .to_string();
    assert!(e.contains("workload[0]") && e.contains("NIC 2"), "{e}");
}

#[test]
fn a_route_may_hand_packets_only_to_switches_or_to_their_own_destination() {
    // On a K=4 fat-tree, tor0 holds h0 and h1: a route for h2 via h1 would take its
    // packets out of the fabric to a host that does not want them.
    let base = "version = 1\nduration_us = 10\n[topology]\nkind = \"fat_tree\"\nk = 4\n";
    let text = format!("{base}[[route]]\nswitch = \"tor0\"\ndst = \"h2\"\nvia = [\"h1\"]\n");
    let loaded = Scenario::parse(&text, "t.toml", std::path::PathBuf::new()).unwrap();
    let error = hawkmesh_netsim::Simulation::new(&loaded).unwrap_err();
    assert_eq!(error.field, "route[0].via[0]");
    assert!(error.reason.contains("is a host"), "{}", error.reason);
    // Its own destination is a valid last hop.
    let text = format!("{base}[[route]]\nswitch = \"tor0\"\ndst = \"h1\"\nvia = [\"h1\"]\n");
    let loaded = Scenario::parse(&text, "t.toml", std::path::PathBuf::new()).unwrap();
    assert!(hawkmesh_netsim::Simulation::new(&loaded).is_ok());
}

#[test]
fn an_acl_fault_drops_only_its_source_ports_and_a_reversed_range_is_refused() {
    let text = |min: u16, max: u16| {
        format!(
            r#"
version = 1
duration_us = 300
[topology]
kind = "leaf_spine"
leaves = 2
spines = 1
hosts_per_leaf = 1
host_gbps = 100
fabric_gbps = 100
[[workload]]
kind = "flows"
flows = [
  {{ src = "h0", dst = "h1", size_bytes = 20000, start_us = 1 }},
  {{ src = "h0", dst = "h1", size_bytes = 20000, start_us = 1 }},
]
[[fault]]
kind = "acl_drop"
a = "leaf0"
b = "spine0"
src_port_min = {min}
src_port_max = {max}
"#
        )
    };
    // A NIC numbers its flows' source ports from 49152: the ACL hits the first flow only.
    let result = run(&text(49152, 49152));
    let truth = &result.ground_truth[0];
    assert!(
        truth.description.contains("49152-49152"),
        "{}",
        truth.description
    );
    let done: Vec<bool> = result.flows.iter().map(|f| f.finish_ns.is_some()).collect();
    assert_eq!(done, vec![false, true], "{:?}", result.flows);
    assert!(result.totals.drops_acl > 0);
    assert_eq!(result.totals.drops_random_loss, 0);
    let e = Scenario::parse(&text(60000, 50000), "x.toml", ".".into())
        .unwrap_err()
        .to_string();
    assert!(e.contains("fault[0].src_port_max"), "{e}");
}

/// A flow on the dumbbell from `start_us`, with `h2`'s link flapping `count` times.
fn flapping(count: u32, start_us: u32) -> String {
    format!(
        r#"{DUMBBELL}
[nic]
retransmit_timeout_us = 100
[[workload]]
kind = "flows"
flows = [{{ src = "h0", dst = "h2", size_bytes = 4000000, start_us = {start_us} }}]
[[fault]]
kind = "link_flap"
a = "s0"
b = "h2"
down_us = 100
up_us = 150
count = {count}
period_us = 300
"#
    )
}

#[test]
fn a_flapping_link_goes_down_once_per_period_count_times() {
    // Cycles: down 100–150, 400–450, 700–750 µs. A flow from 500 µs (≈ 320 µs at 100G)
    // meets the third outage only.
    let three = run(&flapping(3, 500));
    assert!(three.totals.drops_link_down > 0);
    assert!(
        three.flows[0].fct_ns.is_some(),
        "recovers after each outage"
    );
    let truth = &three.ground_truth[0];
    assert_eq!((truth.start_ns, truth.end_ns), (100_000, 750_000));
    assert!(
        truth.description.contains("flaps 3 times"),
        "{}",
        truth.description
    );
    // With two cycles the same flow crosses no outage.
    let two = run(&flapping(2, 500));
    assert_eq!(two.totals.drops_link_down, 0);
    assert_eq!(two.ground_truth[0].end_ns, 450_000);
}

#[test]
fn a_flapping_link_needs_a_count_and_a_period_longer_than_the_outage() {
    let error = |text: &str| {
        Scenario::parse(text, "test.toml", ".".into())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let zero = flapping(0, 500);
    assert!(
        error(&zero).contains("fault[0].count: must be at least 1"),
        "{}",
        error(&zero)
    );
    let no_period = flapping(3, 500).replace("period_us = 300\n", "");
    assert!(
        error(&no_period).contains("fault[0].period_us: is needed"),
        "{}",
        error(&no_period)
    );
    let overlapping = flapping(3, 500).replace("period_us = 300", "period_us = 50");
    assert!(
        error(&overlapping).contains("fault[0].period_us: must be longer than the outage"),
        "{}",
        error(&overlapping)
    );
    // One cycle needs no period.
    let once = flapping(1, 500).replace("period_us = 300\n", "");
    assert_eq!(error(&once), "");
}

#[test]
fn path_tracing_follows_an_ecmp_imbalance() {
    // leaf0 pins every flow toward spine0: the traced paths of flows leaving leaf0 must
    // cross spine0 as their packets do.
    let text = r#"
version = 1
seed = 2
duration_us = 50
[topology]
kind = "leaf_spine"
leaves = 2
spines = 2
hosts_per_leaf = 4
[[workload]]
kind = "flows"
flows = [
  { src = "h0", dst = "h4", size_bytes = 1000 }, { src = "h1", dst = "h5", size_bytes = 1000 },
  { src = "h2", dst = "h6", size_bytes = 1000 }, { src = "h3", dst = "h7", size_bytes = 1000 },
  { src = "h0", dst = "h5", size_bytes = 1000, sport = 50000 }, { src = "h1", dst = "h6", size_bytes = 1000, sport = 50001 },
]
[[fault]]
kind = "ecmp_imbalance"
switch = "leaf0"
toward = "spine0"
fraction = 1.0
"#;
    let loaded = Scenario::parse(text, "test.toml", ".".into()).unwrap();
    let sim = hawkmesh_netsim::Simulation::new(&loaded).unwrap();
    let topo = sim.topology();
    let spine0 = topo.node_by_name("spine0").unwrap().id;
    let spine1 = topo.node_by_name("spine1").unwrap().id;
    for flow in 0..6 {
        let nodes: Vec<u32> = sim.flow_path(flow).iter().map(|p| p.node).collect();
        assert!(nodes.contains(&spine0), "flow {flow}: {nodes:?}");
        assert!(!nodes.contains(&spine1), "flow {flow}: {nodes:?}");
    }
    // Without the fault, ECMP spreads these six 5-tuples over both spines.
    let plain = text.split("[[fault]]").next().unwrap();
    let loaded = Scenario::parse(plain, "test.toml", ".".into()).unwrap();
    let sim = hawkmesh_netsim::Simulation::new(&loaded).unwrap();
    assert!((0..6).any(|f| sim.flow_path(f).iter().any(|p| p.node == spine1)));
}
