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
    let dispatched = a
        .intervals
        .iter()
        .filter(|i| i.dispatched.is_some())
        .count();
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
            .all(|i| i.dispatched.is_none() && i.utility.is_none()));
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

/// The evaluation command's pipeline on a small run: every policy of the paper's comparison
/// (with the pretrained setting from another seed's run), the FSD sweep, and the report,
/// results and figures written; the same report whatever the number of threads.
#[test]
fn the_evaluation_writes_every_policy_the_fsd_sweep_and_its_figures() {
    use hawkmesh_lab::paraleon_eval::{evaluate, EvalConfig};
    let out = std::env::temp_dir().join(format!("hawkmesh-tune-eval-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let config = EvalConfig {
        workloads: vec![Workload::Alltoall],
        scenario_files: Vec::new(),
        file_duration_ms: None,
        file_seeds: Vec::new(),
        fabric: Fabric::Small,
        duration_ms: 3.0,
        interval_us: 500,
        seeds: vec![2],
        settings: Vec::new(),
        fsd_intervals_us: vec![500, 1000],
        fsd_duration_ms: 2.0,
        fsd_loads: vec![0.1],
        out: out.clone(),
        jobs: 2,
    };
    let steps = std::sync::Mutex::new(Vec::new());
    let results =
        evaluate(&config, |s| steps.lock().unwrap().push(s.to_string())).expect("the evaluation");
    let steps = steps.into_inner().unwrap();
    let policies: Vec<&str> = results.workloads[0]
        .runs
        .iter()
        .map(|r| r.policy.as_str())
        .collect();
    assert_eq!(
        policies,
        [
            "nvidia-default",
            "expert",
            "pretrained",
            "naive-sa",
            "paraleon"
        ]
    );
    assert!(steps.iter().any(|s| s.contains("pretraining")));
    assert_eq!(results.fsd.len(), 2);
    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    for p in &policies {
        assert!(
            report.contains(&format!("| {p} |")),
            "{p} missing from the report"
        );
    }
    for file in ["alltoall.svg", "fsd-accuracy.svg"] {
        let svg = std::fs::read_to_string(out.join(file)).expect(file);
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{file}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).expect("json"))
            .expect("valid JSON");
    assert!(json.is_array());
    // A load outside (0, 1] is refused even when FB_Hadoop, the one it applies to, is not run.
    let bad = evaluate(
        &EvalConfig {
            fsd_loads: vec![0.0],
            ..config.clone()
        },
        |_| {},
    )
    .expect_err("a zero load");
    assert!(bad.to_string().contains("load 0"), "{bad}");
    let one = out.join("one-thread");
    evaluate(
        &EvalConfig {
            out: one.clone(),
            jobs: 1,
            ..config
        },
        |_| {},
    )
    .expect("the evaluation on one thread");
    for file in ["report.md", "alltoall.svg", "fsd-accuracy.svg"] {
        assert_eq!(
            std::fs::read_to_string(out.join(file)).unwrap(),
            std::fs::read_to_string(one.join(file)).unwrap(),
            "{file}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// The FSD sweep at other FB_Hadoop loads (PARALEON Fig. 10(a)): one row per load and
/// λ_MI after the workload's own 30 %, each load once, in the report with its load; a load
/// outside (0, 1] is an error that names it.
#[test]
fn the_fsd_sweep_runs_fb_hadoop_at_each_load_asked_for() {
    use hawkmesh_lab::paraleon_eval::{evaluate, EvalConfig};
    let out = std::env::temp_dir().join(format!("hawkmesh-tune-loads-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let config = EvalConfig {
        workloads: vec![Workload::FbHadoop],
        scenario_files: Vec::new(),
        file_duration_ms: None,
        file_seeds: Vec::new(),
        fabric: Fabric::Small,
        duration_ms: 1.0,
        interval_us: 500,
        seeds: vec![3],
        settings: Vec::new(),
        fsd_intervals_us: vec![500, 1000],
        fsd_duration_ms: 2.0,
        fsd_loads: vec![0.1, 0.3, 0.1],
        out: out.clone(),
        jobs: 2,
    };
    let steps = std::sync::Mutex::new(Vec::new());
    let results =
        evaluate(&config, |s| steps.lock().unwrap().push(s.to_string())).expect("the evaluation");
    let rows: Vec<(u64, Option<f64>)> = results
        .fsd
        .iter()
        .map(|f| (f.interval_us, f.load))
        .collect();
    assert_eq!(
        rows,
        [
            (500, None),
            (1000, None),
            (500, Some(0.1)),
            (1000, Some(0.1))
        ]
    );
    for f in &results.fsd {
        assert!(f.accuracy.intervals > 0, "{f:?}: no interval measured");
    }
    let steps = steps.into_inner().unwrap();
    assert!(
        steps
            .iter()
            .any(|s| s.contains("FSD at λ_MI = 1000 µs at load 0.1")),
        "{steps:?}"
    );
    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(report.contains("| fb-hadoop | 30 % | 500 µs |"), "{report}");
    assert!(
        report.contains("| fb-hadoop | 10 % | 1000 µs |"),
        "{report}"
    );
    let bad = evaluate(
        &EvalConfig {
            fsd_loads: vec![1.5],
            ..config
        },
        |_| {},
    )
    .expect_err("a load above the link rate");
    assert!(bad.to_string().contains("1.5"), "{bad}");
    let _ = std::fs::remove_dir_all(&out);
}

/// A workload nobody built in: a netsim scenario file runs through the same evaluation —
/// every policy, pretraining on the same file under another seed, the FSD sweep, its figure
/// under the file's name — cut to the duration asked for; a file that does not load is an
/// error naming the file and the place.
#[test]
fn a_scenario_file_is_evaluated_like_the_papers_workloads() {
    use hawkmesh_lab::paraleon_eval::{evaluate, EvalConfig, EvalError};
    let dir = std::env::temp_dir().join(format!("hawkmesh-tune-file-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // 32 hosts under FB_Hadoop for 6 ms, of which the evaluation runs 2.
    let file = dir.join("my job.toml");
    std::fs::write(&file, scenario(Workload::FbHadoop, Fabric::Small, 6.0, 4)).unwrap();
    let config = EvalConfig {
        workloads: Vec::new(),
        scenario_files: vec![file.clone()],
        file_duration_ms: Some(2.0),
        file_seeds: Vec::new(),
        fabric: Fabric::Paper,
        duration_ms: 400.0,
        interval_us: 500,
        seeds: vec![2],
        settings: Vec::new(),
        fsd_intervals_us: vec![1000],
        fsd_duration_ms: 1.0,
        fsd_loads: vec![0.1],
        out: dir.join("out"),
        jobs: 2,
    };
    let results = evaluate(&config, |_| {}).expect("the evaluation of the file");
    assert_eq!(results.workloads.len(), 1);
    let w = &results.workloads[0];
    assert_eq!(w.workload, "my_job");
    assert_eq!(w.runs.len(), 5, "every policy and the pretrained setting");
    for r in &w.runs {
        assert_eq!(r.intervals.len(), 4, "{}: 2 ms at 500 µs", r.policy);
        assert!(r.flows.0 > 0, "{}: the file's traffic ran", r.policy);
    }
    assert_eq!(results.fsd.len(), 1);
    assert_eq!(results.fsd[0].workload, "my_job");
    assert!(results.fsd[0].accuracy.intervals == 1, "1 ms at 1 ms");
    let report = std::fs::read_to_string(dir.join("out/report.md")).unwrap();
    assert!(report.contains("## my_job") && report.contains("my job.toml"));
    assert!(dir.join("out/my_job.svg").exists());

    let broken = dir.join("broken.toml");
    std::fs::write(&broken, "version = 1\nduration_us = \"long\"\n").unwrap();
    let e = evaluate(
        &EvalConfig {
            scenario_files: vec![broken],
            out: dir.join("out2"),
            ..config
        },
        |_| {},
    )
    .expect_err("a broken file");
    let EvalError::Scenario(text) = &e else {
        panic!("{e}");
    };
    assert!(text.contains("broken.toml"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same evaluation at several seeds, with a setting of one's own beside the paper's
/// policies: one section per seed, figures apart, the spread over the seeds per policy
/// (means of the seeds' figures), the FSD sweep once; a setting with a knob the search does
/// not have is refused before any simulation runs.
#[test]
fn the_evaluation_runs_at_several_seeds_with_a_setting_of_ones_own() {
    use hawkmesh_lab::paraleon::Policy;
    use hawkmesh_lab::paraleon_eval::{evaluate, EvalConfig};
    let out = std::env::temp_dir().join(format!("hawkmesh-tune-seeds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let fast = Policy::Static {
        name: "fast".into(),
        values: vec![
            ("rpg_ai_rate".into(), 50.0),
            ("rpg_time_reset".into(), 50.0),
        ],
    };
    let config = EvalConfig {
        workloads: vec![Workload::Alltoall],
        scenario_files: Vec::new(),
        file_duration_ms: None,
        file_seeds: Vec::new(),
        fabric: Fabric::Small,
        duration_ms: 3.0,
        interval_us: 500,
        seeds: vec![2, 5],
        settings: vec![fast],
        fsd_intervals_us: vec![1000],
        fsd_duration_ms: 2.0,
        fsd_loads: Vec::new(),
        out: out.clone(),
        jobs: 2,
    };
    let results = evaluate(&config, |_| {}).expect("the evaluation");
    let seeds: Vec<u64> = results.workloads.iter().map(|w| w.seed).collect();
    assert_eq!(seeds, [2, 5]);
    for w in &results.workloads {
        let policies: Vec<&str> = w.runs.iter().map(|r| r.policy.as_str()).collect();
        assert_eq!(
            policies,
            [
                "nvidia-default",
                "expert",
                "pretrained",
                "fast",
                "naive-sa",
                "paraleon"
            ]
        );
    }
    assert_eq!(results.fsd.len(), 1, "the sweep at the first seed only");
    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    for part in [
        "## alltoall, seed 2",
        "## alltoall, seed 5",
        "## alltoall across seeds 2, 5",
        "Setting `fast`: the NVIDIA defaults with rpg_ai_rate = 50, rpg_time_reset = 50.",
        "seeds 2, 5",
    ] {
        assert!(report.contains(part), "{part}: {report}");
    }
    // The spread row: the mean of the two seeds' figures, then the lower and the higher.
    let fast: Vec<&hawkmesh_lab::paraleon::TuneRun> = results
        .workloads
        .iter()
        .map(|w| w.runs.iter().find(|r| r.policy == "fast").unwrap())
        .collect();
    let (a, b) = (fast[0].mean_slowdown, fast[1].mean_slowdown);
    let row = format!(
        "| fast | {:.3} ({:.3}–{:.3}) |",
        (a + b) / 2.0,
        a.min(b),
        a.max(b)
    );
    assert!(report.contains(&row), "{row}: {report}");
    // PARALEON's row against itself: no change, and never lower than itself.
    assert!(
        report.contains("| +0.0 % | +0.0 % | 0 / 0 of 2 |"),
        "{report}"
    );
    // The collective's rounds: 3 ms is within the first round (12 MB to each peer), which
    // every policy started and none finished; no time is made up for it.
    for w in &results.workloads {
        for r in &w.runs {
            assert_eq!(
                (r.rounds.started, r.rounds.done_ms.len()),
                (1, 0),
                "{}",
                r.policy
            );
        }
    }
    for part in [
        "mean completion time over the first 0 rounds",
        "| fast | 0 / 1 | – | – | – |",
        "All-to-all round time across the seeds",
        "| fast | – | – | – |",
    ] {
        assert!(report.contains(part), "{part}: {report}");
    }
    for file in ["alltoall.svg", "alltoall-seed5.svg"] {
        assert!(out.join(file).exists(), "{file}");
    }
    let steps = std::sync::Mutex::new(0);
    let mine = |values: &[(&str, f64)]| Policy::Static {
        name: "mine".into(),
        values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
    };
    for (settings, says) in [
        (vec![mine(&[("rpg_speed", 1.0)])], "rpg_speed"),
        (vec![mine(&[("pmax", 2.0)])], "pmax"),
        (
            vec![mine(&[("kmin_kb", 900.0), ("kmax_kb", 100.0)])],
            "kmin_kb 900 above kmax_kb 100",
        ),
        (vec![mine(&[]), mine(&[])], "`mine` is given twice"),
        (vec![Policy::expert()], "a name of its own"),
    ] {
        let bad = evaluate(
            &EvalConfig {
                settings,
                out: out.join("bad"),
                ..config.clone()
            },
            |_| *steps.lock().unwrap() += 1,
        )
        .expect_err(says);
        assert!(bad.to_string().contains(says), "{says}: {bad}");
    }
    assert_eq!(*steps.lock().unwrap(), 0, "refused before any run");
    let _ = std::fs::remove_dir_all(&out);
}
