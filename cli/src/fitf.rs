//! `hawkmesh fitf`: congestion from port counters (the InfiniBand study's Forced Idle Time
//! Fraction, Yellowstone Eq. 3), sampled from a netsim scenario or replayed from recorded
//! samples; writes CSV, JSON, an HTML page with the study's plots and a Prometheus
//! exposition.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::Context;
use clap::{Args, ValueEnum};
use hawkmesh_congestion::{
    classify, fitf::split_rounds, fitf_round, report, CounterSource, FitfConfig, Round, Sample,
    Sampler, SamplingPlan,
};
use hawkmesh_lab::counters::{NetsimClock, NetsimCounters};

/// How the ports are sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// The study's plan: a random up port per round, reset, `--reads` reads.
    Plan,
    /// Every port, read in turn every `--spacing-us`, without resets.
    Continuous,
}

/// Arguments of `hawkmesh fitf`.
#[derive(Args, Debug)]
pub struct FitfArgs {
    /// A netsim scenario whose port counters to sample while it runs.
    #[arg(long, conflicts_with = "samples")]
    scenario: Option<PathBuf>,
    /// Recorded samples to replay instead (JSON lines, one `Sample` each; a round per run
    /// of one port's samples).
    #[arg(long)]
    samples: Option<PathBuf>,
    /// Sampling mode on a scenario.
    #[arg(long, value_enum, default_value_t = Mode::Continuous)]
    mode: Mode,
    /// Time between reads, µs (the study: 100 ms; netsim scenarios last milliseconds).
    #[arg(long, default_value_t = 100)]
    spacing_us: u64,
    /// Reads per round (plan mode; the study: 100).
    #[arg(long, default_value_t = 100)]
    reads: usize,
    /// Rounds (plan mode).
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Sweeps over every port (continuous mode; 0: as many as fit the scenario).
    #[arg(long, default_value_t = 0)]
    sweeps: usize,
    /// A query's turnaround, µs, drawn between these (the read happens somewhere inside).
    #[arg(long, num_args = 2, default_values_t = [1, 5])]
    turnaround_us: Vec<u64>,
    /// τ, the duration of one PortXmitWait tick, ns (FDR: 22).
    #[arg(long, default_value_t = 22.0)]
    tau_ns: f64,
    /// Seed of the port picks and turnarounds.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output directory.
    #[arg(long, default_value = "out/fitf")]
    out: PathBuf,
}

/// Runs `hawkmesh fitf`.
pub fn run(args: &FitfArgs) -> anyhow::Result<()> {
    let cfg = FitfConfig {
        tau_ns: args.tau_ns,
        ..FitfConfig::default()
    };
    let (title, samples) = match (&args.scenario, &args.samples) {
        (Some(path), _) => (
            format!("FITF: {}", path.display()),
            from_scenario(path, args)?,
        ),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let samples = hawkmesh_congestion::parse::samples_jsonl(&text)
                .with_context(|| format!("{}", path.display()))?;
            (format!("FITF: {}", path.display()), samples)
        }
        (None, None) => anyhow::bail!("give --scenario FILE or --samples FILE"),
    };
    let mut rounds: Vec<Round> = Vec::new();
    for (i, run) in split_rounds(&samples).into_iter().enumerate() {
        if run.len() < 2 {
            continue;
        }
        rounds.push(fitf_round(run, &cfg).with_context(|| {
            format!(
                "round {i} ({})",
                run.first().map(|s| s.port.to_string()).unwrap_or_default()
            )
        })?);
    }
    let groups = classify(&rounds);
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let write = |name: &str, body: String| -> anyhow::Result<()> {
        let path = args.out.join(name);
        std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))
    };
    write("intervals.csv", report::intervals_csv(&rounds))?;
    write("rounds.csv", report::rounds_csv(&rounds))?;
    write("fitf.json", report::to_json(&rounds, &groups)?)?;
    write("report.html", report::html(&title, &groups))?;
    write("metrics.prom", report::prometheus(&samples, &rounds))?;
    println!(
        "{} samples, {} rounds; by tier and direction (Yellowstone Fig. 5–7):",
        samples.len(),
        rounds.len()
    );
    println!(
        "{:<8} {:<5} {:>7} {:>9} {:>10} {:>10} {:>9} {:>9}",
        "tier", "dir", "rounds", "non-zero", "intervals", "waited %", "max FITF", "FITF > 1"
    );
    for g in &groups {
        let max = g
            .max_per_nonzero_round
            .iter()
            .copied()
            .fold(0.0_f64, f64::max);
        println!(
            "{:<8} {:<5} {:>7} {:>9} {:>10} {:>9.1}% {:>9.3} {:>9}",
            g.tier.to_string(),
            g.dir.to_string(),
            g.rounds,
            g.nonzero_rounds,
            g.intervals,
            100.0 * g.nonzero_intervals as f64 / g.intervals.max(1) as f64,
            max,
            g.above_one
        );
    }
    println!(
        "wrote {}/{{intervals.csv, rounds.csv, fitf.json, report.html, metrics.prom}}",
        args.out.display()
    );
    Ok(())
}

fn from_scenario(path: &Path, args: &FitfArgs) -> anyhow::Result<Vec<Sample>> {
    let loaded = hawkmesh_netsim::Scenario::load(path)
        .with_context(|| format!("loading {}", path.display()))?;
    let sim = hawkmesh_netsim::Simulation::new(&loaded)
        .with_context(|| format!("building {}", path.display()))?;
    let end_ns = (loaded.scenario.duration_us * 1_000.0) as u64;
    let sim = Rc::new(RefCell::new(sim));
    let (low, high) = match args.turnaround_us.as_slice() {
        [a, b] => (a.saturating_mul(1_000), b.saturating_mul(1_000)),
        _ => anyhow::bail!("--turnaround-us takes two values"),
    };
    let spacing_ns = args.spacing_us.max(1).saturating_mul(1_000);
    let mut source = NetsimCounters::new(sim.clone(), args.tau_ns, (low, high), args.seed);
    let mut clock = NetsimClock(sim);
    let mut sampler = Sampler::new(SamplingPlan {
        seed: args.seed,
        reads_per_round: args.reads.max(2),
        spacing_ns,
        ..SamplingPlan::default()
    });
    Ok(match args.mode {
        Mode::Continuous => {
            let ports = source.ports();
            let sweeps = if args.sweeps == 0 {
                (end_ns / spacing_ns).max(2) as usize
            } else {
                args.sweeps.max(2)
            };
            let mut flat = sampler.continuous(&mut source, &mut clock, &ports, sweeps)?;
            // One round per port, in the order of the ports.
            flat.sort_by_key(|s| s.port.key());
            flat
        }
        Mode::Plan => sampler
            .run(&mut source, &mut clock, args.rounds)?
            .into_iter()
            .flat_map(|r| r.samples)
            .collect(),
    })
}
