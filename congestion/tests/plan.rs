//! The sampling plan over a fake source and a manual clock: seeded picks among the up ports,
//! a reset before each round, 100 reads 100 ms apart, continuous sampling, and replays.

use std::collections::{BTreeMap, BTreeSet};

use hawkmesh_congestion::parse;
use hawkmesh_congestion::plan::{ManualClock, SourceError};
use hawkmesh_congestion::{
    Clock, CounterSource, Direction, FitfConfig, PortId, PortKey, ReplaySource, Sample, Sampler,
    SamplingPlan, Tier, Width,
};

/// A fabric whose PortXmitWait counters rise by a fixed step per read; some ports down.
#[derive(Debug, Default)]
struct Fake {
    ports: Vec<PortId>,
    down: BTreeSet<PortKey>,
    waits: BTreeMap<PortKey, u64>,
    log: Vec<String>,
}

impl Fake {
    fn new() -> Self {
        let mut f = Fake::default();
        for sw in ["tor1", "tor2", "leaf1"] {
            let tier = if sw.starts_with("tor") {
                Tier::Tor
            } else {
                Tier::Leaf
            };
            for port in 1..=4 {
                let dir = if port <= 2 {
                    Direction::Down
                } else {
                    Direction::Up
                };
                f.ports.push(PortId::new(sw, port, tier.clone(), dir));
            }
        }
        f.down.insert(PortKey::new("tor1", 1));
        f.down.insert(PortKey::new("tor2", 3));
        f
    }
}

impl CounterSource for Fake {
    fn ports(&self) -> Vec<PortId> {
        self.ports.clone()
    }
    fn is_up(&mut self, port: &PortId) -> Result<bool, SourceError> {
        Ok(!self.down.contains(&port.key()))
    }
    fn reset(&mut self, port: &PortId) -> Result<(), SourceError> {
        self.log.push(format!("reset {port}"));
        self.waits.insert(port.key(), 0);
        Ok(())
    }
    fn read(&mut self, port: &PortId) -> Result<Sample, SourceError> {
        if self.down.contains(&port.key()) {
            return Err(SourceError::Down(port.to_string()));
        }
        self.log.push(format!("read {port}"));
        let w = self.waits.entry(port.key()).or_insert(0);
        *w += 45_454; // ~1 ms of 22 ns ticks per read
        Ok(Sample::new(port.clone(), 0, 0).with_wait(*w, Width::Bits32))
    }
}

#[test]
fn a_round_is_reset_then_100_reads_100_ms_apart() {
    let mut src = Fake::new();
    let mut clock = ManualClock::at(5_000);
    let mut sampler = Sampler::new(SamplingPlan {
        seed: 11,
        ..SamplingPlan::default()
    });
    let r = sampler.round(&mut src, &mut clock).expect("round");
    assert_eq!(r.samples.len(), 100);
    assert_eq!(src.log[0], format!("reset {}", r.port));
    assert_eq!(src.log.len(), 101);
    for (i, s) in r.samples.iter().enumerate() {
        assert_eq!(s.t_query_ns, 5_000 + i as u64 * 100_000_000);
        assert_eq!(s.port, r.port);
    }
    // The clock slept 99 times: no sleep after the last read.
    assert_eq!(clock.now_ns(), 5_000 + 99 * 100_000_000);
    let f = r.fitf(&FitfConfig::default()).expect("fitf");
    assert_eq!(f.intervals.len(), 99);
    assert!((f.stats.max - 45_454.0 * 22.0 / 1e8).abs() < 1e-9);
}

#[test]
fn picks_are_seeded_and_only_up_ports() {
    let run = |seed: u64| {
        let mut src = Fake::new();
        let mut clock = ManualClock::default();
        let plan = SamplingPlan {
            seed,
            reads_per_round: 2,
            ..SamplingPlan::default()
        };
        let mut s = Sampler::new(plan);
        s.run(&mut src, &mut clock, 60)
            .expect("rounds")
            .into_iter()
            .map(|r| r.port.key())
            .collect::<Vec<_>>()
    };
    let a = run(42);
    assert_eq!(a, run(42), "same seed, same schedule");
    assert_ne!(a, run(43));
    assert!(!a.contains(&PortKey::new("tor1", 1)));
    assert!(!a.contains(&PortKey::new("tor2", 3)));
    let nodes: BTreeSet<&str> = a.iter().map(|k| k.node.as_str()).collect();
    assert_eq!(nodes.len(), 3, "every switch gets picked in 60 rounds");
}

#[test]
fn no_up_port_is_an_error() {
    let mut src = Fake::new();
    for p in src.ports.clone() {
        src.down.insert(p.key());
    }
    let mut s = Sampler::new(SamplingPlan::default());
    let e = s
        .round(&mut src, &mut ManualClock::default())
        .expect_err("all down");
    assert_eq!(e, SourceError::NoUpPort(64));
}

#[test]
fn continuous_sampling_reads_chosen_ports_without_reset() {
    let mut src = Fake::new();
    let ports = vec![src.ports[1].clone(), src.ports[5].clone()];
    let mut clock = ManualClock::default();
    let mut s = Sampler::new(SamplingPlan::default());
    let out = s
        .continuous(&mut src, &mut clock, &ports, 3)
        .expect("samples");
    assert_eq!(out.len(), 6);
    assert!(src.log.iter().all(|l| l.starts_with("read")));
    assert_eq!(out[4].t_query_ns, 200_000_000);
    assert_eq!(out[5].xmit_wait, Some(3 * 45_454));
}

#[test]
fn replay_gives_back_recorded_samples_with_their_timing() {
    let p = PortId::new("tor9", 7, Tier::Tor, Direction::Up);
    let recorded: Vec<Sample> = (0..3u64)
        .map(|i| {
            Sample::new(p.clone(), 1_000 + i * 100_000_000, 3_000 + i)
                .with_wait(i * 10, Width::Bits64)
        })
        .collect();
    let text = parse::to_jsonl(&recorded);
    let mut src = ReplaySource::from_jsonl(&text).expect("jsonl");
    let plan = SamplingPlan {
        reads_per_round: 3,
        ..SamplingPlan::default()
    };
    let mut clock = ManualClock::default();
    let r = Sampler::new(plan)
        .round(&mut src, &mut clock)
        .expect("round");
    assert_eq!(r.samples, recorded);
    assert_eq!(src.resets(), &[p.key()]);
    assert_eq!(src.read(&p), Err(SourceError::Exhausted("tor9:7".into())));
    src.set_down(p.key());
    assert_eq!(src.is_up(&p), Ok(false));

    let bad = format!("{}{{\"port\": 1}}\n", text);
    let e = ReplaySource::from_jsonl(&bad).expect_err("bad line");
    assert_eq!(e.line, Some(4));
}
