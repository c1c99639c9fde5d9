//! FITF (Yellowstone Eq. 3) measured on netsim's counters, sampled while the simulation runs,
//! against the simulation's exact waiting time (issue 27's proof).

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use hawkmesh_congestion::{fitf_round, CounterSource, FitfConfig, Sampler, SamplingPlan, Tier};
use hawkmesh_lab::counters::{NetsimClock, NetsimCounters};
use hawkmesh_netsim::{Scenario, Simulation};

fn incast() -> Rc<RefCell<Simulation>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/k4-incast.toml");
    let loaded = Scenario::load(&path).expect("the shipped incast scenario loads");
    Rc::new(RefCell::new(Simulation::new(&loaded).expect("it builds")))
}

/// Every port read every 50 µs through the incast (queries of 1–5 µs, read at a random
/// instant inside them): the FITF over the window matches the simulation's own waiting time
/// within 1 % of the window on every port, and the ports that waited are the ToR's and the
/// uplinks PFC spread to, not the hosts' idle ones.
#[test]
fn fitf_from_sampled_counters_matches_the_exact_waiting_time() {
    let sim = incast();
    let mut source = NetsimCounters::new(sim.clone(), 22.0, (1_000, 5_000), 11);
    let mut clock = NetsimClock(sim.clone());
    let ports = source.ports();
    assert!(ports.len() > 60, "{} ports", ports.len());
    let mut sampler = Sampler::new(SamplingPlan {
        spacing_ns: 50_000,
        ..SamplingPlan::default()
    });
    let sweeps = 60; // 3 ms
    let samples = sampler
        .continuous(&mut source, &mut clock, &ports, sweeps)
        .expect("netsim's ports are readable");
    let cfg = FitfConfig::default();
    let mut waited = 0;
    let mut switch_ports_waiting = 0;
    for port in &ports {
        let own: Vec<_> = samples
            .iter()
            .filter(|s| s.port == *port)
            .cloned()
            .collect();
        assert_eq!(own.len(), sweeps);
        let round = fitf_round(&own, &cfg).expect("a round of 60 reads");
        // FITF over the window: Σ τ·ΔW over Σ Δt (Eq. 3 summed over the round).
        let (first, last) = (&own[0], &own[own.len() - 1]);
        let window = last.read_time_ns() - first.read_time_ns();
        let ticks = last.xmit_wait.unwrap_or(0) - first.xmit_wait.unwrap_or(0);
        let fitf = cfg.tau_ns * ticks as f64 / window;
        let per_interval: f64 = round
            .intervals
            .iter()
            .filter_map(|i| i.value.map(|v| v * (i.t_end_ns - i.t_start_ns)))
            .sum::<f64>()
            / window;
        assert!(
            (per_interval - fitf).abs() < 1e-9,
            "{port}: {per_interval} vs {fitf}"
        );
        // Ground truth between the first and the last read, from the counters' baseline.
        let truth_first = first.xmit_wait.unwrap_or(0) as f64 * cfg.tau_ns;
        let truth_last = source.truth_wait_ns(port).expect("the port") as f64;
        let truth = (truth_last - truth_first) / window;
        assert!(
            (fitf - truth).abs() < 0.01,
            "{port}: FITF {fitf:.4} vs exact {truth:.4}"
        );
        if truth > 0.0 {
            waited += 1;
            if port.tier != Tier::Host {
                switch_ports_waiting += 1;
            }
        }
    }
    assert!(
        switch_ports_waiting >= 2,
        "the incast paused no switch port ({waited} waited)"
    );
}

/// The study's plan on netsim: rounds on random up ports, each reset first; the same seed
/// gives the same rounds and values.
#[test]
fn the_sampling_plan_on_netsim_is_deterministic() {
    let run = |seed: u64| {
        let sim = incast();
        let mut source = NetsimCounters::new(sim.clone(), 22.0, (1_000, 5_000), 3);
        let mut clock = NetsimClock(sim);
        let mut sampler = Sampler::new(SamplingPlan {
            seed,
            reads_per_round: 10,
            spacing_ns: 20_000,
            ..SamplingPlan::default()
        });
        let rounds = sampler
            .run(&mut source, &mut clock, 5)
            .expect("five rounds");
        rounds
            .iter()
            .map(|r| {
                let f = fitf_round(&r.samples, &FitfConfig::default()).expect("a round");
                (r.port.to_string(), format!("{:.6}", f.stats.max))
            })
            .collect::<Vec<_>>()
    };
    let a = run(1);
    assert_eq!(a.len(), 5);
    assert_eq!(a, run(1));
    assert_ne!(
        a.iter().map(|p| &p.0).collect::<Vec<_>>(),
        run(2).iter().map(|p| &p.0).collect::<Vec<_>>()
    );
}
