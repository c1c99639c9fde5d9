//! What a network engineer would check before trusting the simulator.

use hawkmesh_netsim::time::{serialization, MS, NS, US};
use hawkmesh_netsim::{LoadedScenario, Scenario, SimResult, Simulation};

fn load(text: &str) -> LoadedScenario {
    Scenario::parse(text, "test.toml", std::path::PathBuf::from("."))
        .unwrap_or_else(|e| panic!("scenario does not load: {e}"))
}

fn run(text: &str) -> SimResult {
    hawkmesh_netsim::run_loaded(&load(text)).unwrap()
}

fn port<'a>(
    result: &'a SimResult,
    node: &str,
    peer: &str,
) -> &'a hawkmesh_netsim::output::PortRecord {
    result
        .ports
        .iter()
        .find(|p| p.name == node && p.peer == peer)
        .unwrap_or_else(|| panic!("no port {node}->{peer}"))
}

/// h0 — s0 — h1, 100G, 2 µs.
const LINE: &str = r#"
version = 1
duration_us = 2000
[topology]
kind = "graph"
switches = ["s0"]
hosts = ["h0", "h1"]
links = [{ a = "h0", b = "s0" }, { a = "s0", b = "h1" }]
"#;

#[test]
fn one_flow_reaches_line_rate_and_matches_the_analytical_fct() {
    let size: u64 = 1_000_000;
    let text = format!(
        "{LINE}[[workload]]\nkind = \"flows\"\nflows = [{{ src = \"h0\", dst = \"h1\", size_bytes = {size}, start_us = 10 }}]\n"
    );
    let result = run(&text);
    let flow = &result.flows[0];
    // 1000 packets of 1000 B payload + 62 B RoCEv2 framing, back to back at 100G, one store
    // and forward at s0, then the 66 B ACK back over two hops.
    let bps = 100_000_000_000;
    let packets = size / 1000;
    let total_serialization = packets * serialization(1062, bps);
    let expected =
        total_serialization + serialization(1062, bps) + 2 * serialization(66, bps) + 4 * 2 * US;
    assert_eq!(flow.fct_ns, Some(expected / NS), "FCT vs analytical");
    // Goodput while sending = payload share of the line rate (1000/1062 of 100G).
    let goodput = size as f64 * 8.0 / (total_serialization as f64 / 1e12);
    assert!(
        (goodput / 1e9 - 100.0 * 1000.0 / 1062.0).abs() < 0.01,
        "goodput {goodput}"
    );
    assert_eq!(result.totals.pause_frames, 0);
    assert_eq!(result.totals.ecn_marked, 0);
}

/// DCQCN settings of the HPCC reference's `dcqcn` profile at 100G (run.py): timer-only rate
/// increase every 300 µs, AI 20 Mb/s, HAI 200 Mb/s, α gain 1/256 every 1 µs, a CNP for every
/// marked packet, rate floor 1 Gb/s.
const REFERENCE_DCQCN: &str = "[nic.dcqcn]\nrpg_byte_reset = 0\nrpg_ai_rate = 20\nrpg_hai_rate = 200\nrpg_min_rate = 1000\ndce_tcp_g = 1020\nmin_time_between_cnps = 0\n";

fn shares(text: &str) -> Vec<f64> {
    let loaded = load(text);
    let mut sim = Simulation::new(&loaded).unwrap();
    sim.run_until(8 * MS);
    let before: Vec<u64> = (0..4).map(|f| sim.flow_delivered(f).unwrap()).collect();
    sim.run_until(12 * MS);
    let result = sim.result("fair", 1, &[u64::MAX]);
    assert!(
        result.totals.ecn_marked > 0,
        "DCQCN needs ECN marks to converge"
    );
    (0..4)
        .map(|f| (sim.flow_delivered(f).unwrap() - before[f as usize]) as f64 * 8.0 / 4e-3 / 1e9)
        .collect()
}

fn jain(rates: &[f64]) -> f64 {
    let total: f64 = rates.iter().sum();
    total * total / (rates.len() as f64 * rates.iter().map(|r| r * r).sum::<f64>())
}

#[test]
fn flows_sharing_a_bottleneck_converge_to_fair_shares_under_dcqcn() {
    let text = r#"
version = 1
duration_us = 12000
[topology]
kind = "graph"
switches = ["s0"]
hosts = ["h0", "h1", "h2", "h3", "h4"]
links = [{ a = "h0", b = "s0" }, { a = "h1", b = "s0" }, { a = "h2", b = "s0" }, { a = "h3", b = "s0" }, { a = "s0", b = "h4" }]
[[workload]]
kind = "flows"
flows = [
  { src = "h0", dst = "h4", size_bytes = 1000000000 },
  { src = "h1", dst = "h4", size_bytes = 1000000000, start_us = 50 },
  { src = "h2", dst = "h4", size_bytes = 1000000000, start_us = 100 },
  { src = "h3", dst = "h4", size_bytes = 1000000000, start_us = 150 },
]
"#;
    // With the reference's DCQCN profile the four flows split the bottleneck evenly and
    // keep it busy.
    let rates = shares(&format!("{text}{REFERENCE_DCQCN}"));
    let total: f64 = rates.iter().sum();
    assert!(total > 88.0, "bottleneck underused: {rates:?} Gbit/s");
    assert!(jain(&rates) > 0.98, "unfair shares {rates:?}");
    for rate in &rates {
        assert!(
            (rate / (total / 4.0) - 1.0).abs() < 0.15,
            "share {rate} of {rates:?}"
        );
    }
    // ConnectX defaults (byte counter, 5 Mb/s AI, CNP every 4 µs) oscillate harder but stay fair.
    let rates = shares(text);
    assert!(
        jain(&rates) > 0.95,
        "unfair shares with ConnectX defaults {rates:?}"
    );
    assert!(rates.iter().sum::<f64>() > 60.0, "{rates:?}");
}

fn incast(headroom: &str) -> String {
    format!(
        r#"
version = 1
duration_us = 3000
[topology]
kind = "graph"
switches = ["s0"]
hosts = ["h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"]
links = [{{ a = "h0", b = "s0" }}, {{ a = "h1", b = "s0" }}, {{ a = "h2", b = "s0" }}, {{ a = "h3", b = "s0" }},
         {{ a = "h4", b = "s0" }}, {{ a = "h5", b = "s0" }}, {{ a = "h6", b = "s0" }}, {{ a = "h7", b = "s0" }},
         {{ a = "h8", b = "s0" }}]
[switch]
buffer_mb = 1
{headroom}
[[workload]]
kind = "incast"
senders = ["h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"]
receiver = "h0"
size_bytes = 2000000
start_us = 10
congestion_control = false
"#
    )
}

#[test]
fn correct_headroom_makes_incast_lossless_and_too_little_drops() {
    let lossless = run(&incast(""));
    assert!(lossless.totals.pause_frames > 0, "incast must trigger PFC");
    assert_eq!(
        lossless.totals.drops_buffer, 0,
        "3×BDP headroom must absorb in-flight data"
    );
    assert_eq!(lossless.totals.flows_completed, 8);
    let lossy = run(&incast("headroom_kb = 1"));
    assert!(
        lossy.totals.drops_buffer > 0,
        "1 KB headroom cannot absorb a link's in-flight bytes"
    );
    let s0_ingress_drops: u64 = lossy
        .ports
        .iter()
        .filter(|p| p.name == "s0")
        .map(|p| p.counters.drops_buffer)
        .sum();
    assert_eq!(s0_ingress_drops, lossy.totals.drops_buffer);
}

#[test]
fn a_paused_priority_does_not_block_the_others() {
    let text = format!(
        r#"{LINE}
[switch]
buffer_mb = 1
[[workload]]
kind = "flows"
flows = [
  {{ src = "h0", dst = "h1", size_bytes = 4000000, start_us = 10, priority = 3 }},
  {{ src = "h0", dst = "h1", size_bytes = 4000000, start_us = 10, priority = 4 }},
]
[[fault]]
kind = "pfc_injection"
host = "h1"
priority = 3
start_us = 5
duration_us = 1900
"#
    );
    let result = run(&text);
    let (p3, p4) = (&result.flows[0], &result.flows[1]);
    assert_eq!(p3.priority, 3);
    assert!(
        p3.fct_ns.is_none_or(|fct| fct > 1_800_000),
        "priority 3 is paused for the storm: {:?}",
        p3.fct_ns
    );
    let fct4 = p4.fct_ns.expect("priority 4 must finish during the storm");
    assert!(
        (fct4 as f64) < 1.2 * p4.ideal_fct_ns as f64,
        "priority 4 slowed: {fct4} vs ideal {}",
        p4.ideal_fct_ns
    );
    let toward_h1 = port(&result, "s0", "h1");
    assert!(toward_h1.counters.pause_duration_ns[3] > 1_800_000);
    assert_eq!(toward_h1.counters.pause_duration_ns[4], 0);
}

fn ring(misrouted: bool) -> String {
    let mut text = String::from(
        r#"
version = 1
duration_us = 6000
[topology]
kind = "ring"
switches = 4
hosts_per_switch = 1
[switch]
buffer_mb = 1
[output]
queue_sample_interval_us = 50
[[workload]]
kind = "flows"
flows = [
  { src = "h0", dst = "h1", size_bytes = 400000000, congestion_control = false },
  { src = "h1", dst = "h2", size_bytes = 400000000, congestion_control = false },
  { src = "h2", dst = "h3", size_bytes = 400000000, congestion_control = false },
  { src = "h3", dst = "h0", size_bytes = 400000000, congestion_control = false },
]
"#,
    );
    if misrouted {
        // Every flow goes the long way round (3 hops counter-clockwise): each ring link is
        // shared by three flows and the ring's buffers depend on each other in a cycle.
        for i in 0..4 {
            let dst = (i + 1) % 4;
            for hop in 0..3 {
                let at = (i + 4 - hop) % 4;
                let via = (at + 3) % 4;
                text.push_str(&format!(
                    "[[route]]\nswitch = \"s{at}\"\ndst = \"h{dst}\"\nvia = [\"s{via}\"]\n"
                ));
            }
        }
        text.push_str(
            "[[fault]]\nkind = \"routing_loop\"\nswitches = [\"s0\", \"s3\", \"s2\", \"s1\"]\n",
        );
    }
    text
}

fn delivered_between(result: &SimResult, from_ns: u64, to_ns: u64) -> u64 {
    let at = |t: u64| {
        result
            .goodput
            .iter()
            .filter(|(time, _)| *time <= t)
            .map(|(_, bytes)| *bytes)
            .max()
            .unwrap_or(0)
    };
    at(to_ns) - at(from_ns)
}

#[test]
fn cyclic_buffer_dependency_deadlocks_and_correct_routes_do_not() {
    let stuck = run(&ring(true));
    assert!(stuck.totals.pause_frames > 0);
    assert_eq!(
        delivered_between(&stuck, 3_000_000, 6_000_000),
        0,
        "throughput must fall to zero and stay there"
    );
    assert!(
        delivered_between(&stuck, 0, 1_000_000) > 0,
        "traffic flowed before the deadlock"
    );
    let truth = &stuck.ground_truth[0];
    assert_eq!(truth.loop_ports.len(), 4);
    let healthy = run(&ring(false));
    let moved = delivered_between(&healthy, 3_000_000, 6_000_000);
    // Four flows at ~94 Gbit/s goodput each for 3 ms.
    assert!(
        moved > 4 * 30_000_000,
        "correct routes keep moving: {moved} bytes"
    );
}

#[test]
fn a_pfc_storm_pauses_the_tor_port_and_spreads_upstream() {
    let text = r#"
version = 1
duration_us = 1500
[topology]
kind = "fat_tree"
k = 4
[switch]
buffer_mb = 2
[[workload]]
kind = "incast"
senders = ["h4", "h8", "h12", "h5", "h9", "h13"]
receiver = "h0"
size_bytes = 3000000
start_us = 10
[[fault]]
kind = "pfc_injection"
host = "h0"
start_us = 100
duration_us = 1000
"#;
    let result = run(text);
    let tor = port(&result, "tor0", "h0");
    assert!(
        tor.counters.pause_duration_ns[3] > 900_000,
        "ToR port toward the storming host is paused"
    );
    let truth = &result.ground_truth[0];
    assert_eq!(truth.initial_ports.len(), 1);
    let tor0 = result.topology.node_by_name("tor0").unwrap().id;
    assert_eq!(truth.initial_ports[0].node, tor0);
    // The ToR pauses its uplinks' senders (aggregation switches), which pause the cores...
    let paused_nodes: std::collections::BTreeSet<String> = truth
        .paused_ports
        .iter()
        .map(|p| result.topology.nodes[p.node as usize].name.clone())
        .collect();
    assert!(
        paused_nodes.iter().any(|n| n.starts_with("agg")),
        "{paused_nodes:?}"
    );
    assert!(
        paused_nodes.iter().any(|n| n.starts_with("core")),
        "{paused_nodes:?}"
    );
    assert!(truth.pfc_spreading.len() >= 3);
    // Each edge knows when its pause ended. The storming host stops refreshing at 1100 µs
    // and its last pause runs to expiry: 65535 quanta × 512 bit times at 100G.
    let h0 = result.topology.node_by_name("h0").unwrap().id;
    let storm = truth
        .pfc_spreading
        .iter()
        .find(|e| e.sender.node == h0)
        .expect("the host's edge");
    assert!(storm.last_ns < 1_100_000 && storm.until_ns > 1_100_000);
    assert!(storm.until_ns - storm.last_ns <= 335_540);
    for e in &truth.pfc_spreading {
        assert!(e.until_ns >= e.last_ns, "{e:?}");
    }
    // Switches resume with XON once their ingress drains, before the pause would expire.
    assert!(
        truth
            .pfc_spreading
            .iter()
            .any(|e| e.sender.node != h0 && e.until_ns - e.last_ns < 300_000),
        "{:?}",
        truth.pfc_spreading
    );
}

#[test]
fn same_seed_same_results_and_a_different_seed_differs() {
    let text = r#"
version = 1
seed = 5
duration_us = 1500
[topology]
kind = "fat_tree"
k = 4
[[workload]]
kind = "poisson"
load = 0.5
cdf = "websearch"
duration_us = 1000
"#;
    let a = serde_json::to_string(&run(text)).unwrap();
    let b = serde_json::to_string(&run(text)).unwrap();
    assert_eq!(a, b);
    let c = serde_json::to_string(&run(&text.replace("seed = 5", "seed = 6"))).unwrap();
    assert_ne!(a, c);
}

#[test]
fn every_shipped_scenario_loads() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) == Some("toml") {
            let loaded = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
            Simulation::new(&loaded).unwrap_or_else(|e| panic!("{e}"));
            count += 1;
        }
    }
    assert!(count >= 2);
}

#[test]
fn a_run_extended_past_its_end_finishes_what_is_in_flight_but_starts_nothing_new() {
    // A 1 MB flow starting 80 µs before a 100 µs scenario ends cannot finish by then; a
    // second flow would start after the end.
    let text = "version = 1\nduration_us = 100\n[topology]\nkind = \"graph\"\nswitches = [\"s0\"]\nhosts = [\"h0\", \"h1\"]\nlinks = [{ a = \"h0\", b = \"s0\" }, { a = \"s0\", b = \"h1\" }]\n[[workload]]\nkind = \"flows\"\nflows = [{ src = \"h0\", dst = \"h1\", size_bytes = 1000000, start_us = 20 }, { src = \"h1\", dst = \"h0\", size_bytes = 1000, start_us = 150 }]\n";
    let loaded = load(text);
    let mut sim = Simulation::new(&loaded).unwrap();
    sim.run_until(MS);
    assert_eq!(sim.now(), 100 * US, "a run stops at the scenario's end");
    let cut = sim.result("t", 1, &[u64::MAX]);
    assert_eq!(cut.flows[0].fct_ns, None);
    sim.extend_end(MS);
    sim.run_until(MS);
    assert_eq!(sim.now(), MS);
    let drained = sim.result("t", 1, &[u64::MAX]);
    assert!(
        drained.flows[0].fct_ns.is_some(),
        "the flow in flight finished"
    );
    assert_eq!(
        drained.flows[1].fct_ns, None,
        "the later flow never started"
    );
}

/// Two rail groups of one host each, two rails, two spines: h0 and h1 have NICs 0 and 1.
/// Both flows leave h0 by NIC 0 (rail0_0), one to each NIC of h1.
fn rails_with_route(route: &str) -> String {
    format!(
        r#"
version = 1
duration_us = 200
[topology]
kind = "rail"
groups = 2
hosts_per_group = 1
rails = 2
spines = 2
[[workload]]
kind = "flows"
flows = [
  {{ src = "h0", dst = "h1", size_bytes = 10000, start_us = 1, src_nic = 0, dst_nic = 0 }},
  {{ src = "h0", dst = "h1", size_bytes = 10000, start_us = 1, src_nic = 0, dst_nic = 1 }},
]
{route}
"#
    )
}

#[test]
fn a_route_for_one_nic_of_a_host_leaves_its_other_nics_alone() {
    // rail0_0 reaches either NIC of h1 over either spine; its routes pin spine1 for h1's
    // NIC 0 and spine0 for its NIC 1, and each flow must take its own NIC's spine (a route
    // for the whole host would send both the same way).
    let spines_crossed = |route: &str| -> Vec<Vec<String>> {
        let loaded = load(&rails_with_route(route));
        let sim = Simulation::new(&loaded).unwrap();
        let topology = sim.topology();
        (0..2)
            .map(|flow| {
                sim.flow_path(flow)
                    .iter()
                    .map(|p| topology.nodes[p.node as usize].name.clone())
                    .filter(|n| n.starts_with("spine"))
                    .collect()
            })
            .collect()
    };
    let pinned = spines_crossed(
        "[[route]]\nswitch = \"rail0_0\"\ndst = \"h1\"\nnic = 0\nvia = [\"spine1\"]\n\
         [[route]]\nswitch = \"rail0_0\"\ndst = \"h1\"\nnic = 1\nvia = [\"spine0\"]\n",
    );
    assert_eq!(
        pinned,
        vec![vec!["spine1".to_string()], vec!["spine0".to_string()]]
    );
    let flipped = spines_crossed(
        "[[route]]\nswitch = \"rail0_0\"\ndst = \"h1\"\nnic = 0\nvia = [\"spine0\"]\n\
         [[route]]\nswitch = \"rail0_0\"\ndst = \"h1\"\nnic = 1\nvia = [\"spine1\"]\n",
    );
    assert_eq!(
        flipped,
        vec![vec!["spine0".to_string()], vec!["spine1".to_string()]]
    );
    // A NIC the host does not have is refused, naming the route.
    let text = rails_with_route(
        "[[route]]\nswitch = \"rail0_0\"\ndst = \"h1\"\nnic = 2\nvia = [\"spine1\"]\n",
    );
    let loaded = load(&text);
    let error = match Simulation::new(&loaded) {
        Ok(_) => panic!("a route to NIC 2 of a two-NIC host loads"),
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains("route[0].nic") && error.contains("no NIC 2"),
        "{error}"
    );
}
