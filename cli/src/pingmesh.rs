//! `hawkmesh pingmesh eval`: R-Pingmesh's evaluation of `hawkmesh_lab::pingmesh_eval` behind
//! the command line.

use anyhow::Context as _;
use hawkmesh_lab::eval::Family;
use hawkmesh_lab::pingmesh_eval::{self, FaultFamily, Mode, PingmeshEvalConfig};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `hawkmesh pingmesh eval`.
#[derive(clap::Args, Debug)]
pub struct PingmeshEvalArgs {
    /// Traces per fabric and fault family.
    #[arg(long, default_value_t = 3)]
    traces: u32,
    /// Master seed: the same seed gives the same traces and the same results.json.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output directory (results.json, report.md).
    #[arg(long, default_value = "out/pingmesh-eval")]
    out: PathBuf,
    /// Fault families, comma-separated (default: all): healthy, link-loss, acl-drop,
    /// link-down, rnic-down, host-down, agent-restart, cpu-overload, link-flap, rnic-flap,
    /// pfc-storm, ecmp-imbalance.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// Fabric families, comma-separated, or `all`: k4, leaf-spine, clos, rail (drawn per
    /// trace); default clos,rail (rail under Hostmesh).
    #[arg(long, value_delimiter = ',')]
    fabrics: Vec<String>,
    /// Which system probes: `pingmesh` (R-Pingmesh: controller, probes and ACKs between
    /// hosts) or `hostmesh` (each host between its own RNICs across rails, no controller,
    /// one-way; rail fabrics, and every family but host-down and agent-restart).
    #[arg(long, default_value = "pingmesh")]
    mode: String,
}

/// Runs the evaluation and writes its files.
pub fn eval(args: PingmeshEvalArgs) -> anyhow::Result<()> {
    let mode = Mode::parse(&args.mode)?;
    let faults = if args.faults.is_empty() {
        mode.families()
    } else {
        args.faults
            .iter()
            .map(|name| FaultFamily::parse(name))
            .collect::<Result<Vec<_>, _>>()?
    };
    let fabrics = match (args.fabrics.is_empty(), mode) {
        (true, Mode::Pingmesh) => vec![Family::Clos, Family::Rail],
        (true, Mode::Hostmesh) => vec![Family::Rail],
        (false, _) => Family::parse_list(&args.fabrics)?,
    };
    let config = PingmeshEvalConfig {
        mode,
        fabrics: fabrics.clone(),
        faults: faults.clone(),
        traces: args.traces,
        seed: args.seed,
        ..PingmeshEvalConfig::default()
    };
    let started = Instant::now();
    let results = pingmesh_eval::run(&config)?;
    let command = format!(
        "hawkmesh pingmesh eval{} --traces {} --seed {} --fabrics {} --faults {} --out {}",
        match mode {
            Mode::Pingmesh => "",
            Mode::Hostmesh => " --mode hostmesh",
        },
        args.traces,
        args.seed,
        fabrics
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(","),
        faults
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(","),
        args.out.display()
    );
    pingmesh_eval::write(&results, &args.out, &command)
        .with_context(|| format!("writing {}", args.out.display()))?;
    for s in &results.summary {
        println!(
            "{:<11} {:<14} {} traces: detected {}, located {}, false problems {}",
            s.fabric.name(),
            s.fault.name(),
            s.traces,
            s.detected,
            s.located,
            s.false_problems
        );
    }
    println!(
        "precision {:.2}, detected and located {:.2} ({} traces in {:.0} s; report: {})",
        results.precision,
        results.detection,
        results.traces.len(),
        started.elapsed().as_secs_f64(),
        args.out.join("report.md").display()
    );
    Ok(())
}
