//! Yellowstone Eq. 3 on synthetic rounds with known waits, the study's FITF > 1 example,
//! saturation and resets, the PFC analogue, and the per-tier/direction classification.

use hawkmesh_congestion::fitf::{self, PauseSide, ABOVE_ONE_EXPLANATION};
use hawkmesh_congestion::{
    classify, fitf_round, pause_round, Direction, FitfConfig, IntervalStatus, PortId, Sample, Tier,
    Width,
};
use hawkmesh_wire::rng::SplitMix64;

fn port(tier: Tier, dir: Direction) -> PortId {
    PortId::new("sw1", 5, tier, dir)
}

/// Eq. 3 written out.
fn eq3(tau: f64, w0: u64, w1: u64, tq0: u64, tp0: u64, tq1: u64, tp1: u64) -> f64 {
    tau * (w1 - w0) as f64 / ((tq1 as f64 + tp1 as f64 / 2.0) - (tq0 as f64 + tp0 as f64 / 2.0))
}

#[test]
fn synthetic_round_matches_eq3() {
    let cfg = FitfConfig::default();
    let mut rng = SplitMix64::new(3);
    let mut samples = Vec::new();
    let (mut tq, mut w) = (1_000_000_000u64, 1_234u64);
    for _ in 0..100 {
        let tp = 2_000_000 + rng.below(20_000_000);
        samples.push(
            Sample::new(port(Tier::Tor, Direction::Down), tq, tp).with_wait(w, Width::Bits32),
        );
        tq += tp + 100_000_000;
        w += rng.below(1_000_000);
    }
    let r = fitf_round(&samples, &cfg).expect("round");
    assert_eq!(r.intervals.len(), 99);
    for (i, iv) in r.intervals.iter().enumerate() {
        let (a, b) = (&samples[i], &samples[i + 1]);
        let want = eq3(
            22.0,
            a.xmit_wait.unwrap_or(0),
            b.xmit_wait.unwrap_or(0),
            a.t_query_ns,
            a.turnaround_ns,
            b.t_query_ns,
            b.turnaround_ns,
        );
        let got = iv.value.expect("a value");
        assert!(
            (got - want).abs() < 1e-9,
            "interval {}: {got} vs {want}",
            iv.index
        );
        assert_eq!(iv.index, i + 1);
        assert_eq!(iv.status, IntervalStatus::Ok);
    }
    let values: Vec<f64> = r.intervals.iter().filter_map(|i| i.value).collect();
    let max = values.iter().copied().fold(0.0, f64::max);
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    assert!((r.stats.max - max).abs() < 1e-12);
    assert!((r.stats.mean - mean).abs() < 1e-12);
    assert_eq!(r.stats.valid, 99);
    assert_eq!(r.stats.nonzero, values.iter().filter(|&&v| v > 0.0).count());
}

#[test]
fn known_waits_give_known_fractions() {
    // 10 % of each 100 ms interval waiting, 22 ns ticks, no turnaround.
    let ticks_per_interval = 10_000_000 / 22; // whole ticks in 10 ms
    let samples: Vec<Sample> = (0..5u64)
        .map(|i| {
            Sample::new(port(Tier::Leaf, Direction::Up), i * 100_000_000, 0)
                .with_wait(i * ticks_per_interval, Width::Bits64)
        })
        .collect();
    let r = fitf_round(&samples, &FitfConfig::default()).expect("round");
    let want = (ticks_per_interval * 22) as f64 / 1e8;
    for iv in &r.intervals {
        assert!((iv.value.unwrap_or(f64::NAN) - want).abs() < 1e-9);
    }
    assert!((r.stats.share_nonzero - 1.0).abs() < 1e-12);
    assert_eq!(r.stats.mean_nonzero, Some(r.stats.mean));
}

/// Yellowstone Table III: Leaf down, W rose 6656811 ticks, estimated interval 124199424 ns,
/// FITF 1.179 — flagged with the study's explanation.
#[test]
fn table_iii_example_is_above_one_and_flagged() {
    let tq1 = 1_456_409_893_470_000_000u64;
    let (tp1, tp2) = (18_350_267u64, 24_841_529u64);
    // (tq2 + tp2/2) - (tq1 + tp1/2) = 124199424
    let tq2 = tq1 + 124_199_424 - (tp2 - tp1) / 2;
    let p = port(Tier::Leaf, Direction::Down);
    let a = Sample::new(p.clone(), tq1, tp1).with_wait(2_426_695_474, Width::Bits32);
    let b = Sample::new(p, tq2, tp2).with_wait(2_433_352_285, Width::Bits32);
    let r = fitf_round(&[a, b], &FitfConfig::default()).expect("round");
    let iv = &r.intervals[0];
    assert_eq!(iv.delta, Some(6_656_811));
    assert!((iv.t_end_ns - iv.t_start_ns - 124_199_424.0).abs() < 1.0);
    let v = iv.value.expect("value kept");
    assert!((v - 1.179).abs() < 5e-4, "{v}");
    assert_eq!(iv.status, IntervalStatus::AboveOne);
    assert_eq!(iv.note.as_deref(), Some(ABOVE_ONE_EXPLANATION));
    assert!(ABOVE_ONE_EXPLANATION.contains("whole interval"));
    assert_eq!(r.stats.above_one, 1);
}

/// A port stalled for the whole true interval, the first query reaching the switch early in
/// its turnaround and the second late: the halves misplace the read times and FITF > 1.
#[test]
fn misplaced_turnaround_reproduces_above_one() {
    let tau = 22.0;
    let p = port(Tier::Tor, Direction::Up);
    let tp = 20_000_000u64;
    let (tq0, tq1) = (0u64, 100_000_000u64);
    let (true0, true1) = (tq0 + 1_000_000, tq1 + 19_000_000); // actual read instants
    let ticks = ((true1 - true0) as f64 / tau).floor() as u64; // stalled throughout
    let a = Sample::new(p.clone(), tq0, tp).with_wait(500, Width::Bits32);
    let b = Sample::new(p, tq1, tp).with_wait(500 + ticks, Width::Bits32);
    let r = fitf_round(&[a, b], &FitfConfig::default()).expect("round");
    let v = r.intervals[0].value.expect("value");
    assert!((v - tau * ticks as f64 / 100_000_000.0).abs() < 1e-9);
    assert!(v > 1.17, "{v}");
    assert_eq!(r.intervals[0].status, IntervalStatus::AboveOne);
    // With the true read instants the same wait is at most the whole interval.
    assert!(tau * ticks as f64 / (true1 - true0) as f64 <= 1.0);
}

#[test]
fn saturation_and_reset_are_reported_not_computed() {
    let p = port(Tier::Spine, Direction::Down);
    let s = |i: u64, w: u64| Sample::new(p.clone(), i * 100_000_000, 0).with_wait(w, Width::Bits32);
    let samples = [
        s(0, 4_294_000_000),
        s(1, 0xFFFF_FFFF),
        s(2, 0xFFFF_FFFF),
        s(3, 10),
        s(4, 20),
    ];
    let r = fitf_round(&samples, &FitfConfig::default()).expect("round");
    match r.intervals[0].status {
        IntervalStatus::Saturated {
            lower_bound: Some(lb),
        } => {
            assert!((lb - 22.0 * 967_295.0 / 1e8).abs() < 1e-9)
        }
        other => panic!("first interval: {other:?}"),
    }
    assert_eq!(
        r.intervals[1].status,
        IntervalStatus::Saturated { lower_bound: None }
    );
    assert_eq!(r.intervals[2].status, IntervalStatus::Reset);
    assert_eq!(r.intervals[3].status, IntervalStatus::Ok);
    assert!(r.intervals[..3].iter().all(|i| i.value.is_none()));
    assert_eq!(
        (r.stats.saturated, r.stats.resets, r.stats.valid),
        (2, 1, 1)
    );

    // The same values in 64-bit extended counters are ordinary.
    let wide: Vec<Sample> = samples[..3]
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s.wait_width = Width::Bits64;
            s
        })
        .collect();
    let r = fitf_round(&wide, &FitfConfig::default()).expect("round");
    assert_eq!(r.intervals[0].status, IntervalStatus::Ok);
    assert_eq!(r.intervals[1].value, Some(0.0));
}

#[test]
fn no_time_and_missing_counters() {
    let p = port(Tier::Host, Direction::Up);
    let a = Sample::new(p.clone(), 100, 0).with_wait(1, Width::Bits64);
    let b = Sample::new(p.clone(), 100, 0).with_wait(2, Width::Bits64);
    let c = Sample::new(p, 200, 0);
    let r = fitf_round(&[a, b, c], &FitfConfig::default()).expect("round");
    assert_eq!(r.intervals[0].status, IntervalStatus::NoTime);
    assert_eq!(r.intervals[1].status, IntervalStatus::Missing);
    assert_eq!(r.stats.valid, 0);
}

#[test]
fn pfc_pause_duration_gives_paused_fraction() {
    let p = port(Tier::Host, Direction::Up);
    let samples: Vec<Sample> = (0..4u64)
        .map(|i| {
            let mut s = Sample::new(p.clone(), i * 100_000_000, 0);
            s.pfc[3].rx_pause_duration_us = Some(i * 25_000);
            s.pfc[3].tx_pause_duration_us = Some(7);
            s
        })
        .collect();
    let cfg = FitfConfig::default();
    let r = pause_round(&samples, 3, PauseSide::Rx, &cfg).expect("round");
    assert_eq!(r.intervals.len(), 3);
    for iv in &r.intervals {
        assert!((iv.value.unwrap_or(f64::NAN) - 0.25).abs() < 1e-12);
    }
    let tx = pause_round(&samples, 3, PauseSide::Tx, &cfg).expect("round");
    assert!(!tx.stats.is_nonzero());
    let none = pause_round(&samples, 4, PauseSide::Rx, &cfg).expect("round");
    assert!(none
        .intervals
        .iter()
        .all(|i| i.status == IntervalStatus::Missing));
    assert!(pause_round(&samples, 8, PauseSide::Rx, &cfg).is_err());
}

#[test]
fn classification_by_tier_and_direction() {
    let cfg = FitfConfig::default();
    let round = |tier: Tier, dir: Direction, waits: &[u64]| {
        let samples: Vec<Sample> = waits
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                Sample::new(port(tier.clone(), dir), i as u64 * 100_000_000, 0)
                    .with_wait(w, Width::Bits32)
            })
            .collect();
        fitf_round(&samples, &cfg).expect("round")
    };
    let rounds = vec![
        round(Tier::Tor, Direction::Down, &[0, 0, 454_545, 454_545]), // one 10 % interval
        round(Tier::Tor, Direction::Down, &[0, 0, 0, 0]),
        round(
            Tier::Tor,
            Direction::Up,
            &[0, 909_090, 909_090 + 454_545, 909_090 + 454_545],
        ),
        round(Tier::Spine, Direction::Down, &[5, 5]),
    ];
    let groups = classify(&rounds);
    assert_eq!(groups.len(), 3);
    let tor_down = groups
        .iter()
        .find(|g| g.tier == Tier::Tor && g.dir == Direction::Down)
        .expect("ToR down");
    assert_eq!((tor_down.rounds, tor_down.nonzero_rounds), (2, 1));
    assert_eq!(
        (
            tor_down.intervals,
            tor_down.nonzero_intervals,
            tor_down.zero_intervals
        ),
        (6, 1, 5)
    );
    assert_eq!(tor_down.max_per_nonzero_round.len(), 1);
    assert!((tor_down.max_per_nonzero_round[0] - 0.09999990).abs() < 1e-6);
    let tor_up = groups
        .iter()
        .find(|g| g.dir == Direction::Up)
        .expect("ToR up");
    assert!((tor_up.share_nonzero() - 2.0 / 3.0).abs() < 1e-12);
    assert!((tor_up.mean_per_nonzero_round[0] - 0.15).abs() < 1e-6);
    assert_eq!(
        groups
            .iter()
            .find(|g| g.tier == Tier::Spine)
            .map(|g| g.nonzero_rounds),
        Some(0)
    );
    let split = fitf::split_rounds(&[]);
    assert!(split.is_empty());
}
