//! PARALEON's evaluation as a command (issue 26, `hawkmesh tune eval`): the paper's fabric
//! (§IV-A: a two-tier Clos of 8 ToRs and 4 leaves — netsim's leaf-spine, 16 hosts per ToR, 100
//! Gbit/s, 5 µs links, 4:1 oversubscribed, 12 MB buffers) under its workloads, each run with
//! every policy: the NVIDIA defaults, the expert setting (Table I), a setting pretrained
//! offline on the same workload (PARALEON's best from a run with another seed), naive SA
//! and PARALEON; the report compares FCT slowdowns, throughput and RTT over time, utility
//! per iteration and FSD accuracy.
//!
//! Beside the paper's workloads, any netsim scenario file (its own fabric and workloads) is
//! run the same way ([`EvalConfig::scenario_files`]): the policies, the pretrained setting
//! from the same scenario under another seed, and the FSD sweep.

use std::fmt::Write as _;
use std::path::PathBuf;

use hawkmesh_netsim::{LoadedScenario, Scenario};
use hawkmesh_tuner::sa::{Space, StepKind};
use serde::Serialize;

use crate::eval::svg::{bar_chart, figure, line_chart, Series};
use crate::paraleon::{run, FsdAccuracy, Policy, TuneConfig, TuneError, TuneRun};

/// The workloads of PARALEON §IV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// FB_Hadoop flow sizes, Poisson arrivals at 30 % load.
    FbHadoop,
    /// Training: ON/OFF all-to-all among 20 workers, 12 MB to each peer per round, 20 ms off.
    Alltoall,
    /// The all-to-all with a 30 ms FB_Hadoop burst into it.
    Influx,
}

impl Workload {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::FbHadoop => "fb-hadoop",
            Workload::Alltoall => "alltoall",
            Workload::Influx => "influx",
        }
    }

    /// Every workload.
    pub const ALL: [Workload; 3] = [Workload::FbHadoop, Workload::Alltoall, Workload::Influx];
}

/// The fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fabric {
    /// The paper's: 8 ToR × 4 spines, 128 hosts.
    Paper,
    /// A quarter of it for quick runs: 4 ToR × 2 spines, 32 hosts (still 4:1).
    Small,
}

/// Settings of the evaluation.
#[derive(Clone, Debug, Serialize)]
pub struct EvalConfig {
    /// The paper's workloads to run.
    pub workloads: Vec<Workload>,
    /// netsim scenario files to run as well, after the paper's workloads: each with its own
    /// fabric, workloads and duration (cut to [`EvalConfig::file_duration_ms`] when given),
    /// and its own seed unless [`EvalConfig::file_seeds`] are given.
    pub scenario_files: Vec<PathBuf>,
    /// Longest simulated time of a scenario file's runs, ms (None: the file's).
    pub file_duration_ms: Option<f64>,
    /// The seeds of the scenario files' runs, each file run at every one (empty: once, at
    /// the file's own).
    pub file_seeds: Vec<u64>,
    /// The fabric of the paper's workloads.
    pub fabric: Fabric,
    /// Simulated time per run of the paper's workloads, ms.
    pub duration_ms: f64,
    /// λ_MI, µs.
    pub interval_us: u64,
    /// Seeds of the paper's workloads: every workload is run, with every policy and its own
    /// pretraining, at each. A run's annealing and sampling take its workload's seed (the
    /// first one's for a scenario file run at its own); the FSD sweep runs at the first.
    /// One seed's tail is a handful of flows (p99.9 of the all-to-all's 3,420 is its 4
    /// slowest): with several, the report adds each policy's spread over them.
    pub seeds: Vec<u64>,
    /// Static settings compared beside the paper's policies (each a [`Policy::Static`]: its
    /// name and knob values over the NVIDIA defaults; knobs of the searched space only).
    pub settings: Vec<Policy>,
    /// Monitor intervals at which FSD accuracy is measured (µs; empty: none beyond the
    /// runs').
    pub fsd_intervals_us: Vec<u64>,
    /// Simulated time of each FSD-accuracy run, ms (no search to finish there).
    pub fsd_duration_ms: f64,
    /// FB_Hadoop loads the FSD accuracy is also measured at, at each of
    /// [`EvalConfig::fsd_intervals_us`], besides the workload's 30 % (PARALEON Fig. 10(a));
    /// only when FB_Hadoop is run.
    pub fsd_loads: Vec<f64>,
    /// Output directory.
    pub out: PathBuf,
    /// Simulations run at once (threads).
    pub jobs: usize,
}

/// FSD accuracy at one monitor interval.
#[derive(Clone, Debug, Serialize)]
pub struct FsdAtInterval {
    /// The workload (a paper workload's name, or the scenario file's).
    pub workload: String,
    /// λ_MI, µs.
    pub interval_us: u64,
    /// FB_Hadoop's load when it is not the workload's own ([`EvalConfig::fsd_loads`]).
    pub load: Option<f64>,
    /// The accuracies.
    pub accuracy: FsdAccuracy,
}

/// The evaluation's results.
#[derive(Clone, Debug, Serialize)]
pub struct EvalResults {
    /// Per workload, one run per policy.
    pub workloads: Vec<WorkloadResult>,
    /// FSD accuracy per workload and monitor interval.
    pub fsd: Vec<FsdAtInterval>,
}

/// One workload's runs at one seed.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadResult {
    /// The workload (a paper workload's name, or the scenario file's).
    pub workload: String,
    /// The scenario's seed.
    pub seed: u64,
    /// The stem of its figure's file (the workload's name at the first seed, then
    /// `<name>-seed<S>`).
    pub figure: String,
    /// One run per policy.
    pub runs: Vec<TuneRun>,
}

/// Why the evaluation stopped.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A run failed.
    #[error("{workload} / {policy}: {error}")]
    Run {
        /// The workload.
        workload: String,
        /// The policy.
        policy: String,
        /// Why.
        error: TuneError,
    },
    /// A scenario did not load (a file's error names the file and the place).
    #[error("{0}")]
    Scenario(String),
    /// Writing the report.
    #[error("{0}")]
    Io(String),
}

/// The scenario of `workload` on `fabric` for `duration_ms`.
pub fn scenario(workload: Workload, fabric: Fabric, duration_ms: f64, seed: u64) -> String {
    scenario_at_load(workload, fabric, duration_ms, seed, FB_HADOOP_LOAD)
}

/// FB_Hadoop's load in the paper's workloads (§IV-A: 30 %, of each host's link). On the
/// paper's 4:1 fabric the traffic leaving a ToR is 7/8 of it, 105 % of the uplinks: a
/// backlog of elephants builds up for as long as the arrivals last.
pub const FB_HADOOP_LOAD: f64 = 0.3;

/// [`scenario`] with FB_Hadoop's Poisson arrivals (FB_Hadoop's, or the influx's burst) at
/// `fb_load` of each host's link.
pub fn scenario_at_load(
    workload: Workload,
    fabric: Fabric,
    duration_ms: f64,
    seed: u64,
    fb_load: f64,
) -> String {
    let (leaves, spines) = match fabric {
        Fabric::Paper => (8, 4),
        Fabric::Small => (4, 2),
    };
    let hosts_per_leaf = 16;
    let hosts = leaves * hosts_per_leaf;
    let duration_us = duration_ms * 1_000.0;
    let mut s = format!(
        "version = 1\nname = \"paraleon-{name}\"\nseed = {seed}\nduration_us = {duration_us}\n\n\
         [topology]\nkind = \"leaf_spine\"\nleaves = {leaves}\nspines = {spines}\n\
         hosts_per_leaf = {hosts_per_leaf}\nhost_gbps = 100\nfabric_gbps = {fabric_gbps}\n\
         delay_ns = 5000\n\n[switch]\nbuffer_mb = 12\n\n[output]\n\
         fct_bins = [10000, 50000, 100000, 500000, 1000000, 5000000, 100000000000]\n",
        name = workload.name(),
        // 16 × 100 G down, spines × f up: 4:1 at either size.
        fabric_gbps = 16 * 100 / (4 * spines),
    );
    // 20 workers spread over the ToRs, as a training job's are.
    let workers: Vec<String> = (0..20)
        .map(|i| format!("\"h{}\"", i * hosts / 20))
        .collect();
    // Paper §IV-A: "during the ON period, the nodes send the same 12MB flow size to each
    // other by alltoall", then 20 ms OFF. 12 MB to each of 19 peers is 228 MB per worker,
    // ≥ 18.2 ms at 100 Gbit/s, so a round lasts at least ~38.3 ms.
    let round_ms = 19.0 * 12e6 * 8.0 / 100e9 * 1e3 + 20.0;
    let alltoall = |s: &mut String| {
        let rounds = ((duration_ms / round_ms).ceil() as u32).max(1);
        let _ = write!(
            s,
            "\n[[workload]]\nkind = \"alltoall\"\nhosts = [{}]\nsize_bytes = 12000000\n\
             rounds = {rounds}\nstart_us = 100\noff_us = 20000\n",
            workers.join(", "),
        );
    };
    match workload {
        Workload::FbHadoop => {
            let _ = write!(
                s,
                "\n[[workload]]\nkind = \"poisson\"\nload = {fb_load}\ncdf = \"fb_hadoop\"\n\
                 duration_us = {duration_us}\n"
            );
        }
        Workload::Alltoall => alltoall(&mut s),
        Workload::Influx => {
            alltoall(&mut s);
            // PARALEON §IV-B2: the training job runs (and is tuned for) first, then a
            // 30 ms FB_Hadoop burst arrives while it is ON. It starts at 60 % of the run
            // (30 ms cover any 20 ms OFF period, so it meets an ON period whatever the
            // rounds' pace), or as late as fits in a short run.
            let start = if duration_us * 0.4 >= 30_000.0 {
                duration_us * 0.6
            } else {
                (duration_us - 30_000.0).max(duration_us * 0.3).max(100.0)
            };
            let _ = write!(
                s,
                "\n[[workload]]\nkind = \"poisson\"\nload = {fb_load}\ncdf = \"fb_hadoop\"\n\
                 start_us = {start}\nduration_us = {}\n",
                30_000.0_f64.min(duration_us - start).max(1.0)
            );
        }
    }
    s
}

/// A scenario file's name in the report and its figure's file name: the file's stem, in
/// letters, digits, `-` and `_`, numbered when taken.
fn file_name(path: &std::path::Path, taken: &[String]) -> String {
    let stem: String = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let stem = if stem.is_empty() {
        "scenario".to_string()
    } else {
        stem
    };
    let mut name = stem.clone();
    let mut n = 2;
    while taken.contains(&name) || name == "fsd-accuracy" {
        name = format!("{stem}-{n}");
        n += 1;
    }
    name
}

fn load_scenario(text: &str) -> Result<LoadedScenario, EvalError> {
    Scenario::parse(text, "paraleon-eval.toml", ".".into())
        .map_err(|e| EvalError::Scenario(e.to_string()))
}

/// One simulation of the evaluation.
enum Job {
    /// Pretraining on `workload` (PARALEON on another seed), then the pretrained setting's
    /// run: one job, as the second needs the first's result.
    Pretrained(usize),
    /// A policy's run on workload `.0`; `.1` indexes [`policies`]' others.
    Policy(usize, usize),
    /// FSD accuracy at λ_MI = `.0` µs, at FB_Hadoop load `.1` (None: the workload's own).
    Fsd(u64, Option<f64>),
}

/// The policies besides the pretrained one, in the report's order around it (it comes
/// third): the static ones, the settings given, the searches.
fn policies(config: &EvalConfig) -> Vec<Policy> {
    let mut out = vec![Policy::nvidia_default(), Policy::expert()];
    out.extend(config.settings.iter().cloned());
    out.extend([Policy::NaiveSa, Policy::Paraleon]);
    out
}

/// A setting given to compare: a static one, a name of its own, knobs of the searched
/// space within their ranges — refused before any simulation runs.
fn check_setting(policy: &Policy) -> Result<(), EvalError> {
    let Policy::Static { name, values } = policy else {
        return Err(EvalError::Scenario(format!(
            "setting {}: only static settings can be given",
            policy.name()
        )));
    };
    let reserved = [
        "nvidia-default",
        "expert",
        "pretrained",
        "naive-sa",
        "paraleon",
    ];
    if name.is_empty() || reserved.contains(&name.as_str()) {
        return Err(EvalError::Scenario(format!(
            "setting `{name}`: a name of its own, not empty or one of {}",
            reserved.join(", ")
        )));
    }
    let space = Space::paraleon().map_err(|e| EvalError::Scenario(e.to_string()))?;
    for (knob, value) in values {
        let i = space.index(knob).ok_or_else(|| {
            EvalError::Scenario(format!(
                "setting `{name}`: {knob} is not a searched knob (one of {})",
                space
                    .specs
                    .iter()
                    .map(|s| s.knob.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        space.specs[i]
            .knob
            .validate(*value)
            .map_err(|e| EvalError::Scenario(format!("setting `{name}`: {e}")))?;
    }
    // RED needs Kmin ≤ Kmax (the defaults scale with the link: a lone bound is checked
    // when the fabric applies it).
    let given = |k: &str| values.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    if let (Some(lo), Some(hi)) = (given("kmin_kb"), given("kmax_kb")) {
        if lo > hi {
            return Err(EvalError::Scenario(format!(
                "setting `{name}`: kmin_kb {lo} above kmax_kb {hi}"
            )));
        }
    }
    Ok(())
}

/// A workload at one seed, as the evaluation runs it.
struct Entry {
    name: String,
    seed: u64,
    /// The annealing's and NetFlow's seed.
    tune_seed: u64,
    figure: String,
    online: LoadedScenario,
    offline: LoadedScenario,
    sweep: LoadedScenario,
}

/// The figure's file stem of a workload's `i`-th seed.
fn figure_stem(name: &str, i: usize, seed: u64) -> String {
    if i == 0 {
        name.to_string()
    } else {
        format!("{name}-seed{seed}")
    }
}

/// What a job produced.
enum Done {
    Pretrained(usize, TuneRun),
    Policy(usize, usize, TuneRun),
    Fsd(u64, Option<f64>, FsdAccuracy),
}

/// Runs the evaluation and writes `results.json`, `report.md` and one SVG figure per
/// workload (and the FSD accuracy's) into `config.out`. The runs are independent
/// simulations, spread over `config.jobs` threads; each is deterministic, so the report is
/// the same whatever the number of threads.
pub fn evaluate(
    config: &EvalConfig,
    progress: impl Fn(&str) + Sync,
) -> Result<EvalResults, EvalError> {
    let interval_ns = config.interval_us.max(1) * 1_000;
    let first_seed = *config.seeds.first().ok_or_else(|| {
        EvalError::Scenario("no seed: the paper's workloads need at least one".into())
    })?;
    for (i, policy) in config.settings.iter().enumerate() {
        check_setting(policy)?;
        if config.settings[..i]
            .iter()
            .any(|p| p.name() == policy.name())
        {
            return Err(EvalError::Scenario(format!(
                "setting `{}` is given twice",
                policy.name()
            )));
        }
    }
    // Per workload and seed (workload-major, so each workload's first seed comes first):
    // its name, seeds and figure, and its scenario for the policies' runs, for pretraining
    // (another seed, offline) and for the FSD sweep (shorter, the NVIDIA defaults).
    let mut entries: Vec<Entry> = Vec::new();
    for workload in &config.workloads {
        for (i, seed) in config.seeds.iter().enumerate() {
            let at = |ms, seed| load_scenario(&scenario(*workload, config.fabric, ms, seed));
            entries.push(Entry {
                name: workload.name().to_string(),
                seed: *seed,
                tune_seed: *seed,
                figure: figure_stem(workload.name(), i, *seed),
                online: at(config.duration_ms, *seed)?,
                offline: at(config.duration_ms, seed.wrapping_add(1_000))?,
                sweep: at(config.fsd_duration_ms, *seed)?,
            });
        }
    }
    let mut taken: Vec<String> = entries.iter().map(|e| e.figure.clone()).collect();
    for path in &config.scenario_files {
        let file = Scenario::load(path).map_err(|e| EvalError::Scenario(e.to_string()))?;
        let name = file_name(path, &taken);
        taken.push(name.clone());
        // Its own seed once, or each seed given; annealing and sampling take the seed the
        // file runs at when one is given, else the paper workloads' first.
        let seeds: Vec<(u64, u64)> = if config.file_seeds.is_empty() {
            vec![(file.scenario.seed, first_seed)]
        } else {
            config.file_seeds.iter().map(|s| (*s, *s)).collect()
        };
        for (i, (seed, tune_seed)) in seeds.into_iter().enumerate() {
            let mut online = file.clone();
            online.scenario.seed = seed;
            if let Some(ms) = config.file_duration_ms {
                online.scenario.duration_us = online.scenario.duration_us.min(ms * 1_000.0);
            }
            let mut offline = online.clone();
            offline.scenario.seed = seed.wrapping_add(1_000);
            let mut sweep = online.clone();
            sweep.scenario.duration_us = sweep
                .scenario
                .duration_us
                .min(config.fsd_duration_ms * 1_000.0);
            let figure = figure_stem(&name, i, seed);
            taken.push(figure.clone());
            entries.push(Entry {
                figure,
                name: name.clone(),
                seed,
                tune_seed,
                online,
                offline,
                sweep,
            });
        }
    }
    let names: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    // FSD accuracy at several monitor intervals on FB_Hadoop, as PARALEON's Fig. 11 (the
    // NVIDIA defaults' runs: the knobs change little of what the sketches see); on the first
    // workload when FB_Hadoop is not run.
    let swept = entries
        .iter()
        .position(|e| e.name == Workload::FbHadoop.name() && e.seed == first_seed)
        .filter(|_| config.workloads.contains(&Workload::FbHadoop))
        .or((!entries.is_empty()).then_some(0));
    // The longest jobs first (pretraining and its run are two simulations).
    let policies = policies(config);
    let mut jobs: Vec<Job> = (0..entries.len()).map(Job::Pretrained).collect();
    for w in 0..entries.len() {
        jobs.extend((0..policies.len()).map(|p| Job::Policy(w, p)));
    }
    // The load sweep: FB_Hadoop's scenario at each other load.
    let fb_swept = swept.is_some_and(|w| {
        w < config.workloads.len() * config.seeds.len()
            && entries[w].name == Workload::FbHadoop.name()
    });
    let mut sweep_loads: Vec<Option<f64>> = vec![None];
    if let Some(load) = config.fsd_loads.iter().find(|l| !(**l > 0.0 && **l <= 1.0)) {
        return Err(EvalError::Scenario(format!(
            "FSD sweep load {load}: must be within (0, 1] of each host's link"
        )));
    }
    if fb_swept {
        for load in &config.fsd_loads {
            if *load != FB_HADOOP_LOAD && !sweep_loads.contains(&Some(*load)) {
                sweep_loads.push(Some(*load));
            }
        }
    }
    let mut at_load = Vec::new();
    for load in sweep_loads.iter().flatten() {
        at_load.push((
            *load,
            load_scenario(&scenario_at_load(
                Workload::FbHadoop,
                config.fabric,
                config.fsd_duration_ms,
                first_seed,
                *load,
            ))?,
        ));
    }
    if swept.is_some() {
        for load in &sweep_loads {
            jobs.extend(
                config
                    .fsd_intervals_us
                    .iter()
                    .map(|us| Job::Fsd(*us, *load)),
            );
        }
    }
    let queue = std::sync::Mutex::new(jobs.into_iter());
    let next = || queue.lock().ok().and_then(|mut q| q.next());
    let fail = |w: usize, policy: String| {
        let workload = names[w].clone();
        move |error| EvalError::Run {
            workload,
            policy,
            error,
        }
    };
    let work = |job: Job| -> Result<Done, EvalError> {
        match job {
            Job::Pretrained(w) => {
                let name = &names[w];
                progress(&format!("{name}: pretraining"));
                let seed = entries[w].tune_seed.wrapping_add(1_000);
                let trained = run(
                    &entries[w].offline,
                    &TuneConfig::new(Policy::Paraleon, interval_ns, seed),
                )
                .map_err(fail(w, "pretraining".into()))?;
                let policy = Policy::Static {
                    name: "pretrained".into(),
                    values: trained
                        .best_setting
                        .clone()
                        .unwrap_or_else(|| trained.final_setting.clone()),
                };
                progress(&format!("{name}: pretrained"));
                let r = run(
                    &entries[w].online,
                    &TuneConfig::new(policy, interval_ns, entries[w].tune_seed),
                )
                .map_err(fail(w, "pretrained".into()))?;
                Ok(Done::Pretrained(w, r))
            }
            Job::Policy(w, p) => {
                let policy = policies[p].clone();
                let name = policy.name();
                progress(&format!("{}: {name}", names[w]));
                let r = run(
                    &entries[w].online,
                    &TuneConfig::new(policy, interval_ns, entries[w].tune_seed),
                )
                .map_err(fail(w, name))?;
                Ok(Done::Policy(w, p, r))
            }
            Job::Fsd(us, load) => {
                let w = swept.unwrap_or(0);
                let (at, sweep) = match load.and_then(|l| at_load.iter().find(|(a, _)| *a == l)) {
                    Some((l, sc)) => (format!(" at load {l}"), sc),
                    None => (String::new(), &entries[w].sweep),
                };
                progress(&format!("{}: FSD at λ_MI = {us} µs{at}", names[w]));
                let r = run(
                    sweep,
                    &TuneConfig::new(
                        Policy::nvidia_default(),
                        us.max(1) * 1_000,
                        entries[w].tune_seed,
                    ),
                )
                .map_err(fail(w, format!("fsd at {us} µs{at}")))?;
                Ok(Done::Fsd(us, load, r.fsd))
            }
        }
    };
    let threads = config.jobs.max(1);
    let done: Vec<Result<Done, EvalError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    while let Some(job) = next() {
                        let r = work(job);
                        let failed = r.is_err();
                        out.push(r);
                        if failed {
                            break;
                        }
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(v) => v,
                Err(_) => vec![Err(EvalError::Scenario(
                    "a simulation thread panicked".into(),
                ))],
            })
            .collect()
    });
    let mut pretrained: Vec<Option<TuneRun>> = vec![None; entries.len()];
    let mut others: Vec<Vec<Option<TuneRun>>> = vec![vec![None; policies.len()]; entries.len()];
    let mut fsd_at: Vec<(u64, Option<f64>, FsdAccuracy)> = Vec::new();
    for d in done {
        match d? {
            Done::Pretrained(w, r) => pretrained[w] = Some(r),
            Done::Policy(w, p, r) => others[w][p] = Some(r),
            Done::Fsd(us, load, a) => fsd_at.push((us, load, a)),
        }
    }
    let mut out = Vec::new();
    for (w, entry) in entries.iter().enumerate() {
        let mut runs: Vec<TuneRun> = std::mem::take(&mut others[w])
            .into_iter()
            .flatten()
            .collect();
        if let Some(p) = pretrained[w].take() {
            runs.insert(2.min(runs.len()), p);
        }
        out.push(WorkloadResult {
            workload: entry.name.clone(),
            seed: entry.seed,
            figure: entry.figure.clone(),
            runs,
        });
    }
    // In the order asked for.
    let fsd = sweep_loads
        .iter()
        .flat_map(|load| config.fsd_intervals_us.iter().map(move |us| (*us, *load)))
        .filter_map(|(us, load)| {
            let w = swept?;
            let (_, _, accuracy) = fsd_at.iter().find(|(u, l, _)| *u == us && *l == load)?;
            Some(FsdAtInterval {
                workload: names[w].clone(),
                interval_us: us,
                load,
                accuracy: *accuracy,
            })
        })
        .collect();
    let results = EvalResults {
        workloads: out,
        fsd,
    };
    std::fs::create_dir_all(&config.out)
        .map_err(|e| EvalError::Io(format!("{}: {e}", config.out.display())))?;
    let json = serde_json::to_string_pretty(&(config, &results))
        .map_err(|e| EvalError::Io(e.to_string()))?;
    let write = |name: &str, body: &str| {
        let path = config.out.join(name);
        std::fs::write(&path, body).map_err(|e| EvalError::Io(format!("{}: {e}", path.display())))
    };
    write("results.json", &json)?;
    write("report.md", &report(config, &results))?;
    for w in &results.workloads {
        write(&format!("{}.svg", w.figure), &workload_figure(w))?;
    }
    if !results.fsd.is_empty() {
        write("fsd-accuracy.svg", &fsd_figure(&results.fsd))?;
    }
    Ok(results)
}

/// Every `step`-th value of `values` (at most ~40 points on a chart).
fn thin<T: Copy>(values: &[T]) -> (usize, Vec<T>) {
    let step = values.len().div_ceil(40).max(1);
    (step, values.iter().step_by(step).copied().collect())
}

/// The figure of one workload: FCT slowdown per size bin (mean and 99.9th percentile),
/// goodput and RTT over time, utility per iteration (PARALEON Figs. 7–12).
fn workload_figure(w: &WorkloadResult) -> String {
    let bin_label = |b: u64| {
        if b >= 1_000_000_000 {
            "larger".to_string()
        } else if b >= 1_000_000 {
            format!("≤{}M", b / 1_000_000)
        } else {
            format!("≤{}K", b / 1_000)
        }
    };
    let bins: Vec<String> = w
        .runs
        .first()
        .map(|r| r.bins.iter().map(|b| bin_label(b.max_size)).collect())
        .unwrap_or_default();
    let per_bin = |f: fn(&crate::paraleon::SlowdownBin) -> f64| -> Vec<Series> {
        w.runs
            .iter()
            .map(|r| Series {
                name: r.policy.clone(),
                values: r.bins.iter().map(|b| (b.flows > 0).then(|| f(b))).collect(),
            })
            .collect()
    };
    let over_time =
        |f: fn(&crate::paraleon::IntervalRecord) -> Option<f64>| -> (Vec<String>, Vec<Series>) {
            let times: Vec<f64> = w
                .runs
                .first()
                .map(|r| r.intervals.iter().map(|i| i.t_us / 1_000.0).collect())
                .unwrap_or_default();
            let (_, ticks) = thin(&times);
            let labels = ticks.iter().map(|t| format!("{t:.0}")).collect();
            let series = w
                .runs
                .iter()
                .map(|r| {
                    let values: Vec<Option<f64>> = r.intervals.iter().map(f).collect();
                    Series {
                        name: r.policy.clone(),
                        values: thin(&values).1,
                    }
                })
                .collect();
            (labels, series)
        };
    let (t_labels, goodput) = over_time(|i| Some(i.goodput_gbps));
    let (_, rtt) = over_time(|i| i.mean_rtt_us);
    let utility: Vec<Series> = w
        .runs
        .iter()
        .filter(|r| r.searches > 0)
        .map(|r| Series {
            name: r.policy.clone(),
            values: thin(&r.intervals.iter().map(|i| i.utility).collect::<Vec<_>>()).1,
        })
        .collect();
    figure(
        &format!("PARALEON evaluation: {}", w.workload),
        &[
            bar_chart(
                "mean FCT slowdown",
                &bins,
                "slowdown",
                None,
                &per_bin(|b| b.mean),
            ),
            bar_chart(
                "99.9th-pct FCT slowdown",
                &bins,
                "slowdown",
                None,
                &per_bin(|b| b.p999),
            ),
            line_chart("goodput", "ms", &t_labels, "Gbit/s", None, &goodput),
            line_chart("mean RTT", "ms", &t_labels, "µs", None, &rtt),
            line_chart(
                "utility (tuning)",
                "ms",
                &t_labels,
                "U",
                Some(1.0),
                &utility,
            ),
        ],
    )
}

/// FSD accuracy of PARALEON, naive Elastic Sketch and NetFlow per monitor interval.
fn fsd_figure(fsd: &[FsdAtInterval]) -> String {
    let mut panels = Vec::new();
    let mut panels_of: Vec<(&str, Option<f64>)> =
        fsd.iter().map(|f| (f.workload.as_str(), f.load)).collect();
    panels_of.dedup();
    for (w, load) in panels_of {
        let rows: Vec<&FsdAtInterval> = fsd
            .iter()
            .filter(|f| f.workload == w && f.load == load)
            .collect();
        let w = match load {
            Some(l) => format!("{w} at load {:.0} %", l * 100.0),
            None => w.to_string(),
        };
        let groups: Vec<String> = rows
            .iter()
            .map(|r| format!("{} µs", r.interval_us))
            .collect();
        let series = [
            (
                "PARALEON",
                (|a: &FsdAccuracy| a.paraleon) as fn(&FsdAccuracy) -> f64,
            ),
            ("naive ES", |a: &FsdAccuracy| a.naive),
            ("NetFlow 1:100", |a: &FsdAccuracy| a.netflow),
        ]
        .iter()
        .map(|(name, f)| Series {
            name: name.to_string(),
            values: rows.iter().map(|r| Some(f(&r.accuracy))).collect(),
        })
        .collect::<Vec<_>>();
        panels.push(bar_chart(
            &format!("FSD accuracy: {w}"),
            &groups,
            "accuracy",
            Some(1.0),
            &series,
        ));
    }
    figure("FSD accuracy vs monitor interval", &panels)
}

/// "seed 1" or "seeds 1, 2, 3".
fn seeds_text(seeds: &[u64]) -> String {
    let list: Vec<String> = seeds.iter().map(u64::to_string).collect();
    match list.len() {
        1 => format!("seed {}", list[0]),
        _ => format!("seeds {}", list.join(", ")),
    }
}

/// Each workload run at several seeds: per policy, the mean over the seeds of its mean and
/// p99.9 slowdown with their range, PARALEON's against them (means over the seeds), and on
/// how many seeds PARALEON's was the lower.
fn across_seeds(s: &mut String, results: &[WorkloadResult]) {
    let mut names: Vec<&str> = results.iter().map(|w| w.workload.as_str()).collect();
    names.dedup();
    for name in names {
        let runs: Vec<&WorkloadResult> = results.iter().filter(|w| w.workload == name).collect();
        if runs.len() < 2 {
            continue;
        }
        let seeds: Vec<String> = runs.iter().map(|w| w.seed.to_string()).collect();
        let _ = writeln!(
            s,
            "## {name} across seeds {}\n\nMean over the seeds (lowest–highest).\n\n\
             | policy | mean slowdown | p99.9 slowdown | PARALEON's mean vs this policy's | \
             PARALEON's p99.9 vs this policy's | seeds where PARALEON's mean / p99.9 is \
             lower |\n|---|---|---|---|---|---|",
            seeds.join(", ")
        );
        let of = |policy: &str| -> Vec<&TuneRun> {
            runs.iter()
                .filter_map(|w| w.runs.iter().find(|r| r.policy == policy))
                .collect()
        };
        let ours = of("paraleon");
        let spread = |v: &[f64]| {
            let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (mean, lo, hi)
        };
        let policies: Vec<&str> = runs[0].runs.iter().map(|r| r.policy.as_str()).collect();
        for policy in policies {
            let theirs = of(policy);
            let means: Vec<f64> = theirs.iter().map(|r| r.mean_slowdown).collect();
            let tails: Vec<f64> = theirs.iter().map(|r| r.p999_slowdown).collect();
            let (m, m_lo, m_hi) = spread(&means);
            let (t, t_lo, t_hi) = spread(&tails);
            let (o, _, _) = spread(&ours.iter().map(|r| r.mean_slowdown).collect::<Vec<_>>());
            let (ot, _, _) = spread(&ours.iter().map(|r| r.p999_slowdown).collect::<Vec<_>>());
            let gain = |ours: f64, theirs: f64| {
                if theirs > 0.0 && ours > 0.0 {
                    format!("{:+.1} %", 100.0 * (ours - theirs) / theirs)
                } else {
                    "–".into()
                }
            };
            let lower = |f: fn(&TuneRun) -> f64| {
                ours.iter()
                    .zip(&theirs)
                    .filter(|(a, b)| f(a) < f(b))
                    .count()
            };
            let _ = writeln!(
                s,
                "| {policy} | {m:.3} ({m_lo:.3}–{m_hi:.3}) | {t:.1} ({t_lo:.1}–{t_hi:.1}) | \
                 {} | {} | {} / {} of {} |",
                gain(o, m),
                gain(ot, t),
                lower(|r| r.mean_slowdown),
                lower(|r| r.p999_slowdown),
                theirs.len().min(ours.len())
            );
        }
        let _ = writeln!(s);
        round_times_across_seeds(s, &runs);
    }
}

/// The all-to-all's mean round time per policy over the seeds: at each seed, the mean over
/// the rounds every policy finished at that seed ([`rounds_table`]'s), then over the seeds.
fn round_times_across_seeds(s: &mut String, runs: &[&WorkloadResult]) {
    if runs
        .iter()
        .all(|w| w.runs.iter().all(|r| r.rounds.started == 0))
    {
        return;
    }
    // Per seed: policy → its mean round time there.
    let per_seed: Vec<Vec<(&str, Option<f64>)>> = runs
        .iter()
        .map(|w| {
            let common = common_rounds(&w.runs);
            w.runs
                .iter()
                .map(|r| (r.policy.as_str(), r.rounds.mean_of_first(common)))
                .collect()
        })
        .collect();
    let _ = writeln!(
        s,
        "All-to-all round time across the seeds: at each seed the mean over the rounds every \
         policy finished there, then the mean over the seeds (lowest–highest).\n\n\
         | policy | mean round time, ms | PARALEON's vs this policy's | seeds where \
         PARALEON's is lower |\n|---|---|---|---|"
    );
    let of = |policy: &str| -> Vec<Option<f64>> {
        per_seed
            .iter()
            .map(|seed| {
                seed.iter()
                    .find(|(p, _)| *p == policy)
                    .and_then(|(_, m)| *m)
            })
            .collect()
    };
    let ours = of("paraleon");
    for (policy, _) in &per_seed[0] {
        let theirs = of(policy);
        // Seeds where both have a figure.
        let pairs: Vec<(f64, f64)> = ours
            .iter()
            .zip(&theirs)
            .filter_map(|(o, t)| Some(((*o)?, (*t)?)))
            .collect();
        let values: Vec<f64> = theirs.iter().flatten().copied().collect();
        if values.is_empty() || pairs.is_empty() {
            let _ = writeln!(s, "| {policy} | – | – | – |");
            continue;
        }
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let o = pairs.iter().map(|p| p.0).sum::<f64>() / pairs.len() as f64;
        let t = pairs.iter().map(|p| p.1).sum::<f64>() / pairs.len() as f64;
        let lower = pairs.iter().filter(|(o, t)| o < t).count();
        let _ = writeln!(
            s,
            "| {policy} | {mean:.2} ({lo:.2}–{hi:.2}) | {:+.1} % | {lower} of {} |",
            100.0 * (o - t) / t,
            pairs.len()
        );
    }
    let _ = writeln!(s);
}

/// Rounds every one of `runs` finished (the ones their round times are compared over).
fn common_rounds(runs: &[TuneRun]) -> usize {
    runs.iter()
        .map(|r| r.rounds.done_ms.len())
        .min()
        .unwrap_or(0)
}

/// The all-to-all's rounds under each policy: a training step lasts until its round's
/// last flow is done. Mean completion time over the rounds every policy finished, so that
/// a policy is not credited for a round it left unfinished.
fn rounds_table(s: &mut String, runs: &[TuneRun]) {
    if runs.iter().all(|r| r.rounds.started == 0) {
        return;
    }
    let common = common_rounds(runs);
    let _ = writeln!(
        s,
        "\nAll-to-all rounds (the collective: a round lasts until its last flow is done), \
         mean completion time over the first {common} rounds, which every policy finished.\n\n\
         | policy | rounds finished / started | mean round time, ms | slowest of them, ms | \
         PARALEON's mean round time vs this policy's |\n|---|---|---|---|---|"
    );
    let ours = runs
        .iter()
        .find(|r| r.policy == "paraleon")
        .and_then(|r| r.rounds.mean_of_first(common));
    for r in runs {
        let mean = r.rounds.mean_of_first(common);
        let slowest = r.rounds.done_ms[..common.min(r.rounds.done_ms.len())]
            .iter()
            .copied()
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        let fmt = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.2}"));
        let gain = match (ours, mean) {
            (Some(o), Some(t)) if t > 0.0 => format!("{:+.1} %", 100.0 * (o - t) / t),
            _ => "–".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} / {} | {} | {} | {gain} |",
            r.policy,
            r.rounds.done_ms.len(),
            r.rounds.started,
            fmt(mean),
            fmt(slowest),
        );
    }
}

/// The markdown report.
pub fn report(config: &EvalConfig, all: &EvalResults) -> String {
    let results = &all.workloads;
    let mut s = String::new();
    let _ = writeln!(s, "# PARALEON evaluation (netsim)\n");
    if !config.workloads.is_empty() {
        let _ = writeln!(
            s,
            "The paper's workloads: fabric {:?}, {} ms per run, {}.",
            config.fabric,
            config.duration_ms,
            seeds_text(&config.seeds)
        );
    }
    for path in &config.scenario_files {
        let _ = writeln!(
            s,
            "Scenario file `{}`: its fabric and workloads, {}, {}.",
            path.display(),
            config
                .file_duration_ms
                .map_or("its duration".to_string(), |ms| format!("at most {ms} ms")),
            if config.file_seeds.is_empty() {
                "its seed".to_string()
            } else {
                seeds_text(&config.file_seeds)
            },
        );
    }
    let _ = writeln!(
        s,
        "λ_MI = {} µs; the annealing and NetFlow's sampling seeded with the run's seed (a \
         scenario file at its own: {}).\n",
        config.interval_us,
        config.seeds.first().copied().unwrap_or_default()
    );
    for policy in &config.settings {
        if let Policy::Static { name, values } = policy {
            let knobs: Vec<String> = values.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            let _ = writeln!(
                s,
                "Setting `{name}`: the NVIDIA defaults with {}.\n",
                if knobs.is_empty() {
                    "nothing changed".to_string()
                } else {
                    knobs.join(", ")
                }
            );
        }
    }
    let several = |name: &str| results.iter().filter(|w| w.workload == name).count() > 1;
    for w in results {
        if several(&w.workload) {
            let _ = writeln!(s, "## {}, seed {}\n", w.workload, w.seed);
        } else {
            let _ = writeln!(s, "## {}\n", w.workload);
        }
        let _ = writeln!(
            s,
            "| policy | flows done | mean slowdown | p99.9 slowdown | PARALEON's mean vs this policy's | searches started / run to the end | FSD acc. PARALEON / naive ES / NetFlow |\n|---|---|---|---|---|---|---|"
        );
        let ours = w
            .runs
            .iter()
            .find(|r| r.policy == "paraleon")
            .map_or(0.0, |r| r.mean_slowdown);
        for r in &w.runs {
            let gain = if r.mean_slowdown > 0.0 {
                format!(
                    "{:+.1} %",
                    100.0 * (ours - r.mean_slowdown) / r.mean_slowdown
                )
            } else {
                "–".into()
            };
            let ended = r
                .intervals
                .iter()
                .filter(|i| i.dispatched == Some(StepKind::Final))
                .count();
            let _ = writeln!(
                s,
                "| {} | {}/{} | {:.3} | {:.3} | {} | {} / {ended} | {:.4} / {:.4} / {:.4} |",
                r.policy,
                r.flows.1,
                r.flows.0,
                r.mean_slowdown,
                r.p999_slowdown,
                gain,
                r.searches,
                r.fsd.paraleon,
                r.fsd.naive,
                r.fsd.netflow
            );
        }
        rounds_table(&mut s, &w.runs);
        let _ = writeln!(s, "\n![{}]({}.svg)\n", w.workload, w.figure);
    }
    across_seeds(&mut s, results);
    if !all.fsd.is_empty() {
        let _ = writeln!(
            s,
            "## FSD accuracy vs λ_MI\n\n1 − |elephant share − true share| per interval, averaged (NetFlow: per export window); runs of {} ms (a scenario file's: at most) under the NVIDIA defaults.{}\n\n| workload | load | λ_MI | PARALEON | naive ES | NetFlow 1:100 |\n|---|---|---|---|---|---|",
            config.fsd_duration_ms,
            if all.fsd.iter().any(|f| f.workload == Workload::FbHadoop.name()) {
                " Load: FB_Hadoop's, of each host's link (at 30 % the traffic leaving a ToR of the paper's fabric is 105 % of its uplinks, and a backlog of elephants grows for the whole run)."
            } else {
                ""
            }
        );
        for f in &all.fsd {
            let load = match (f.load, f.workload.as_str()) {
                (Some(l), _) => format!("{:.0} %", l * 100.0),
                (None, w) if w == Workload::FbHadoop.name() => {
                    format!("{:.0} %", FB_HADOOP_LOAD * 100.0)
                }
                (None, _) => "its own".to_string(),
            };
            let _ = writeln!(
                s,
                "| {} | {load} | {} µs | {:.4} | {:.4} | {:.4} |",
                f.workload,
                f.interval_us,
                f.accuracy.paraleon,
                f.accuracy.naive,
                f.accuracy.netflow
            );
        }
        let _ = writeln!(s, "\n![FSD accuracy](fsd-accuracy.svg)");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paraleon::{scored_slowdown, Rounds};
    use hawkmesh_netsim::scenario::WorkloadSpec;
    use hawkmesh_netsim::FlowRecord;
    use hawkmesh_wire::telemetry::FiveTuple;

    /// FB_Hadoop's arrivals (and the influx's burst) run at the load asked for; 30 % when
    /// none is.
    #[test]
    fn fb_hadoop_runs_at_the_load_asked_for() {
        let poisson_load = |text: String, i: usize| {
            let loaded = load_scenario(&text).expect("the scenario loads");
            match &loaded.scenario.workload[i] {
                WorkloadSpec::Poisson { load, .. } => *load,
                other => panic!("not FB_Hadoop's arrivals: {other:?}"),
            }
        };
        let at = |w, load| scenario_at_load(w, Fabric::Small, 10.0, 1, load);
        assert_eq!(poisson_load(at(Workload::FbHadoop, 0.1), 0), 0.1);
        assert_eq!(poisson_load(at(Workload::Influx, 0.2), 1), 0.2);
        let paper = scenario(Workload::FbHadoop, Fabric::Small, 10.0, 1);
        assert_eq!(poisson_load(paper, 0), FB_HADOOP_LOAD);
    }

    #[test]
    fn the_all_to_all_sends_12_mb_to_each_peer_and_the_influx_comes_in_late() {
        let text = scenario(Workload::Influx, Fabric::Paper, 100.0, 1);
        let loaded = load_scenario(&text).expect("the scenario loads");
        let w = &loaded.scenario.workload;
        let WorkloadSpec::Alltoall {
            hosts,
            size_bytes,
            rounds,
            off_us,
            ..
        } = &w[0]
        else {
            panic!("the all-to-all first: {text}");
        };
        // PARALEON §IV-A: 20 workers, the same 12 MB to each other, 20 ms off.
        assert_eq!(
            (hosts.len(), *size_bytes, *off_us),
            (20, 12_000_000, 20_000.0)
        );
        assert_eq!(*rounds, 3, "100 ms of ≥ 38.2 ms rounds");
        let WorkloadSpec::Poisson {
            start_us,
            duration_us,
            ..
        } = &w[1]
        else {
            panic!("the burst second: {text}");
        };
        // At 60 % of the run, for 30 ms (longer than any 20 ms OFF period).
        assert!((*start_us - 60_000.0).abs() < 1.0, "{start_us}");
        assert_eq!(*duration_us, 30_000.0);
        // A short run: as late as fits.
        let short = load_scenario(&scenario(Workload::Influx, Fabric::Small, 50.0, 1)).unwrap();
        let WorkloadSpec::Poisson { start_us, .. } = &short.scenario.workload[1] else {
            panic!("the burst second");
        };
        assert!((*start_us - 20_000.0).abs() < 1.0, "{start_us}");
    }

    fn flow(start_ns: Option<u64>, slowdown: Option<f64>) -> FlowRecord {
        FlowRecord {
            id: 0,
            src: "h0".into(),
            dst: "h1".into(),
            tuple: String::new(),
            five_tuple: FiveTuple::rocev2([10, 0, 0, 1], 49152, [10, 0, 0, 2]),
            priority: 3,
            size: 1_000_000,
            start_ns,
            finish_ns: None,
            fct_ns: None,
            ideal_fct_ns: 100_000,
            slowdown,
            base_rtt_ns: 10_000,
            retransmitted_bytes: 0,
            timeouts: 0,
            cnps: 0,
            ce_marked: 0,
            workload: 0,
        }
    }

    #[test]
    fn an_unfinished_flow_scores_the_slowdown_it_reached_and_an_unstarted_one_none() {
        let end = 10_000_000;
        assert_eq!(scored_slowdown(&flow(Some(0), Some(3.5)), end), Some(3.5));
        // Stuck since 2 ms: 8 ms against an ideal 100 µs.
        assert_eq!(
            scored_slowdown(&flow(Some(2_000_000), None), end),
            Some(80.0)
        );
        // Started just before the end: at least 1.
        assert_eq!(scored_slowdown(&flow(Some(end - 10), None), end), Some(1.0));
        assert_eq!(scored_slowdown(&flow(None, None), end), None);
    }

    #[test]
    fn a_round_lasts_until_its_last_flow_and_an_unfinished_one_is_not_timed() {
        let done = |workload, start, finish: Option<u64>| FlowRecord {
            workload,
            finish_ns: finish,
            ..flow(Some(start), None)
        };
        let flows = vec![
            // Workload 0, round at 1 ms: its last flow done at 9 ms.
            done(0, 1_000_000, Some(4_000_000)),
            done(0, 1_000_000, Some(9_000_000)),
            // Round at 12 ms: 6 ms.
            done(0, 12_000_000, Some(18_000_000)),
            done(0, 12_000_000, Some(17_000_000)),
            // Round at 30 ms: one flow still going.
            done(0, 30_000_000, Some(31_000_000)),
            done(0, 30_000_000, None),
            // A round that never started.
            FlowRecord {
                workload: 0,
                ..flow(None, None)
            },
            // Workload 1 (Poisson, not asked for): two flows starting together.
            done(1, 2_000_000, Some(3_000_000)),
            done(1, 2_000_000, Some(50_000_000)),
        ];
        let rounds = Rounds::of(&flows, &[0]);
        assert_eq!(rounds.started, 3);
        assert_eq!(rounds.done_ms, vec![8.0, 6.0]);
        assert_eq!(rounds.mean_of_first(2), Some(7.0));
        assert_eq!(rounds.mean_of_first(1), Some(8.0));
        assert_eq!(rounds.mean_of_first(3), None, "the third is unfinished");
        assert_eq!(rounds.mean_of_first(0), None);
        assert_eq!(Rounds::of(&flows, &[]), Rounds::default());
    }
}
