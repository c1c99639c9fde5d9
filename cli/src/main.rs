//! `hawkmesh` — the command-line entry point.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "hawkmesh",
    version,
    about = "Find out why RDMA traffic is slow, and rehearse it in simulation"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Packet-level simulation of a RoCEv2 fabric.
    Sim {
        #[command(subcommand)]
        command: SimCommand,
    },
    /// Explain why a flow is slow from HAWKEYE telemetry reports (provenance graph and
    /// signature diagnosis).
    Diagnose {
        /// A directory of reports (`*.json`, `*.hkt`) or one report file.
        #[arg(long)]
        reports: PathBuf,
        /// The fabric (`topology.json` as written by `hawkmesh sim run`).
        #[arg(long)]
        topology: PathBuf,
        /// The slow flow: SRC_IP:SRC_PORT->DST_IP[:DST_PORT], e.g. 11.0.4.1:49152->11.0.0.1:4791.
        #[arg(long)]
        victim: String,
        /// Expected epoch size in ns (refuses reports with another).
        #[arg(long)]
        epoch: Option<u64>,
        /// Write diagnosis.json, diagnosis.txt, provenance.dot and report.html here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the JSON instead of the text explanation.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum SimCommand {
    /// Run a scenario file and write its results.
    Run {
        /// The scenario (TOML, see docs/scenario.md).
        scenario: PathBuf,
        /// Output directory (result.json, summary.txt, fct.txt, pfc_events.csv, ...).
        #[arg(long, default_value = "out")]
        out: PathBuf,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Check a scenario file without running it.
    Check {
        /// The scenario.
        scenario: PathBuf,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Err(error) = run(cli) {
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Sim { command } => match command {
            SimCommand::Run {
                scenario,
                out,
                seed,
            } => sim_run(&scenario, &out, seed),
            SimCommand::Check { scenario } => {
                let loaded = hawkmesh_netsim::Scenario::load(&scenario)?;
                let sim = hawkmesh_netsim::Simulation::new(&loaded)?;
                println!(
                    "{}: ok ({} nodes, {} links)",
                    scenario.display(),
                    sim.topology().nodes.len(),
                    sim.topology().links.len()
                );
                Ok(())
            }
        },
        Command::Diagnose {
            reports,
            topology,
            victim,
            epoch,
            out,
            json,
        } => diagnose(&reports, &topology, &victim, epoch, out.as_deref(), json),
    }
}

fn diagnose(
    reports: &Path,
    topology: &Path,
    victim: &str,
    epoch: Option<u64>,
    out: Option<&Path>,
    json: bool,
) -> anyhow::Result<()> {
    use hawkmesh_analyzer::render;
    let output = hawkmesh_analyzer::diagnose_files(reports, topology, victim, epoch)?;
    let text = render::to_text(&output.diagnosis);
    let json_text = render::to_json(&output.diagnosis)?;
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let write = |name: &str, body: &str| {
            let path = dir.join(name);
            std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))
        };
        write("diagnosis.json", &json_text)?;
        write("diagnosis.txt", &text)?;
        write(
            "provenance.dot",
            &render::to_dot(&output.diagnosis, &output.view),
        )?;
        write(
            "report.html",
            &render::to_html(&output.diagnosis, &output.view)?,
        )?;
    }
    if json {
        println!("{json_text}");
    } else {
        print!("{text}");
        if let Some(dir) = out {
            println!("report: {}", dir.join("report.html").display());
        }
    }
    Ok(())
}

fn sim_run(scenario: &Path, out: &Path, seed: Option<u64>) -> anyhow::Result<()> {
    let mut loaded = hawkmesh_netsim::Scenario::load(scenario)?;
    if let Some(seed) = seed {
        loaded.scenario.seed = seed;
    }
    let started = Instant::now();
    let mut sim = hawkmesh_netsim::Simulation::new(&loaded)?;
    sim.run();
    let wall = started.elapsed();
    eprintln!("max pending events: {}", sim.max_pending_events());
    let s = &loaded.scenario;
    let result = sim.result(&s.name, s.seed, &s.output.fct_bins);
    result
        .write(out)
        .with_context(|| format!("writing results to {}", out.display()))?;
    print!("{}", result.summary());
    let events = result.totals.events;
    println!(
        "wall {:.2} s, {:.2} M events/s; results in {}",
        wall.as_secs_f64(),
        events as f64 / wall.as_secs_f64().max(1e-9) / 1e6,
        out.display()
    );
    Ok(())
}
