//! Runs a netsim scenario with the hawkmesh model on every switch (through the netsim
//! adapter) and prints the wall time, so the cost of the model can be compared with a
//! plain run:
//!
//! ```sh
//! cargo run --release -p hawkmesh-lab --example netsim_bench -- scenarios/hpcc-fat320-websearch.toml
//! cargo run --release -p hawkmesh-lab --example netsim_bench -- scenarios/hpcc-fat320-websearch.toml --no-model
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use hawkmesh_dataplane::hawkeye::HawkeyeParams;
use hawkmesh_lab::switch_pipeline::install_on_all_switches;
use hawkmesh_netsim::{Scenario, Simulation};

#[derive(Parser, Debug)]
#[command(about = "netsim with the hawkmesh data-plane model on every switch")]
struct Args {
    /// Scenario file.
    scenario: PathBuf,
    /// Run without the model (baseline).
    #[arg(long)]
    no_model: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let loaded = match Scenario::load(&args.scenario) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut sim = match Simulation::new(&loaded) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let installed = if args.no_model {
        Default::default()
    } else {
        match install_on_all_switches(&mut sim, &HawkeyeParams::default()) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    let start = Instant::now();
    sim.run();
    let wall = start.elapsed().as_secs_f64();
    let s = &loaded.scenario;
    let result = sim.result(&s.name, s.seed, &s.output.fct_bins);
    print!("{}", result.summary());
    let (mut ingress, mut egress, mut cpu, mut errors) = (0u64, 0u64, 0u64, 0u64);
    for sw in installed.values() {
        let st = sw.stats.get();
        ingress += st.ingress;
        egress += st.egress;
        cpu += st.cpu_copies;
        errors += st.errors + st.busy;
    }
    println!(
        "model on {} switches: {ingress} ingress + {egress} egress passes, {cpu} CPU copies, {errors} errors",
        installed.len()
    );
    println!(
        "wall {wall:.2} s ({} model), {:.2} M events/s",
        if args.no_model { "without" } else { "with" },
        sim.events_processed() as f64 / wall / 1e6
    );
    ExitCode::SUCCESS
}
