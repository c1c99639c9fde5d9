//! `hawkmesh tune eval`: PARALEON's evaluation in netsim.

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, ValueEnum};
use hawkmesh_knobs::apply::parse_assignments;
use hawkmesh_lab::paraleon::Policy;
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
    /// The paper's workloads (comma-separated; default: all three, unless --scenario is
    /// given).
    #[arg(long = "workload", value_enum, value_delimiter = ',')]
    workloads: Vec<WorkloadArg>,
    /// A netsim scenario file (docs/scenario.md) to evaluate as well: its own fabric,
    /// workloads, duration and seed, every policy run on it, pretrained on it under another
    /// seed, its FSD measured at each --fsd-intervals-us when FB_Hadoop is not run. Repeat
    /// for several. With --scenario, the paper's workloads run only when --workload names them.
    #[arg(long = "scenario", value_name = "FILE")]
    scenarios: Vec<PathBuf>,
    /// Fabric of the paper's workloads.
    #[arg(long, value_enum, default_value_t = FabricArg::Paper)]
    fabric: FabricArg,
    /// Simulated time per run, ms (a search of Table III's schedule takes 280 intervals:
    /// at λ_MI = 1 ms, 400 ms see one run to its end and its setting in force). Default
    /// 400 for the paper's workloads; a scenario file runs for its own duration, cut to this
    /// when given.
    #[arg(long)]
    duration_ms: Option<f64>,
    /// Monitor interval λ_MI, µs (PARALEON Table III: 1 ms).
    #[arg(long, default_value_t = 1000)]
    interval_us: u64,
    /// Monitor intervals at which FSD accuracy is also measured on FB_Hadoop, µs
    /// (comma-separated; PARALEON Fig. 11; the flag alone: none).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_values_t = [500, 1000, 2000, 5000])]
    fsd_intervals_us: Vec<u64>,
    /// Simulated time of each FSD-accuracy run, ms.
    #[arg(long, default_value_t = 100.0)]
    fsd_duration_ms: f64,
    /// FB_Hadoop loads (of each host's link) the FSD accuracy is also measured at, at each
    /// --fsd-intervals-us, besides the workload's 0.3 (PARALEON Fig. 10(a); comma-separated;
    /// the flag alone: none).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_values_t = [0.1, 0.2])]
    fsd_loads: Vec<f64>,
    /// Seeds (comma-separated; the same seeds give the same report): every workload runs
    /// with every policy at each, and the report adds each policy's spread over them.
    /// Default 1; a scenario file runs at its own seed unless this is given.
    #[arg(long = "seed", value_delimiter = ',')]
    seeds: Vec<u64>,
    /// A static setting to compare beside the paper's policies, as
    /// NAME:knob=value,knob=value (the NVIDIA defaults elsewhere; knobs of the searched
    /// space, e.g. rpg_ai_rate, kmin_kb). Repeat for several.
    #[arg(long = "setting", value_name = "NAME:KNOB=VALUE,...")]
    settings: Vec<String>,
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
        ("--duration-ms", args.duration_ms.unwrap_or(400.0)),
        ("--fsd-duration-ms", args.fsd_duration_ms),
    ] {
        if !(ms > 0.0 && ms.is_finite()) {
            anyhow::bail!("{flag} must be a positive number of milliseconds, not {ms}");
        }
    }
    let mut workloads = Vec::new();
    if args.workloads.is_empty() && args.scenarios.is_empty() {
        workloads = Workload::ALL.to_vec();
    }
    for w in &args.workloads {
        let named = match w {
            WorkloadArg::FbHadoop => vec![Workload::FbHadoop],
            WorkloadArg::Alltoall => vec![Workload::Alltoall],
            WorkloadArg::Influx => vec![Workload::Influx],
            WorkloadArg::All => Workload::ALL.to_vec(),
        };
        for w in named {
            if !workloads.contains(&w) {
                workloads.push(w);
            }
        }
    }
    let mut seeds: Vec<u64> = Vec::new();
    for seed in &args.seeds {
        if seeds.contains(seed) {
            anyhow::bail!("--seed {seed} is given twice");
        }
        seeds.push(*seed);
    }
    let settings = args
        .settings
        .iter()
        .map(|text| parse_setting(text))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let config = EvalConfig {
        workloads,
        fabric: match args.fabric {
            FabricArg::Paper => Fabric::Paper,
            FabricArg::Small => Fabric::Small,
        },
        duration_ms: args.duration_ms.unwrap_or(400.0),
        scenario_files: args.scenarios.clone(),
        file_duration_ms: args.duration_ms,
        file_seeds: seeds.clone(),
        interval_us: args.interval_us,
        seeds: if seeds.is_empty() { vec![1] } else { seeds },
        settings,
        fsd_intervals_us: args.fsd_intervals_us.clone(),
        fsd_duration_ms: args.fsd_duration_ms,
        fsd_loads: args.fsd_loads.clone(),
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

/// `NAME:knob=value,knob=value` as a static policy (the knobs are checked against the
/// searched space when the evaluation starts, before any simulation).
fn parse_setting(text: &str) -> anyhow::Result<Policy> {
    let (name, knobs) = text.split_once(':').ok_or_else(|| {
        anyhow::anyhow!("--setting `{text}`: expected NAME:knob=value,knob=value")
    })?;
    let name = name.trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
    {
        anyhow::bail!("--setting `{text}`: the name must be letters, digits, - and _");
    }
    let words: Vec<String> = knobs
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    let values = parse_assignments(&words).map_err(|e| anyhow::anyhow!("--setting {name}: {e}"))?;
    for (i, (k, _)) in values.iter().enumerate() {
        if values[..i].iter().any(|(other, _)| other == k) {
            anyhow::bail!("--setting {name}: {k} is given twice");
        }
    }
    Ok(Policy::Static {
        name: name.to_string(),
        values,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: TuneEvalArgs,
    }

    fn parse(argv: &[&str]) -> TuneEvalArgs {
        Cli::try_parse_from(std::iter::once("tune-eval").chain(argv.iter().copied()))
            .expect("the arguments parse")
            .args
    }

    /// The FSD sweep's λ_MI and loads: Fig. 11's and Fig. 10(a)'s by default, the ones
    /// given, or none with the flag alone (a quick run without the sweep).
    #[test]
    fn the_fsd_sweep_is_the_papers_the_one_given_or_none() {
        let default = parse(&[]);
        assert_eq!(default.fsd_intervals_us, [500, 1000, 2000, 5000]);
        assert_eq!(default.fsd_loads, [0.1, 0.2]);
        let given = parse(&["--fsd-intervals-us", "1000", "--fsd-loads", "0.05,0.25"]);
        assert_eq!(given.fsd_intervals_us, [1000]);
        assert_eq!(given.fsd_loads, [0.05, 0.25]);
        let none = parse(&["--fsd-loads", "--fsd-intervals-us", "--seed", "3"]);
        assert!(none.fsd_loads.is_empty() && none.fsd_intervals_us.is_empty());
        assert_eq!(none.seeds, [3]);
    }

    /// Several workloads and seeds in one run, and settings of one's own to compare: each
    /// `--setting` is a static policy by its name; a malformed one names itself.
    #[test]
    fn workloads_seeds_and_settings_of_ones_own() {
        let args = parse(&[
            "--workload",
            "alltoall,influx",
            "--seed",
            "1,2,3",
            "--setting",
            "fast:rpg_ai_rate=50, rpg_hai_rate=500",
        ]);
        assert_eq!(args.workloads, [WorkloadArg::Alltoall, WorkloadArg::Influx]);
        assert_eq!(args.seeds, [1, 2, 3]);
        assert_eq!(
            parse_setting(&args.settings[0]).unwrap(),
            Policy::Static {
                name: "fast".into(),
                values: vec![("rpg_ai_rate".into(), 50.0), ("rpg_hai_rate".into(), 500.0)],
            }
        );
        for (bad, says) in [
            ("rpg_ai_rate=50", "NAME:"),
            ("my setting:rpg_ai_rate=50", "letters"),
            ("x:rpg_ai_rate", "knob=value"),
            ("x:rpg_ai_rate=fast", "rpg_ai_rate=fast"),
            ("x:kmin_kb=5,kmin_kb=6", "twice"),
        ] {
            let e = parse_setting(bad).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
