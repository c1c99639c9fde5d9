//! PARALEON in netsim (issue 26): the ToRs' sketches read every interval, the controller's
//! settings dispatched to the running fabric, the FSD against the ground truth.

use hawkmesh_lab::paraleon::{run, Policy, TuneConfig};
use hawkmesh_lab::paraleon_eval::{scenario, Fabric, Workload};
use hawkmesh_netsim::Scenario;

fn fb_hadoop(ms: f64, seed: u64) -> hawkmesh_netsim::LoadedScenario {
    let text = scenario(Workload::FbHadoop, Fabric::Small, ms, seed);
    Scenario::parse(&text, "t.toml", ".".into()).expect("the eval's scenario loads")
}

/// FB_Hadoop on 32 hosts for 8 ms, λ_MI = 500 µs: the distribution's first change starts a
/// search whose settings reach the fabric every interval; PARALEON's FSD is closer to the
/// truth than naive Elastic Sketch's and sampled NetFlow's; the same seed gives the same run.
#[test]
fn paraleon_tunes_the_running_fabric_and_measures_the_fsd_best() {
    let loaded = fb_hadoop(8.0, 3);
    let config = TuneConfig::new(Policy::Paraleon, 500_000, 3);
    let a = run(&loaded, &config).expect("a run");
    assert_eq!(a.intervals.len(), 16);
    assert!(a.searches >= 1, "no search started");
    let dispatched = a.intervals.iter().filter(|i| i.dispatched).count();
    assert!(
        dispatched >= 8,
        "{dispatched} settings dispatched in 16 intervals"
    );
    assert!(a.intervals.iter().any(|i| i.utility.is_some()));
    assert!(a.best_setting.is_some());
    assert!(a.flows.1 > 1_000, "{:?} flows done", a.flows);
    let f = a.fsd;
    assert!(f.intervals >= 15);
    assert!(f.paraleon >= 0.95, "{f:?}");
    assert!(f.paraleon > f.naive && f.paraleon > f.netflow, "{f:?}");
    let b = run(&loaded, &config).expect("again");
    assert_eq!(
        serde_json::to_string(&a).expect("json"),
        serde_json::to_string(&b).expect("json")
    );
}

/// Static settings are set once and honoured: the expert setting (Table I) and the NVIDIA
/// defaults give different flow completion times, and nothing is dispatched after.
#[test]
fn static_settings_are_applied_once_and_change_the_outcome() {
    let loaded = fb_hadoop(4.0, 5);
    let default = run(
        &loaded,
        &TuneConfig::new(Policy::nvidia_default(), 500_000, 5),
    )
    .expect("defaults");
    let expert = run(&loaded, &TuneConfig::new(Policy::expert(), 500_000, 5)).expect("expert");
    for r in [&default, &expert] {
        assert!(r
            .intervals
            .iter()
            .all(|i| !i.dispatched && i.utility.is_none()));
        assert_eq!(r.searches, 0);
    }
    let kmax = |r: &hawkmesh_lab::paraleon::TuneRun| {
        r.final_setting
            .iter()
            .find(|(k, _)| k == "kmax_kb")
            .map(|(_, v)| *v)
    };
    assert_eq!(kmax(&expert), Some(6400.0));
    assert_ne!(kmax(&default), kmax(&expert));
    assert_ne!(default.mean_slowdown, expert.mean_slowdown);
}
