//! `hawkmesh fitf`: congestion from port counters (the InfiniBand study's Forced Idle Time
//! Fraction, Yellowstone Eq. 3), sampled from a netsim scenario or replayed from recorded
//! samples; writes CSV, JSON, an HTML page with the study's plots and a Prometheus
//! exposition. With `--watchdog`, runs the counter-only PFC watchdog (SONiC pfcwd style) on
//! each scenario instead and writes its verdicts, optionally beside HAWKEYE's diagnosis of
//! the same scenario (`--hawkeye`).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
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

/// The files `hawkmesh fitf` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// intervals.csv: every interval's FITF.
    Intervals,
    /// rounds.csv: every round's statistics.
    Rounds,
    /// fitf.json: rounds and groups (with every interval: the largest file).
    Json,
    /// report.html: the study's plots.
    Html,
    /// metrics.prom: the Prometheus exposition (a line per port and counter).
    Prometheus,
}

impl Output {
    fn file(self) -> &'static str {
        match self {
            Output::Intervals => "intervals.csv",
            Output::Rounds => "rounds.csv",
            Output::Json => "fitf.json",
            Output::Html => "report.html",
            Output::Prometheus => "metrics.prom",
        }
    }
}

/// Arguments of `hawkmesh fitf`.
#[derive(Args, Debug)]
pub struct FitfArgs {
    /// Sample real ports continuously as a daemon, per the TOML file (sources, ports,
    /// spacing, /metrics address, record file; see hw-lab/fitf-watch.toml): FITF and the
    /// PFC watchdog served as Prometheus metrics until SIGTERM.
    #[arg(long, conflicts_with_all = ["scenario", "samples", "watchdog"])]
    watch: Option<PathBuf>,
    /// A netsim scenario whose port counters to sample while it runs (repeat with
    /// `--watchdog` to compare several).
    #[arg(long, conflicts_with = "samples")]
    scenario: Vec<PathBuf>,
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
    /// Write only these files (comma-separated; default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    write: Vec<Output>,
    /// Run the PFC watchdog from counters on each `--scenario` (every port read every
    /// `--watchdog-spacing-us`) and write verdicts.json instead of the FITF report.
    #[arg(long)]
    watchdog: bool,
    /// The watchdog's time between sweeps over every port, µs.
    #[arg(long, default_value_t = 20)]
    watchdog_spacing_us: u64,
    /// The watchdog's query turnaround, ns, drawn between these: a sweep reads every port
    /// one after the other, so this is also the skew across a sweep.
    #[arg(long, num_args = 2, default_values_t = [0, 200])]
    watchdog_turnaround_ns: Vec<u64>,
    /// Paused without transmitting this long is a storm, µs (SONiC pfcwd: 200 ms on a
    /// fabric; scenarios last milliseconds).
    #[arg(long, default_value_t = 200)]
    detection_us: u64,
    /// No pause for this long restores a stormed queue, µs (SONiC pfcwd: 200 ms).
    #[arg(long, default_value_t = 200)]
    restoration_us: u64,
    /// With `--watchdog`: also run the HAWKEYE loop (`hawkmesh demo`) on each scenario and
    /// put its diagnosis beside the watchdog's verdict.
    #[arg(long, requires = "watchdog")]
    hawkeye: bool,
}

/// Runs `hawkmesh fitf`.
pub fn run(args: &FitfArgs) -> anyhow::Result<()> {
    if let Some(config) = &args.watch {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_max_level(tracing::Level::INFO)
            .try_init()
            .map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))?;
        return crate::fitf_watch::run(config);
    }
    if args.watchdog {
        return watchdog(args);
    }
    if args.scenario.len() > 1 {
        anyhow::bail!("one --scenario at a time (several only with --watchdog)");
    }
    let cfg = FitfConfig {
        tau_ns: args.tau_ns,
        ..FitfConfig::default()
    };
    let (title, samples) = match (args.scenario.first(), &args.samples) {
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
    let wanted = |f: Output| args.write.is_empty() || args.write.contains(&f);
    let mut written = Vec::new();
    for f in [
        Output::Intervals,
        Output::Rounds,
        Output::Json,
        Output::Html,
        Output::Prometheus,
    ] {
        if !wanted(f) {
            continue;
        }
        let body = match f {
            Output::Intervals => report::intervals_csv(&rounds),
            Output::Rounds => report::rounds_csv(&rounds),
            Output::Json => report::to_json(&rounds, &groups)?,
            Output::Html => report::html(&title, &groups),
            Output::Prometheus => report::prometheus(&samples, &rounds),
        };
        write(f.file(), body)?;
        written.push(f.file());
    }
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
    println!("wrote {}/{{{}}}", args.out.display(), written.join(", "));
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

/// What HAWKEYE's analyzer concluded on a scenario (the loop behind `hawkmesh demo`).
#[derive(Debug, Default, serde::Serialize)]
struct HawkeyeView {
    /// Incidents concluded.
    incidents: usize,
    /// Diagnosed anomalies by type, over every incident.
    anomaly_types: BTreeMap<String, usize>,
    /// Root-cause ports named (labels such as `tor0.p0`), by anomaly type.
    root_cause_ports: BTreeMap<String, BTreeSet<String>>,
    /// Injecting hosts named.
    injectors: BTreeSet<String>,
    /// Loop ports named (deadlocks).
    loop_ports: BTreeSet<String>,
}

impl HawkeyeView {
    fn of(outcome: &hawkmesh_lab::LoopOutcome) -> Self {
        let mut v = HawkeyeView {
            incidents: outcome.incidents.len(),
            ..HawkeyeView::default()
        };
        let labels = |a: &serde_json::Value| -> Vec<String> {
            a.as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["label"].as_str().map(str::to_string))
                .collect()
        };
        for incident in &outcome.incidents {
            let Some(d) = &incident.diagnosis else {
                continue;
            };
            for a in d["anomalies"].as_array().into_iter().flatten() {
                let kind = a["type"].as_str().unwrap_or("?").to_string();
                *v.anomaly_types.entry(kind.clone()).or_default() += 1;
                v.root_cause_ports
                    .entry(kind)
                    .or_default()
                    .extend(labels(&a["root_cause"]["ports"]));
                v.loop_ports.extend(labels(&a["loop_ports"]));
                if let Some(h) = a["root_cause"]["injector"].as_str() {
                    v.injectors.insert(h.to_string());
                }
            }
        }
        v
    }

    fn brief(&self) -> String {
        if self.anomaly_types.is_empty() {
            return format!("{} incidents, none diagnosed", self.incidents);
        }
        let types: Vec<String> = self
            .anomaly_types
            .iter()
            .map(|(k, n)| format!("{k}×{n}"))
            .collect();
        let mut out = format!("{} incidents: {}", self.incidents, types.join(", "));
        if !self.injectors.is_empty() {
            let v: Vec<&str> = self.injectors.iter().map(String::as_str).collect();
            out.push_str(&format!("; injector {}", v.join(", ")));
        }
        if !self.loop_ports.is_empty() {
            let v: Vec<&str> = self.loop_ports.iter().map(String::as_str).collect();
            out.push_str(&format!("; loop {}", v.join(" ")));
        }
        // The root cause of the gravest kind diagnosed (deadlock, storm, backpressure, …).
        let gravest = self.anomaly_types.keys().min_by_key(|k| match k.as_str() {
            k if k.starts_with("deadlock") => 0,
            "pfc_storm" => 1,
            "pfc_backpressure" => 2,
            "slow_receiver" => 3,
            "normal_flow_contention" => 4,
            _ => 5,
        });
        if let Some(kind) = gravest {
            let ports: Vec<&str> = self
                .root_cause_ports
                .get(kind)
                .into_iter()
                .flatten()
                .map(String::as_str)
                .collect();
            let shown = ports.len().min(4);
            out.push_str(&format!(
                "; {kind} root cause at {}{}",
                if shown == 0 {
                    "-".to_string()
                } else {
                    ports[..shown].join(" ")
                },
                if ports.len() > shown { " …" } else { "" }
            ));
        }
        out
    }
}

/// One scenario's row of `verdicts.json`.
#[derive(Debug, serde::Serialize)]
struct WatchdogRow {
    scenario: String,
    file: String,
    summary: String,
    watchdog: hawkmesh_lab::watchdog_eval::WatchdogEval,
    #[serde(skip_serializing_if = "Option::is_none")]
    hawkeye: Option<HawkeyeView>,
}

/// `hawkmesh fitf --watchdog`.
fn watchdog(args: &FitfArgs) -> anyhow::Result<()> {
    if args.scenario.is_empty() {
        anyhow::bail!("--watchdog needs at least one --scenario FILE");
    }
    let (low, high) = match args.watchdog_turnaround_ns.as_slice() {
        [a, b] => (*a, *b),
        _ => anyhow::bail!("--watchdog-turnaround-ns takes two values"),
    };
    let cfg = hawkmesh_lab::watchdog_eval::WatchdogEvalConfig {
        spacing_ns: args.watchdog_spacing_us.max(1).saturating_mul(1_000),
        turnaround_ns: (low, high),
        detection_ns: args.detection_us.saturating_mul(1_000),
        restoration_ns: args.restoration_us.saturating_mul(1_000),
        seed: args.seed,
        ..Default::default()
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut rows = Vec::new();
    for path in &args.scenario {
        let loaded = hawkmesh_netsim::Scenario::load(path)
            .with_context(|| format!("loading {}", path.display()))?;
        let eval = hawkmesh_lab::watchdog_eval::run(&loaded, &cfg)
            .with_context(|| format!("watchdog on {}", path.display()))?;
        let hawkeye = if args.hawkeye {
            let store = args
                .out
                .join(format!("analyzer-data-{}", loaded.scenario.name));
            let _ = std::fs::remove_dir_all(&store);
            let outcome = hawkmesh_lab::run(&loaded, &hawkmesh_lab::LoopConfig::new(store.clone()))
                .with_context(|| format!("HAWKEYE loop on {}", path.display()))?;
            let _ = std::fs::remove_dir_all(&store);
            Some(HawkeyeView::of(&outcome))
        } else {
            None
        };
        println!("{}: {}", loaded.scenario.name, eval.summary());
        rows.push(WatchdogRow {
            scenario: loaded.scenario.name.clone(),
            file: path.display().to_string(),
            summary: eval.summary(),
            watchdog: eval,
            hawkeye,
        });
    }
    println!(
        "\n| scenario | injected (ground truth) | counter watchdog | HAWKEYE diagnosis |\n|---|---|---|---|"
    );
    for r in &rows {
        let truth: Vec<String> = r
            .watchdog
            .truth
            .iter()
            .map(|t| {
                let at = if t.loop_ports.is_empty() {
                    &t.initial_ports
                } else {
                    &t.loop_ports
                };
                let shown = at.len().min(4);
                format!(
                    "{} at {}{}",
                    t.kind,
                    at[..shown].join(" "),
                    if at.len() > shown { " …" } else { "" }
                )
            })
            .collect();
        println!(
            "| {} | {} | {} | {} |",
            r.scenario,
            if truth.is_empty() {
                "nothing".to_string()
            } else {
                truth.join("; ")
            },
            r.summary,
            r.hawkeye
                .as_ref()
                .map_or_else(|| "(not run: --hawkeye)".to_string(), HawkeyeView::brief)
        );
    }
    let path = args.out.join("verdicts.json");
    std::fs::write(&path, serde_json::to_string_pretty(&rows)?)
        .with_context(|| format!("writing {}", path.display()))?;
    println!("\nwrote {}", path.display());
    Ok(())
}
