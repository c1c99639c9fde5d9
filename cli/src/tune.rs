//! `hawkmesh tune eval`: PARALEON's evaluation in netsim.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, ValueEnum};
use hawkmesh_lab::paraleon_eval::{evaluate, EvalConfig, Fabric, Workload};

/// A workload to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WorkloadArg {
    /// FB_Hadoop at 30 % load.
    FbHadoop,
    /// ON/OFF all-to-all training (20 workers, 12 MB to each peer, 20 ms off).
    Alltoall,
    /// The all-to-all with a 30 ms FB_Hadoop burst.
    Influx,
    /// All three.
    All,
}

/// The fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FabricArg {
    /// 8 ToR × 4 spines, 128 hosts (the paper's).
    Paper,
    /// 4 ToR × 2 spines, 32 hosts.
    Small,
}

/// Arguments of `hawkmesh tune eval`.
#[derive(Args, Debug)]
pub struct TuneEvalArgs {
    /// Workload.
    #[arg(long, value_enum, default_value_t = WorkloadArg::All)]
    workload: WorkloadArg,
    /// Fabric.
    #[arg(long, value_enum, default_value_t = FabricArg::Paper)]
    fabric: FabricArg,
    /// Simulated time per run, ms (a search of Table III's schedule takes 280 intervals:
    /// at λ_MI = 1 ms, 400 ms see one run to its end and its setting in force).
    #[arg(long, default_value_t = 400.0)]
    duration_ms: f64,
    /// Monitor interval λ_MI, µs (PARALEON Table III: 1 ms).
    #[arg(long, default_value_t = 1000)]
    interval_us: u64,
    /// Monitor intervals at which FSD accuracy is also measured on FB_Hadoop, µs
    /// (comma-separated; PARALEON Fig. 11).
    #[arg(long, value_delimiter = ',', default_values_t = [500, 1000, 2000, 5000])]
    fsd_intervals_us: Vec<u64>,
    /// Simulated time of each FSD-accuracy run, ms.
    #[arg(long, default_value_t = 100.0)]
    fsd_duration_ms: f64,
    /// Seed (the same seed gives the same report).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulations run at once (default: one per core). The report does not depend on it.
    #[arg(long)]
    jobs: Option<usize>,
    /// Output directory (results.json, report.md).
    #[arg(long, default_value = "out/tune-eval")]
    out: PathBuf,
}

/// Runs it.
pub fn eval(args: &TuneEvalArgs) -> anyhow::Result<()> {
    for (flag, ms) in [
        ("--duration-ms", args.duration_ms),
        ("--fsd-duration-ms", args.fsd_duration_ms),
    ] {
        if !(ms > 0.0 && ms.is_finite()) {
            anyhow::bail!("{flag} must be a positive number of milliseconds, not {ms}");
        }
    }
    let workloads = match args.workload {
        WorkloadArg::FbHadoop => vec![Workload::FbHadoop],
        WorkloadArg::Alltoall => vec![Workload::Alltoall],
        WorkloadArg::Influx => vec![Workload::Influx],
        WorkloadArg::All => Workload::ALL.to_vec(),
    };
    let config = EvalConfig {
        workloads,
        fabric: match args.fabric {
            FabricArg::Paper => Fabric::Paper,
            FabricArg::Small => Fabric::Small,
        },
        duration_ms: args.duration_ms,
        interval_us: args.interval_us,
        seed: args.seed,
        fsd_intervals_us: args.fsd_intervals_us.clone(),
        fsd_duration_ms: args.fsd_duration_ms,
        out: args.out.clone(),
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    let started = Instant::now();
    evaluate(&config, |what| {
        eprintln!("[{:>6.1} s] {what}", started.elapsed().as_secs_f64());
    })?;
    print!(
        "{}",
        std::fs::read_to_string(args.out.join("report.md")).unwrap_or_default()
    );
    println!(
        "wrote {}/{{results.json, report.md, <workload>.svg, fsd-accuracy.svg}}",
        args.out.display()
    );
    Ok(())
}
