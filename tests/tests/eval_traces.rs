//! `hawkmesh eval` trace generation: deterministic for a seed, every class covered with the
//! structure it calls for, every trace a valid scenario, bad configuration rejected.

use hawkmesh_lab::eval::run::{draw_traces, Grid};
use hawkmesh_lab::eval::traces::{Initiator, HOSTS};
use hawkmesh_lab::eval::{generate, AnomalyClass, EvalConfig};

#[test]
fn the_same_seed_draws_the_same_traces_and_another_seed_others() {
    for class in AnomalyClass::ALL {
        for index in 0..4 {
            let a = generate(class, index, 0, 42);
            let b = generate(class, index, 0, 42);
            assert_eq!(a, b, "{class} {index}");
            assert_eq!(a.to_toml(), b.to_toml());
            let other = generate(class, index, 0, 43);
            assert_ne!(
                a.to_toml(),
                other.to_toml(),
                "{class} {index}: seed ignored"
            );
            let retry = generate(class, index, 1, 42);
            assert_ne!(
                a.to_toml(),
                retry.to_toml(),
                "{class} {index}: attempt ignored"
            );
        }
        assert_ne!(
            generate(class, 0, 0, 42).to_toml(),
            generate(class, 1, 0, 42).to_toml()
        );
    }
}

#[test]
fn every_class_has_the_structure_it_calls_for_and_is_a_valid_scenario() {
    let mut initiators = std::collections::BTreeSet::new();
    for class in AnomalyClass::ALL {
        for index in 0..12 {
            let spec = generate(class, index, 0, 7);
            let loaded = spec
                .scenario()
                .unwrap_or_else(|e| panic!("{}: {e}", spec.id));
            assert_eq!(loaded.scenario.name, spec.id);
            assert!(
                (0.2..=0.5).contains(&spec.load),
                "{}: load {}",
                spec.id,
                spec.load
            );
            assert!(spec.id.starts_with(class.name()));
            let hosts = |names: &[String]| {
                names
                    .iter()
                    .all(|n| n[1..].parse::<u32>().is_ok_and(|h| h < HOSTS))
            };
            match class {
                AnomalyClass::PfcBackpressure | AnomalyClass::FlowContention => {
                    let incast = spec.incast.as_ref().expect("an incast");
                    assert!((4..=12).contains(&incast.senders.len()), "{}", spec.id);
                    assert!(!incast.senders.contains(&incast.receiver));
                    assert!(hosts(&incast.senders));
                    assert_eq!(
                        incast.congestion_control,
                        class == AnomalyClass::FlowContention,
                        "micro-bursts run at line rate, contention with DCQCN"
                    );
                    assert!(spec.storm.is_none() && spec.loop_switches.is_empty());
                }
                AnomalyClass::PfcStorm => {
                    let storm = spec.storm.as_ref().expect("a storm");
                    assert!((2..=4).contains(&spec.flows.len()));
                    assert!(spec.flows.iter().all(|f| f.dst == storm.host));
                    assert!(spec.flows.iter().all(|f| f.start_us < storm.start_us));
                    assert!(spec.loop_switches.is_empty());
                }
                AnomalyClass::SlowReceiver => {
                    let slow = spec.slow.as_ref().expect("a slow receiver");
                    assert!((2..=4).contains(&spec.flows.len()));
                    assert!(spec.flows.iter().all(|f| f.dst == slow.host));
                    assert!(spec.flows.iter().all(|f| f.start_us < slow.start_us));
                    assert!(slow.drain_gbps > 0.0 && slow.drain_gbps < 100.0);
                    assert!(spec.storm.is_none() && spec.loop_switches.is_empty());
                }
                AnomalyClass::DeadlockInLoop => {
                    assert!(matches!(spec.loop_switches.len(), 2 | 4), "{}", spec.id);
                    assert!(spec.storm.is_none() && spec.incast.is_none());
                    let dst = &spec.flows[0].dst;
                    assert!(spec.flows.iter().all(|f| &f.dst == dst));
                    assert!(
                        !spec.background_hosts.contains(dst),
                        "the loop's destination takes no background traffic"
                    );
                    // Every switch of the loop forwards the destination to the next one.
                    for (i, switch) in spec.loop_switches.iter().enumerate() {
                        let next = &spec.loop_switches[(i + 1) % spec.loop_switches.len()];
                        assert!(spec
                            .routes
                            .iter()
                            .any(|r| &r.switch == switch && &r.dst == dst && &r.via == next));
                    }
                }
                AnomalyClass::DeadlockOutOfLoop => {
                    assert_eq!(spec.loop_switches.len(), 2);
                    let initiator = spec.initiator.expect("an initiator");
                    initiators.insert(format!("{initiator:?}"));
                    match initiator {
                        Initiator::Incast => assert!(spec.incast.is_some() && spec.storm.is_none()),
                        Initiator::Storm => assert!(spec.storm.is_some() && spec.incast.is_none()),
                    }
                }
            }
            // At most one route per (switch, destination).
            let mut keys: Vec<_> = spec.routes.iter().map(|r| (&r.switch, &r.dst)).collect();
            keys.sort();
            let before = keys.len();
            keys.dedup();
            assert_eq!(keys.len(), before, "{}: conflicting routes", spec.id);
        }
    }
    assert_eq!(initiators.len(), 2, "both out-of-loop initiators occur");
}

#[test]
fn drawing_checks_that_the_anomaly_materialises_and_is_deterministic() {
    let config = EvalConfig {
        master_seed: 5,
        traces_per_class: 1,
        families: vec![hawkmesh_lab::eval::Family::K4],
        classes: AnomalyClass::ALL.to_vec(),
        grid: Grid::Fixed,
        work_dir: std::env::temp_dir(),
        keep_incidents: None,
    };
    let first = draw_traces(&config).unwrap();
    let second = draw_traces(&config).unwrap();
    assert_eq!(
        serde_json::to_string(&first).unwrap(),
        serde_json::to_string(&second).unwrap()
    );
    assert_eq!(first.len(), AnomalyClass::ALL.len());
    for (record, class) in first.iter().zip(AnomalyClass::ALL) {
        assert_eq!(record.spec.class, class);
        assert!(
            record.realized,
            "{}: no attempt materialised: {:?}",
            record.spec.id, record.attempts
        );
        let last = record.attempts.last().unwrap();
        assert!(last.realized && last.attempt == record.spec.attempt);
        assert!(record.attempts[..record.attempts.len() - 1]
            .iter()
            .all(|a| !a.realized));
    }
}

#[test]
fn bad_configuration_is_rejected_with_a_clear_message() {
    let error = AnomalyClass::parse("pfc-hurricane")
        .unwrap_err()
        .to_string();
    assert!(error.contains("pfc-hurricane"), "{error}");
    for class in AnomalyClass::ALL {
        assert!(error.contains(class.name()), "{error}");
        assert_eq!(AnomalyClass::parse(class.name()).unwrap(), class);
    }
    assert_eq!(
        AnomalyClass::parse("PFC_STORM").unwrap(),
        AnomalyClass::PfcStorm
    );
    let error = Grid::parse("diagonal").unwrap_err().to_string();
    assert!(
        error.contains("sweep") && error.contains("diagonal"),
        "{error}"
    );
    let mut config = EvalConfig {
        master_seed: 1,
        traces_per_class: 0,
        families: vec![hawkmesh_lab::eval::Family::K4],
        classes: vec![AnomalyClass::PfcStorm],
        grid: Grid::Sweep,
        work_dir: std::env::temp_dir(),
        keep_incidents: None,
    };
    assert!(config
        .validate()
        .unwrap_err()
        .to_string()
        .contains("--traces"));
    config.traces_per_class = 1001;
    assert!(config.validate().is_err());
    config.traces_per_class = 3;
    config.classes = vec![AnomalyClass::PfcStorm, AnomalyClass::PfcStorm];
    assert!(config.validate().unwrap_err().to_string().contains("twice"));
    config.classes.clear();
    assert!(config.validate().is_err());
}

#[test]
fn the_grids_have_the_documented_points() {
    let sweep = Grid::Sweep.points();
    assert_eq!(
        sweep.len(),
        8,
        "5 epochs at 300 % + 3 other thresholds at 2^18 ns"
    );
    assert!(sweep
        .iter()
        .all(|p| p.epoch_log2_ns == 18 || p.threshold_percent == 300));
    assert_eq!(Grid::Full.points().len(), 20);
    assert_eq!(Grid::Fixed.points().len(), 1);
    let epochs: std::collections::BTreeSet<u8> = Grid::Full
        .points()
        .iter()
        .map(|p| p.epoch_log2_ns)
        .collect();
    assert_eq!(
        epochs.into_iter().collect::<Vec<_>>(),
        vec![17, 18, 19, 20, 21]
    );
}
