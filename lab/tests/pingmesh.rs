//! R-Pingmesh in netsim: the real prober/responder library on every RNIC, probing the
//! controller's pinglists with packets in the simulated fabric, analysed by the pingmesh
//! analyzer — against injected faults whose place is known.

use hawkmesh_lab::pingmesh::{AgentEvent, AgentEventKind, CpuLoad, NetsimProbing, ProbingConfig};
use hawkmesh_netsim::time::NS;
use hawkmesh_netsim::{Scenario, Simulation};
use hawkmesh_pingmesh::analysis::{
    AnalysisConfig, Analyzer, PeriodReport, ProblemKind, TimeoutCause,
};
use hawkmesh_wire::topology::PortRef;

const PERIOD_NS: u64 = 20_000_000;

fn scenario(faults: &str) -> String {
    format!(
        r#"
version = 1
duration_us = 21000
[topology]
kind = "fat_tree"
k = 4
{faults}
"#
    )
}

/// The analyzer at simulation scale: periods of 20 ms (the paper's 20 s), probes at
/// 2,000/s, so the RTT and CPU thresholds shrink with them.
fn analysis() -> AnalysisConfig {
    AnalysisConfig {
        // Agents upload continuously here; a host silent for half a period is down.
        host_silence_ns: PERIOD_NS / 2,
        rnic_hold_ns: 3 * PERIOD_NS,
        cpu_noise_delay_ns: 200_000,
        high_rtt_ns: 200_000,
        ..AnalysisConfig::default()
    }
}

fn run(faults: &str, loads: Vec<CpuLoad>) -> (PeriodReport, Simulation, u64) {
    run_with(faults, loads, Vec::new())
}

fn run_with(
    faults: &str,
    loads: Vec<CpuLoad>,
    events: Vec<AgentEvent>,
) -> (PeriodReport, Simulation, u64) {
    let text = scenario(faults);
    let loaded = Scenario::parse(&text, "pingmesh.toml", ".".into()).unwrap();
    let mut sim = Simulation::new(&loaded).unwrap();
    let probing = NetsimProbing::new(&sim, ProbingConfig::default(), loads, events).unwrap();
    sim.set_host_hook(Box::new(probing.clone()));
    sim.run_until((PERIOD_NS + 1_000_000) * NS);
    let records = probing.take_records(&sim);
    let inventory = probing.inventory();
    let mut analyzer = Analyzer::new(analysis());
    for (host, at) in probing.last_uploads(PERIOD_NS) {
        analyzer.uploaded(host, at);
    }
    let report = analyzer.analyse(
        &inventory,
        &probing.current_qpns(),
        &records,
        (0, PERIOD_NS),
        None,
    );
    (report, sim, probing.stats().probes)
}

fn link_ports(sim: &Simulation, a: &str, b: &str) -> Vec<PortRef> {
    let t = sim.topology();
    let (a, b) = (t.node_by_name(a).unwrap().id, t.node_by_name(b).unwrap().id);
    t.links
        .iter()
        .filter(|l| (l.a.node, l.b.node) == (a, b) || (l.a.node, l.b.node) == (b, a))
        .flat_map(|l| [l.a, l.b])
        .collect()
}

#[test]
fn a_healthy_fabric_reports_nothing_and_measures_its_rtt() {
    let (report, _, probes) = run("", Vec::new());
    // 16 RNICs probe their ToR peer at 2,000/s, and 21 inter-ToR 5-tuples per ToR (Eq. 1 over
    // 4 paths) at 2,000/s each, for 21 ms.
    assert!(probes > 7_000, "{probes}");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(report.timeouts.is_empty(), "{:?}", report.timeouts);
    let rtt = report.cluster.network_rtt;
    assert!(rtt.count > 6_000, "{rtt:?}");
    // Six links each way at most, 1 µs each plus serialisation and switching: a few µs to
    // a few tens of µs, never the host CPU's time.
    assert!(rtt.p50 > 2_000 && rtt.p999 < 50_000, "{rtt:?}");
    let host = report.cluster.end_host_delay;
    assert!(host.p50 >= 2_000, "{host:?}");
}

#[test]
fn drops_on_one_fabric_link_are_located_to_it() {
    let (report, sim, _) = run(
        r#"
[[fault]]
kind = "random_loss"
a = "agg2"
b = "core0"
rate = 0.3
"#,
        Vec::new(),
    );
    let drops: Vec<_> = report
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::SwitchDrops)
        .collect();
    assert_eq!(drops.len(), 1, "{:?}", report.problems);
    // Many 5-tuples cross the lossy link: it alone has the most votes.
    let faulty = link_ports(&sim, "agg2", "core0");
    assert!(
        drops[0].links.iter().all(|(l, _)| faulty.contains(l)),
        "{:?} vs {faulty:?}",
        drops[0].links
    );
    assert!(report.timeouts[&TimeoutCause::SwitchNetwork] > 10);
    // Nothing else is blamed: no RNIC, no host CPU (a lost delay ACK is a drop too).
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
}

#[test]
fn a_busy_responder_cpu_is_end_host_delay_not_the_network() {
    let text = scenario("");
    let loaded = Scenario::parse(&text, "p.toml", ".".into()).unwrap();
    let sim = Simulation::new(&loaded).unwrap();
    let h5 = sim.topology().node_by_name("h5").unwrap().id;
    let (report, _, _) = run(
        "",
        vec![CpuLoad {
            host: h5,
            extra_ns: 20_000,
            from_ns: 5_000_000,
            until_ns: 15_000_000,
        }],
    );
    assert!(
        report
            .problems
            .iter()
            .all(|p| p.kind == ProblemKind::HostCpu && p.host == Some(h5)),
        "{:?}",
        report.problems
    );
    assert!(
        report.cluster.end_host_delay.p999 > 200_000,
        "{:?}",
        report.cluster
    );
    assert!(
        report.cluster.network_rtt.p99 < 50_000,
        "{:?}",
        report.cluster
    );
}

#[test]
fn an_acl_dropping_some_five_tuples_is_found_by_the_tuples_it_hits() {
    // The agg–core link drops a quarter of the RoCEv2 source ports: only inter-ToR probes
    // whose 5-tuple falls in the range and whose route crosses the link are lost.
    let (report, sim, _) = run(
        r#"
[[fault]]
kind = "acl_drop"
a = "agg2"
b = "core0"
src_port_min = 49152
src_port_max = 53247
"#,
        Vec::new(),
    );
    let drops: Vec<_> = report
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::SwitchDrops)
        .collect();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let faulty = link_ports(&sim, "agg2", "core0");
    assert!(
        drops[0].links.iter().all(|(l, _)| faulty.contains(l)),
        "{:?} vs {faulty:?}",
        drops[0].links
    );
}

fn h(sim: &Simulation, name: &str) -> u32 {
    sim.topology().node_by_name(name).unwrap().id
}

fn quiet_sim() -> Simulation {
    let text = scenario("");
    let loaded = Scenario::parse(&text, "p.toml", ".".into()).unwrap();
    Simulation::new(&loaded).unwrap()
}

#[test]
fn an_agent_restart_is_qpn_reset_noise_not_a_problem() {
    let h6 = h(&quiet_sim(), "h6");
    let (report, _, _) = run_with(
        "",
        Vec::new(),
        vec![AgentEvent {
            host: h6,
            at_ns: 8_000_000,
            kind: AgentEventKind::Restart,
        }],
    );
    // Probes to h6 carry its old QPN until the comm info is refreshed: timeouts, filtered.
    assert!(
        report.timeouts.get(&TimeoutCause::QpnReset) > Some(&50),
        "{:?}",
        report.timeouts
    );
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn a_host_that_went_down_is_host_down_not_the_network() {
    let h9 = h(&quiet_sim(), "h9");
    let (report, _, _) = run_with(
        "",
        Vec::new(),
        vec![AgentEvent {
            host: h9,
            at_ns: 2_000_000,
            kind: AgentEventKind::Down,
        }],
    );
    assert!(
        report.timeouts.get(&TimeoutCause::HostDown) > Some(&50),
        "{:?}",
        report.timeouts
    );
    let kinds: Vec<_> = report.problems.iter().map(|p| (p.kind, p.host)).collect();
    assert_eq!(kinds, vec![(ProblemKind::HostDown, Some(h9))]);
}

#[test]
fn an_rnic_whose_link_flaps_is_an_rnic_problem_not_a_switch_one() {
    let sim = quiet_sim();
    let (h3, tor1) = (h(&sim, "h3"), h(&sim, "tor1"));
    assert!(sim
        .topology()
        .links
        .iter()
        .any(|l| (l.a.node, l.b.node) == (h3, tor1) || (l.a.node, l.b.node) == (tor1, h3)));
    let (report, _, _) = run(
        r#"
[[fault]]
kind = "link_flap"
a = "h3"
b = "tor1"
down_us = 3000
up_us = 15000
"#,
        Vec::new(),
    );
    let kinds: Vec<_> = report.problems.iter().map(|p| (p.kind, p.host)).collect();
    assert_eq!(
        kinds,
        vec![(ProblemKind::Rnic, Some(h3))],
        "{:?}",
        report.problems
    );
    assert!(
        !report.timeouts.contains_key(&TimeoutCause::SwitchNetwork),
        "{:?}",
        report.timeouts
    );
    assert!(report.cluster.rnic_drop_rate > 0.01, "{:?}", report.cluster);
}

#[test]
fn a_flapping_fabric_link_is_located_to_it() {
    // agg2–core0 goes down for 1 ms every 3 ms, four times.
    let (report, sim, _) = run(
        r#"
[[fault]]
kind = "link_flap"
a = "agg2"
b = "core0"
down_us = 3000
up_us = 4000
count = 4
period_us = 3000
"#,
        Vec::new(),
    );
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let problem = &report.problems[0];
    assert_eq!(problem.kind, ProblemKind::SwitchDrops);
    let faulty = link_ports(&sim, "agg2", "core0");
    assert!(
        problem.links.iter().all(|(l, _)| faulty.contains(l)),
        "{:?} vs {faulty:?}",
        problem.links
    );
}

#[test]
fn a_flapping_rnic_is_an_rnic_problem() {
    let h3 = h(&quiet_sim(), "h3");
    let (report, _, _) = run(
        r#"
[[fault]]
kind = "link_flap"
a = "h3"
b = "tor1"
down_us = 3000
up_us = 4200
count = 4
period_us = 2500
"#,
        Vec::new(),
    );
    let kinds: Vec<_> = report.problems.iter().map(|p| (p.kind, p.host)).collect();
    assert_eq!(kinds, vec![(ProblemKind::Rnic, Some(h3))]);
}

#[test]
fn a_pfc_storm_from_an_rnic_is_that_rnics_problem_not_its_cpu_or_the_fabric() {
    // h8's NIC pauses tor4's port toward it for 5 ms: probes to it wait there (timeouts,
    // high RTT once released), and so do the ACKs of its own probes.
    let h8 = h(&quiet_sim(), "h8");
    let (report, _, _) = run(
        r#"
[[fault]]
kind = "pfc_injection"
host = "h8"
start_us = 4000
duration_us = 5000
"#,
        Vec::new(),
    );
    let kinds: Vec<_> = report.problems.iter().map(|p| (p.kind, p.host)).collect();
    assert_eq!(
        kinds,
        vec![(ProblemKind::Rnic, Some(h8))],
        "{:?}",
        report.problems
    );
    assert!(
        report.timeouts[&TimeoutCause::Rnic] > 50,
        "{:?}",
        report.timeouts
    );
    assert!(!report.timeouts.contains_key(&TimeoutCause::CpuNoise));
}

#[test]
fn an_uplink_taking_every_flow_of_its_tor_is_switch_latency_on_it() {
    // tor0 hashes every flow to agg0 while its two hosts send to other pods at line rate:
    // 200G offered to a 100G uplink, kept lossless by DCQCN and PFC, so probes crossing it
    // queue.
    let (report, sim, _) = run(
        r#"
[[workload]]
kind = "flows"
flows = [
  { src = "h0", dst = "h4", size_bytes = 30000000, start_us = 4000 },
  { src = "h1", dst = "h8", size_bytes = 30000000, start_us = 4000 },
]
[[fault]]
kind = "ecmp_imbalance"
switch = "tor0"
toward = "agg0"
fraction = 1.0
"#,
        Vec::new(),
    );
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let problem = &report.problems[0];
    assert_eq!(problem.kind, ProblemKind::SwitchLatency);
    let hot = link_ports(&sim, "tor0", "agg0");
    assert!(
        problem.links.iter().all(|(l, _)| hot.contains(l)),
        "{:?} vs {hot:?}",
        problem.links
    );
    assert!(report.timeouts.is_empty(), "{:?}", report.timeouts);
    // The tail shows it; the median is the fabric's usual RTT.
    let rtt = report.cluster.network_rtt;
    assert!(rtt.p50 < 50_000 && rtt.p999 > 200_000, "{rtt:?}");
}

/// Service tracing on the HAWKEYE incast scenario: every open connection is probed on its
/// own 5-tuple, and when the incast fills h0's ToR port the probes' RTT fires HAWKEYE
/// triggers for the incast connections — the flows' own 5-tuples, nothing before the burst.
#[test]
fn service_tracing_probes_connections_on_their_5_tuples_and_triggers_polling_in_the_incast() {
    use hawkmesh_lab::pingmesh::ServiceTracing;
    use hawkmesh_pingmesh::analysis::ProbeSource;
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/k4-incast.toml"
    ))
    .unwrap();
    let loaded = Scenario::parse(&text, "k4-incast.toml", ".".into()).unwrap();
    let mut sim = Simulation::new(&loaded).unwrap();
    let config = ProbingConfig {
        service_tracing: Some(ServiceTracing::polling(
            loaded.scenario.switch.control_priority,
        )),
        ..ProbingConfig::default()
    };
    let probing = NetsimProbing::new(&sim, config, Vec::new(), Vec::new()).unwrap();
    sim.set_host_hook(Box::new(probing.clone()));
    let mut now = 0;
    while now < 3_000_000 {
        now += 20_000;
        sim.run_until(now * NS);
        probing.trace_services(&sim);
    }
    let records = probing.take_records(&sim);
    let traced: Vec<_> = records
        .iter()
        .filter(|r| r.source == ProbeSource::ServiceTracing)
        .collect();
    assert!(traced.len() > 200, "{} service probes", traced.len());
    // A traced probe takes its connection's path: its 5-tuple is the flow's.
    let flows: Vec<_> = (0..sim.flow_count() as u32)
        .filter_map(|f| sim.flow_posting(f))
        .collect();
    let triggers = probing.triggers();
    assert!(
        !triggers.is_empty(),
        "the incast must slow the traced connections"
    );
    let h0 = sim.topology().node_by_name("h0").unwrap().ipv4.unwrap();
    for trigger in &triggers {
        assert!(
            flows.iter().any(|f| f.tuple == trigger.victim),
            "{:?} is no connection's 5-tuple",
            trigger.victim
        );
    }
    // The incast (ten senders into h0 from 1 ms): its connections are polled within
    // 300 µs of the burst, on their own traced RTT.
    let incast: std::collections::BTreeSet<[u8; 4]> = triggers
        .iter()
        .filter(|t| t.victim.dst_ip == h0 && (1_000_000..1_300_000).contains(&t.at_ns))
        .map(|t| t.victim.src_ip)
        .collect();
    assert!(incast.len() >= 8, "{} incast senders polled", incast.len());
}

/// Path tracing keeps the daemon's schedule: the pinglist 5-tuples are traced from the
/// start, the service connections' 5-tuples (new once the connections open) only as each
/// host's budget allows, so early results of a new 5-tuple carry no path.
#[test]
fn new_five_tuples_are_traced_under_each_hosts_budget() {
    use hawkmesh_host_agent::paths::PathTracingConfig;
    use hawkmesh_lab::pingmesh::ServiceTracing;
    use hawkmesh_pingmesh::analysis::ProbeSource;
    use std::collections::BTreeSet;
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/k4-incast.toml"
    ))
    .unwrap();
    let loaded = Scenario::parse(&text, "k4-incast.toml", ".".into()).unwrap();
    let run = |tracing: PathTracingConfig| {
        let mut sim = Simulation::new(&loaded).unwrap();
        let config = ProbingConfig {
            service_tracing: Some(ServiceTracing {
                trigger: None,
                ..ServiceTracing::polling(3)
            }),
            path_tracing: tracing,
            ..ProbingConfig::default()
        };
        let probing = NetsimProbing::new(&sim, config, Vec::new(), Vec::new()).unwrap();
        sim.set_host_hook(Box::new(probing.clone()));
        let mut records = Vec::new();
        let mut now = 0;
        while now < 3_000_000 {
            now += 20_000;
            sim.run_until(now * NS);
            probing.trace_services(&sim);
            if now % 500_000 == 0 {
                // An upload every 500 µs: the traces the budget allows run then.
                records.extend(probing.take_records(&sim));
            }
        }
        records
    };
    // One trace per host per millisecond at most.
    let tight = run(PathTracingConfig {
        traces_per_s: 1_000.0,
        burst: 1,
        ..PathTracingConfig::default()
    });
    let (service, pinglist): (Vec<_>, Vec<_>) = tight
        .iter()
        .partition(|r| r.source == ProbeSource::ServiceTracing);
    assert!(!pinglist.is_empty() && service.len() > 100);
    assert!(
        pinglist
            .iter()
            .all(|r| !r.path.is_empty() && !r.ack_path.is_empty()),
        "every pinglist 5-tuple is traced from the start"
    );
    let untraced = service.iter().filter(|r| r.path.is_empty()).count();
    assert!(
        untraced > 0,
        "the budget cannot have traced every new 5-tuple at once"
    );
    // Each host traced at most 1 + 3 new 5-tuples in the 3 ms (1 at start, then 1 per ms).
    let distinct: BTreeSet<(u32, u32)> = service
        .iter()
        .filter(|r| !r.path.is_empty())
        .map(|r| (r.prober, r.target))
        .collect();
    let hosts: BTreeSet<u32> = service.iter().map(|r| r.prober).collect();
    assert!(
        distinct.len() <= hosts.len() * 4,
        "{} traced service 5-tuples from {} hosts",
        distinct.len(),
        hosts.len()
    );
    // With the default budget every connection's 5-tuple is traced by the next upload.
    let ample = run(ProbingConfig::default().path_tracing);
    let service: Vec<_> = ample
        .iter()
        .filter(|r| r.source == ProbeSource::ServiceTracing)
        .collect();
    let untraced = service.iter().filter(|r| r.path.is_empty()).count();
    assert!(
        service.len() > 100 && untraced == 0,
        "{untraced} of {} untraced",
        service.len()
    );
}
