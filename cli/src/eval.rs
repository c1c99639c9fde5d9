//! `hawkmesh eval`: the evaluation harness of `hawkmesh_lab::eval` behind the command line.

use anyhow::Context as _;
use hawkmesh_lab::eval::report::write_outputs;
use hawkmesh_lab::eval::{run_eval, AnomalyClass, EvalConfig, Family, Grid};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `hawkmesh eval`.
#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// Traces per anomaly class (HAWKEYE used 100).
    #[arg(long, default_value_t = 5)]
    traces: u32,
    /// Master seed: the same seed gives the same traces and the same results.json.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output directory (results.json, timing.json, report.md, fig*.svg, traces/).
    #[arg(long, default_value = "out/eval")]
    out: PathBuf,
    /// Parameter points: `sweep` (epoch sizes at 300 %, thresholds at 262 µs), `full`
    /// (every epoch × every threshold) or `fixed` (262 µs, 300 % only).
    #[arg(long, default_value = "sweep")]
    grid: String,
    /// Anomaly classes, comma-separated (default: all): pfc-backpressure, pfc-storm,
    /// deadlock-in-loop, deadlock-out-of-loop, flow-contention, slow-receiver.
    #[arg(long, value_delimiter = ',')]
    classes: Vec<String>,
    /// Fabric families, comma-separated, or `all`: k4 (the paper's K=4 fat-tree, the
    /// default), leaf-spine, clos, rail (drawn per trace: speeds, oversubscription, buffers,
    /// ECN and PFC thresholds).
    #[arg(long, value_delimiter = ',', default_value = "k4")]
    fabrics: Vec<String>,
    /// Keep the switch reports of every judged incident at the fixed point under
    /// OUT/incidents/<trace>/ (with the trace's topology.json), to re-run
    /// `hawkmesh diagnose` on any of them.
    #[arg(long)]
    keep_incidents: bool,
}

/// Runs the evaluation and writes its files.
pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    let grid = Grid::parse(&args.grid)?;
    let classes = if args.classes.is_empty() {
        AnomalyClass::ALL.to_vec()
    } else {
        args.classes
            .iter()
            .map(|name| AnomalyClass::parse(name))
            .collect::<Result<Vec<_>, _>>()?
    };
    let families = Family::parse_list(&args.fabrics)?;
    let config = EvalConfig {
        master_seed: args.seed,
        traces_per_class: args.traces,
        classes,
        families,
        grid,
        work_dir: args.out.join(".work"),
        keep_incidents: args.keep_incidents.then(|| args.out.join("incidents")),
    };
    config.validate()?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let command = format!(
        "hawkmesh eval --traces {} --seed {} --grid {} --classes {} --fabrics {} --out {}",
        config.traces_per_class,
        config.master_seed,
        args.grid,
        config
            .classes
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(","),
        config
            .families
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(","),
        args.out.display()
    );
    let started = Instant::now();
    eprintln!(
        "hawkmesh eval: {} fabric families × {} classes × {} traces × {} parameter points (3 collection methods per run)",
        config.families.len(),
        config.classes.len(),
        config.traces_per_class,
        grid.points().len()
    );
    let (results, timing) = run_eval(&config, &mut |line| eprintln!("{line}"))?;
    let _ = std::fs::remove_dir_all(&config.work_dir);
    let written = write_outputs(&args.out, &results, &timing, &command)?;
    let fixed = results.fixed_point;
    println!(
        "HAWKEYE at {} (precision / recall, reports):",
        fixed.label()
    );
    for row in results
        .summary
        .scores
        .iter()
        .filter(|r| r.point == fixed && r.mode == hawkmesh_lab::PollingMode::Hawkeye)
    {
        let name = row.class.map_or("all classes", |c| c.name());
        let ratio = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.2}"));
        println!(
            "  {name:<22} {} / {} ({} reports, {} of {} traces detected)",
            ratio(row.score.precision),
            ratio(row.score.recall),
            row.score.reports,
            row.score.detected,
            row.score.traces
        );
    }
    println!(
        "wrote {} files to {} in {:.0} s (report: {})",
        written.len(),
        args.out.display(),
        started.elapsed().as_secs_f64(),
        args.out.join("report.md").display()
    );
    Ok(())
}
