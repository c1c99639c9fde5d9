//! The widened evaluation: fabric families drawn with their speeds, oversubscription and
//! thresholds, and anomalies placed by the fabric's graph — valid scenarios, deterministic,
//! every class on every family, loops that are real cycles, flows on the anomaly's rail.

use hawkmesh_lab::eval::traces::Initiator;
use hawkmesh_lab::eval::{generate_on, AnomalyClass, Family};
use std::collections::{BTreeMap, BTreeSet};

const DRAWN: [Family; 3] = [Family::LeafSpine, Family::Clos, Family::Rail];

#[test]
fn families_draw_mixed_speeds_oversubscription_and_thresholds() {
    let mut host_speeds = BTreeSet::new();
    let mut ratios = BTreeSet::new();
    let mut oversubscription = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    let mut rails = BTreeSet::new();
    for family in DRAWN {
        for index in 0..40 {
            let spec = generate_on(family, AnomalyClass::PfcStorm, index, 0, 3).unwrap();
            let fabric = &spec.fabric;
            assert_eq!(fabric.family, family);
            host_speeds.insert(fabric.host_gbps as u32);
            ratios.insert((fabric.fabric_gbps / fabric.host_gbps) as u32);
            oversubscription.insert((fabric.oversubscription * 4.0).round() as u32);
            kinds.insert(fabric.kind.clone());
            rails.insert(fabric.rails);
            assert!(fabric.fabric_gbps <= 400.0 && fabric.host_gbps >= 25.0);
            assert!(
                (0.5..=4.0).contains(&fabric.oversubscription),
                "{}",
                fabric.describe()
            );
            assert!(fabric.kmin_kb_per_gbps.is_some() && fabric.pfc_alpha_shift.is_some());
            // The buffer leaves room for the shared pool beyond headroom and reserves.
            let view = fabric.view().unwrap();
            assert!(spec.buffer_mb >= fabric.buffer_with_shared(&view, 1.5) - 1e-9);
        }
    }
    for speed in [25, 50, 100, 200, 400] {
        assert!(
            host_speeds.contains(&speed),
            "{speed}G hosts never drawn: {host_speeds:?}"
        );
    }
    assert!(ratios.len() >= 3, "fabric/host speed ratios {ratios:?}");
    for over in [4, 8, 12, 16] {
        assert!(
            oversubscription.contains(&over),
            "{}:1 never drawn: {oversubscription:?}",
            over as f64 / 4.0
        );
    }
    assert_eq!(kinds.len(), 3, "{kinds:?}");
    assert!(rails.contains(&2) && rails.contains(&4), "{rails:?}");
}

#[test]
fn every_class_is_placed_on_every_family_as_a_valid_deterministic_scenario() {
    for family in DRAWN {
        for class in AnomalyClass::ALL {
            let mut placed = 0;
            for index in 0..6 {
                let spec = generate_on(family, class, index, 0, 11).unwrap();
                let again = generate_on(family, class, index, 0, 11).unwrap();
                assert_eq!(spec.to_toml(), again.to_toml(), "{}", spec.id);
                let other = generate_on(family, class, index, 1, 11).unwrap();
                assert_ne!(
                    spec.to_toml(),
                    other.to_toml(),
                    "{}: attempt ignored",
                    spec.id
                );
                assert!(spec
                    .id
                    .starts_with(&format!("{}-{}", family.name(), class.name())));
                if spec.unplaced.is_some() {
                    continue;
                }
                placed += 1;
                let loaded = spec
                    .scenario()
                    .unwrap_or_else(|e| panic!("{}: {e}\n{}", spec.id, spec.to_toml()));
                // Everything the scenario names runs (hosts, NICs, routes, faults).
                hawkmesh_netsim::Simulation::new(&loaded)
                    .unwrap_or_else(|e| panic!("{}: {e}\n{}", spec.id, spec.to_toml()));
            }
            assert!(placed >= 4, "{family} {class}: only {placed} of 6 placed");
        }
    }
}

#[test]
fn loops_are_cycles_of_the_fabric_and_flows_are_steered_into_them() {
    let mut lengths = BTreeSet::new();
    let mut initiators = BTreeSet::new();
    for family in DRAWN {
        for class in [
            AnomalyClass::DeadlockInLoop,
            AnomalyClass::DeadlockOutOfLoop,
        ] {
            for index in 0..10 {
                let spec = generate_on(family, class, index, 0, 5).unwrap();
                if spec.unplaced.is_some() {
                    continue;
                }
                let view = spec.fabric.view().unwrap();
                let id = |name: &str| view.topo.node_by_name(name).unwrap().id;
                let ring = &spec.loop_switches;
                lengths.insert(ring.len());
                assert!((2..=5).contains(&ring.len()), "{}", spec.id);
                // Consecutive loop switches are neighbours.
                for (i, switch) in ring.iter().enumerate() {
                    let next = &ring[(i + 1) % ring.len()];
                    assert!(
                        view.adjacency[&id(switch)].contains(&id(next)),
                        "{}: {switch} and {next} are not neighbours",
                        spec.id
                    );
                }
                // Following the routes for the loop's destination from every loop switch
                // walks the loop.
                let dst = &spec
                    .flows
                    .iter()
                    .rev()
                    .find(|f| !spec.background_hosts.contains(&f.dst))
                    .expect("a flow to the loop's destination")
                    .dst;
                let routes: BTreeMap<(&str, &str), &str> = spec
                    .routes
                    .iter()
                    .map(|r| ((r.switch.as_str(), r.dst.as_str()), r.via.as_str()))
                    .collect();
                assert_eq!(
                    routes.len(),
                    spec.routes.len(),
                    "{}: conflicting routes",
                    spec.id
                );
                for (i, switch) in ring.iter().enumerate() {
                    let next = &ring[(i + 1) % ring.len()];
                    if class == AnomalyClass::DeadlockInLoop || ring.len() == 2 {
                        assert_eq!(
                            routes.get(&(switch.as_str(), dst.as_str())),
                            Some(&next.as_str()),
                            "{}",
                            spec.id
                        );
                    }
                }
                // Every flow to the destination reaches the loop by its routes: from its
                // sender's switch, overridden hops lead into a loop switch.
                for flow in spec.flows.iter().filter(|f| &f.dst == dst) {
                    let host = view.hosts.iter().find(|h| h.name == flow.src).unwrap();
                    let mut at = view.name(host.tors[flow.src_nic as usize]);
                    let mut hops = 0;
                    while !ring.contains(&at) {
                        at = routes
                            .get(&(at.as_str(), dst.as_str()))
                            .unwrap_or_else(|| {
                                panic!("{}: {} is not steered at {at}", spec.id, flow.src)
                            })
                            .to_string();
                        hops += 1;
                        assert!(hops < 10, "{}: steering loops outside the loop", spec.id);
                    }
                }
                if class == AnomalyClass::DeadlockOutOfLoop {
                    let initiator = spec.initiator.expect("an initiator");
                    initiators.insert(format!("{initiator:?}"));
                    match initiator {
                        Initiator::Incast => assert!(spec.incast.is_some()),
                        Initiator::Storm => assert!(spec.storm.is_some()),
                    }
                }
            }
        }
    }
    assert!(lengths.contains(&2) && lengths.contains(&4), "{lengths:?}");
    assert_eq!(initiators.len(), 2);
}

#[test]
fn anomalies_use_their_rail_on_rail_optimised_fabrics() {
    let mut nics = BTreeSet::new();
    for class in [
        AnomalyClass::PfcBackpressure,
        AnomalyClass::PfcStorm,
        AnomalyClass::SlowReceiver,
    ] {
        for index in 0..12 {
            let spec = generate_on(Family::Rail, class, index, 0, 9).unwrap();
            let text = spec.to_toml();
            // One background workload per rail.
            assert_eq!(
                text.matches("kind = \"poisson\"").count(),
                spec.fabric.rails as usize
            );
            if let Some(incast) = &spec.incast {
                nics.insert(incast.nic);
            }
            if let Some(storm) = &spec.storm {
                nics.insert(storm.nic);
                assert!(spec.flows.iter().all(|f| f.dst_nic == storm.nic));
            }
            if let Some(slow) = &spec.slow {
                nics.insert(slow.nic);
                assert!(spec.flows.iter().all(|f| f.dst_nic == slow.nic));
            }
        }
    }
    assert!(
        nics.iter().any(|n| *n > 0),
        "every anomaly on rail 0: {nics:?}"
    );
}

#[test]
fn unknown_families_are_refused_naming_the_known_ones() {
    let error = Family::parse("torus").unwrap_err().to_string();
    assert!(error.contains("torus"), "{error}");
    for family in Family::ALL {
        assert!(error.contains(family.name()), "{error}");
        assert_eq!(Family::parse(family.name()).unwrap(), family);
    }
}

#[test]
fn a_concurrent_anomaly_elsewhere_is_simulated_but_not_mistaken_for_the_traces_own() {
    let mut seen = BTreeSet::new();
    for class in [AnomalyClass::PfcBackpressure, AnomalyClass::PfcStorm] {
        for index in 0..30 {
            let spec = generate_on(Family::LeafSpine, class, index, 0, 21).unwrap();
            let Some(concurrent) = &spec.concurrent else {
                continue;
            };
            if !seen.insert((class, concurrent.kind.clone())) {
                continue;
            }
            // Its host hangs off a ToR the trace's own anomaly does not use.
            let view = spec.fabric.view().unwrap();
            let tor_of = |name: &str| {
                let h = view.hosts.iter().find(|h| h.name == name).unwrap();
                h.tors[concurrent.nic as usize]
            };
            let own_hosts: Vec<&String> = spec
                .flows
                .iter()
                .flat_map(|f| [&f.src, &f.dst])
                .chain(spec.incast.iter().flat_map(|i| i.senders.iter()))
                .chain(spec.incast.iter().map(|i| &i.receiver))
                .chain(spec.storm.iter().map(|s| &s.host))
                .collect();
            for host in own_hosts {
                assert_ne!(tor_of(host), tor_of(&concurrent.host), "{}", spec.id);
            }
            let loaded = spec.scenario().unwrap();
            let result = hawkmesh_netsim::run_loaded(&loaded).unwrap();
            assert_eq!(result.ground_truth.len(), 2, "{}", spec.id);
            let truth = hawkmesh_lab::eval::truth_of(&spec, &result);
            let concurrent_flows: BTreeSet<String> = result
                .flows
                .iter()
                .filter(|f| Some(f.workload) == spec.concurrent_workload())
                .map(|f| f.tuple.clone())
                .collect();
            assert_eq!(
                concurrent_flows.len(),
                concurrent.flows.len(),
                "{}",
                spec.id
            );
            assert!(
                truth.anomaly_flows.is_disjoint(&concurrent_flows),
                "{}",
                spec.id
            );
            assert!(!truth.anomaly_flows.is_empty());
            // The trace's own truth is its own anomaly's: its root is not the concurrent
            // host's port.
            let expected = if class == AnomalyClass::PfcStorm {
                "pfc_storm"
            } else {
                "pfc_backpressure"
            };
            assert_eq!(truth.expected_type, expected);
            if class == AnomalyClass::PfcStorm {
                assert_eq!(
                    truth.injector.as_deref(),
                    spec.storm.as_ref().map(|s| s.host.as_str())
                );
            }
        }
    }
    assert!(seen.len() >= 3, "concurrent anomalies drawn: {seen:?}");
}
