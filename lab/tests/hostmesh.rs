//! Hostmesh in netsim on a rail-optimised fabric: every host probes between its own RNICs
//! across rails with real packets, no controller; one-way loss and latency are located with
//! their direction.

use hawkmesh_lab::hostmesh::{HostmeshProbingConfig, NetsimHostmesh};
use hawkmesh_netsim::time::NS;
use hawkmesh_netsim::{Scenario, Simulation};
use hawkmesh_pingmesh::hostmesh::{analyse, HostmeshProblemKind, HostmeshReport};
use hawkmesh_wire::topology::PortRef;

const PERIOD_NS: u64 = 10_000_000;

fn run(faults: &str) -> (HostmeshReport, Simulation) {
    let text = format!(
        r#"
version = 1
duration_us = 11000
[topology]
kind = "rail"
groups = 2
hosts_per_group = 4
rails = 4
spines = 2
{faults}
"#
    );
    let loaded = Scenario::parse(&text, "hostmesh.toml", ".".into()).unwrap();
    let mut sim = Simulation::new(&loaded).unwrap();
    let config = HostmeshProbingConfig::default();
    let agents = NetsimHostmesh::new(&sim, config, Vec::new()).unwrap();
    assert_eq!(agents.probing_hosts(), 8, "every host has RNICs on 4 rails");
    sim.set_host_hook(Box::new(agents.clone()));
    sim.run_until((PERIOD_NS + 2_500_000) * NS);
    let records = agents.take_records(&sim);
    let report = analyse(
        &agents.inventory(),
        &records,
        (0, PERIOD_NS),
        &config.hostmesh,
    );
    (report, sim)
}

fn port_toward(sim: &Simulation, from: &str, to: &str) -> PortRef {
    let t = sim.topology();
    let (a, b) = (
        t.node_by_name(from).unwrap().id,
        t.node_by_name(to).unwrap().id,
    );
    t.links
        .iter()
        .find_map(|l| {
            if (l.a.node, l.b.node) == (a, b) {
                Some(l.a)
            } else if (l.b.node, l.a.node) == (a, b) {
                Some(l.b)
            } else {
                None
            }
        })
        .unwrap()
}

#[test]
fn a_healthy_rail_fabric_has_no_problem_and_one_way_latency_is_measured() {
    let (report, _) = run("");
    assert!(report.probes > 1000, "{} probes", report.probes);
    assert_eq!(report.lost, 0);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // Two hops up and two down at 1 µs each (the default links), plus serialisation.
    assert!(
        (4_000..20_000).contains(&report.latency.p50),
        "one-way latency P50 {} ns",
        report.latency.p50
    );
    assert!(
        report.processing.p50 >= 1_000,
        "the host's CPU handles each probe"
    );
}

#[test]
fn a_link_losing_in_one_direction_is_located_with_that_direction() {
    let (report, sim) = run(r#"
[[fault]]
kind = "random_loss"
a = "spine0"
b = "rail1_2"
rate = 0.3
one_way = true
"#);
    assert!(report.lost > 10);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let problem = &report.problems[0];
    assert_eq!(problem.kind, HostmeshProblemKind::LinkDrops);
    assert_eq!(
        problem.directions,
        vec![port_toward(&sim, "spine0", "rail1_2")],
        "spine0 → rail1_2 only"
    );
}

#[test]
fn an_rnic_whose_link_is_down_is_the_rnics_problem() {
    let (report, sim) = run(r#"
[[fault]]
kind = "link_flap"
a = "h5"
b = "rail1_2"
down_us = 1000
up_us = 100000
"#);
    let t = sim.topology();
    let h5 = t.node_by_name("h5").unwrap().id;
    let inventory = hawkmesh_pingmesh::Inventory::from_topology(t).unwrap();
    let rnic = inventory
        .rnics()
        .iter()
        .position(|r| r.host == h5 && r.tor == t.node_by_name("rail1_2").unwrap().id)
        .unwrap() as u32;
    let kinds: Vec<_> = report
        .problems
        .iter()
        .map(|p| (p.kind, p.rnics.clone()))
        .collect();
    assert_eq!(kinds, vec![(HostmeshProblemKind::RnicDrops, vec![rnic])]);
}
