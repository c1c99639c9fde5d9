//! PARALEON's costs (issue: a tuning iteration's controller work for 128 ToRs well under
//! 1 ms; a ToR's sketch readout and state update per interval well under λ_MI):
//!
//! ```sh
//! cargo bench -p hawkmesh-tuner --bench controller
//! ```
//!
//! - controller: sum 128 ToRs' distributions, the KL divergence, the utility of 1,024
//!   uplinks / 4,096 RNIC pairs / 160 devices, one annealing step over the 17 knobs;
//! - ToR: one interval's update of a monitor holding 4,096 flows (a heavy part's worth:
//!   Elastic Sketch's top-k), a quarter of them new each interval.

use std::hint::black_box;
use std::time::Instant;

use hawkmesh_tuner::fsd::{Fsd, MonitorConfig, TorMonitor};
use hawkmesh_tuner::sa::defaults;
use hawkmesh_tuner::{Controller, ControllerConfig, IntervalMetrics, Space};
use hawkmesh_wire::rng::SplitMix64;

fn main() {
    let mut rng = SplitMix64::new(1);
    // 128 ToRs' monitors after a few intervals of mixed traffic.
    let mut monitors: Vec<TorMonitor> = (0..128)
        .map(|_| TorMonitor::new(MonitorConfig::default()))
        .collect();
    let mut locals: Vec<Fsd> = Vec::new();
    for round in 0..4u64 {
        locals = monitors
            .iter_mut()
            .enumerate()
            .map(|(t, m)| {
                let flows: Vec<(u64, u64)> = (0..256u64)
                    .map(|f| ((t as u64) << 32 | f, 1_000 + rng.below(400_000) + round))
                    .collect();
                m.update(flows)
            })
            .collect();
    }
    let metrics = IntervalMetrics {
        uplink_utilisation: (0..1_024).map(|_| rng.unit()).collect(),
        normalised_rtt: (0..4_096).map(|_| rng.unit()).collect(),
        pause_fraction: (0..160).map(|_| rng.unit() * 0.1).collect(),
    };
    let space = Space::paraleon().expect("the search table");
    let start = defaults(&space, 100.0, &[]).expect("defaults");
    let mut controller =
        Controller::new(ControllerConfig::default(), space, start, 1).expect("a controller");
    // Trigger a search first, so every measured interval takes an annealing step.
    let mut shifted = Fsd::sum(&locals);
    shifted.bins[15] += 1_000.0;
    let start_search = |controller: &mut Controller| {
        // A change must hold `hold` intervals before a search starts.
        for _ in 0..ControllerConfig::default().hold {
            controller
                .interval(&shifted, &metrics)
                .expect("an interval");
        }
        assert!(controller.tuning(), "the shifted traffic starts a search");
    };
    start_search(&mut controller);
    let rounds = 10_000;
    let started = Instant::now();
    for _ in 0..rounds {
        let network = Fsd::sum(black_box(&locals));
        let outcome = controller
            .interval(&network, black_box(&metrics))
            .expect("an interval");
        black_box(outcome);
        if !controller.tuning() {
            start_search(&mut controller);
        }
    }
    let per = started.elapsed().as_secs_f64() / rounds as f64;
    println!(
        "controller, 128 ToRs: FSD sum + KL + utility + annealing step: {:.1} µs per interval",
        per * 1e6
    );

    // One ToR: 4,096 flows remembered, a quarter new each interval.
    let mut monitor = TorMonitor::new(MonitorConfig::default());
    let mut next = 0u64;
    let mut readout: Vec<(u64, u64)> = Vec::with_capacity(4_096);
    let rounds = 2_000;
    let mut total = 0.0;
    for round in 0..rounds + 10 {
        readout.clear();
        for i in 0..4_096u64 {
            let id = if i % 4 == 0 {
                next += 1;
                1 << 40 | next
            } else {
                i
            };
            readout.push((id, 1_000 + rng.below(200_000)));
        }
        let t = Instant::now();
        black_box(monitor.update(readout.iter().copied()));
        if round >= 10 {
            total += t.elapsed().as_secs_f64();
        }
    }
    println!(
        "ToR monitor, 4,096 flows per readout ({} remembered): {:.1} µs per interval",
        monitor.flows(),
        total / rounds as f64 * 1e6
    );
}
