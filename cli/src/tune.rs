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
    /// Simulated time per run, ms.
    #[arg(long, default_value_t = 100.0)]
    duration_ms: f64,
    /// Monitor interval λ_MI, µs (PARALEON Table III: 1 ms).
    #[arg(long, default_value_t = 1000)]
    interval_us: u64,
    /// Monitor intervals at which FSD accuracy is also measured on FB_Hadoop, µs
    /// (comma-separated; PARALEON Fig. 11).
    #[arg(long, value_delimiter = ',', default_values_t = [500, 1000, 2000, 5000])]
    fsd_intervals_us: Vec<u64>,
    /// Seed (the same seed gives the same report).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output directory (results.json, report.md).
    #[arg(long, default_value = "out/tune-eval")]
    out: PathBuf,
}

/// Runs it.
pub fn eval(args: &TuneEvalArgs) -> anyhow::Result<()> {
    if !(args.duration_ms > 0.0 && args.duration_ms.is_finite()) {
        anyhow::bail!("--duration-ms must be a positive number of milliseconds");
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
        out: args.out.clone(),
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
