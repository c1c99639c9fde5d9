//! PARALEON's evaluation as a command (issue 26, `hawkmesh tune eval`): the paper's fabric
//! (§IV-A: two-tier Clos, 8 ToR × 4 leaf... here leaf-spine 8 × 4, 16 hosts per ToR, 100
//! Gbit/s, 5 µs links, 4:1 oversubscribed, 12 MB buffers) under its workloads, each run with
//! every policy: the NVIDIA defaults, the expert setting (Table I), a setting pretrained
//! offline on the same workload (PARALEON's best from a run with another seed), naive SA
//! and PARALEON; the report compares FCT slowdowns, throughput and RTT over time, utility
//! per iteration and FSD accuracy.

use std::fmt::Write as _;
use std::path::PathBuf;

use hawkmesh_netsim::{LoadedScenario, Scenario};
use serde::Serialize;

use crate::paraleon::{run, Policy, TuneConfig, TuneError, TuneRun};

/// The workloads of PARALEON §IV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// FB_Hadoop flow sizes, Poisson arrivals at 30 % load.
    FbHadoop,
    /// Training: ON/OFF all-to-all among 20 workers, 12 MB per worker per round, 20 ms off.
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
    /// Workloads to run.
    pub workloads: Vec<Workload>,
    /// The fabric.
    pub fabric: Fabric,
    /// Simulated time per run, ms.
    pub duration_ms: f64,
    /// λ_MI, µs.
    pub interval_us: u64,
    /// Seed.
    pub seed: u64,
    /// Output directory.
    pub out: PathBuf,
}

/// One workload's runs.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadResult {
    /// The workload.
    pub workload: Workload,
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
        workload: &'static str,
        /// The policy.
        policy: String,
        /// Why.
        error: TuneError,
    },
    /// The scenario text did not load (a bug here).
    #[error("{0}")]
    Scenario(String),
    /// Writing the report.
    #[error("{0}")]
    Io(String),
}

/// The scenario of `workload` on `fabric` for `duration_ms`.
pub fn scenario(workload: Workload, fabric: Fabric, duration_ms: f64, seed: u64) -> String {
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
    let alltoall = |s: &mut String| {
        // 12 MB per worker per round, split over its 19 peers; 20 ms off.
        let rounds = ((duration_ms / 21.0).ceil() as u32).max(1);
        let _ = write!(
            s,
            "\n[[workload]]\nkind = \"alltoall\"\nhosts = [{}]\nsize_bytes = {}\nrounds = {rounds}\n\
             start_us = 100\noff_us = 20000\n",
            workers.join(", "),
            12_000_000 / 19
        );
    };
    match workload {
        Workload::FbHadoop => {
            let _ = write!(
                s,
                "\n[[workload]]\nkind = \"poisson\"\nload = 0.3\ncdf = \"fb_hadoop\"\n\
                 duration_us = {duration_us}\n"
            );
        }
        Workload::Alltoall => alltoall(&mut s),
        Workload::Influx => {
            alltoall(&mut s);
            let start = (duration_us * 0.3).max(100.0);
            let _ = write!(
                s,
                "\n[[workload]]\nkind = \"poisson\"\nload = 0.3\ncdf = \"fb_hadoop\"\n\
                 start_us = {start}\nduration_us = {}\n",
                30_000.0_f64.min(duration_us - start).max(1.0)
            );
        }
    }
    s
}

fn load(text: &str) -> Result<LoadedScenario, EvalError> {
    Scenario::parse(text, "paraleon-eval.toml", ".".into())
        .map_err(|e| EvalError::Scenario(e.to_string()))
}

/// Runs the evaluation and writes `results.json` and `report.md` into `config.out`.
pub fn evaluate(
    config: &EvalConfig,
    mut progress: impl FnMut(&str),
) -> Result<Vec<WorkloadResult>, EvalError> {
    let interval_ns = config.interval_us.max(1) * 1_000;
    let mut out = Vec::new();
    for workload in &config.workloads {
        let loaded = load(&scenario(
            *workload,
            config.fabric,
            config.duration_ms,
            config.seed,
        ))?;
        let fail = |policy: String| {
            move |error| EvalError::Run {
                workload: workload.name(),
                policy,
                error,
            }
        };
        // Pretrained: PARALEON's best on the same workload, another seed (offline).
        let offline = load(&scenario(
            *workload,
            config.fabric,
            config.duration_ms,
            config.seed.wrapping_add(1_000),
        ))?;
        progress(&format!("{}: pretraining", workload.name()));
        let trained = run(
            &offline,
            &TuneConfig::new(
                Policy::Paraleon,
                interval_ns,
                config.seed.wrapping_add(1_000),
            ),
        )
        .map_err(fail("pretraining".into()))?;
        let policies = vec![
            Policy::nvidia_default(),
            Policy::expert(),
            Policy::Static {
                name: "pretrained".into(),
                values: trained
                    .best_setting
                    .clone()
                    .unwrap_or_else(|| trained.final_setting.clone()),
            },
            Policy::NaiveSa,
            Policy::Paraleon,
        ];
        let mut runs = Vec::new();
        for policy in policies {
            progress(&format!("{}: {}", workload.name(), policy.name()));
            let name = policy.name();
            runs.push(
                run(&loaded, &TuneConfig::new(policy, interval_ns, config.seed))
                    .map_err(fail(name))?,
            );
        }
        out.push(WorkloadResult {
            workload: *workload,
            runs,
        });
    }
    std::fs::create_dir_all(&config.out)
        .map_err(|e| EvalError::Io(format!("{}: {e}", config.out.display())))?;
    let json =
        serde_json::to_string_pretty(&(config, &out)).map_err(|e| EvalError::Io(e.to_string()))?;
    let write = |name: &str, body: &str| {
        let path = config.out.join(name);
        std::fs::write(&path, body).map_err(|e| EvalError::Io(format!("{}: {e}", path.display())))
    };
    write("results.json", &json)?;
    write("report.md", &report(config, &out))?;
    Ok(out)
}

/// The markdown report.
pub fn report(config: &EvalConfig, results: &[WorkloadResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# PARALEON evaluation (netsim)\n\nFabric {:?}, {} ms per run, λ_MI = {} µs, seed {}.\n",
        config.fabric, config.duration_ms, config.interval_us, config.seed
    );
    for w in results {
        let _ = writeln!(s, "## {}\n", w.workload.name());
        let _ = writeln!(
            s,
            "| policy | flows done | mean slowdown | p99.9 slowdown | vs PARALEON (mean) | searches | FSD acc. PARALEON / naive ES / NetFlow |\n|---|---|---|---|---|---|---|"
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
            let _ = writeln!(
                s,
                "| {} | {}/{} | {:.3} | {:.3} | {} | {} | {:.4} / {:.4} / {:.4} |",
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
        let _ = writeln!(s);
    }
    s
}
