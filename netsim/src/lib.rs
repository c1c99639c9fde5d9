//! netsim — a packet-level discrete-event simulator of RoCEv2 fabrics.
//!
//! It models what decides RDMA performance in a lossless Ethernet fabric: output-queued
//! switches with 8 priorities, ingress shared-buffer accounting with reserve, headroom and a
//! dynamic threshold, IEEE 802.1Qbb PFC with real quanta, ECN marking, ECMP; NICs with RoCEv2
//! go-back-N, CNPs and DCQCN with the ConnectX knobs; workloads; injected faults with ground
//! truth; and extension points for the switch data plane and host agents.
//!
//! ```no_run
//! use hawkmesh_netsim::{Scenario, Simulation};
//! let loaded = Scenario::load("scenarios/k4-incast.toml".as_ref()).unwrap();
//! let mut sim = Simulation::new(&loaded).unwrap();
//! sim.run();
//! let result = sim.result(&loaded.scenario.name, loaded.scenario.seed, &loaded.scenario.output.fct_bins);
//! println!("{}", result.summary());
//! ```

mod build;
pub mod dcqcn;
pub mod event;
pub mod fabric;
pub mod hooks;
pub mod output;
pub mod packet;
pub mod rng;
pub mod routing;
pub mod scenario;
mod sim;
pub mod time;
pub mod truth;
pub mod workload;

pub use fabric::Warning;
pub use output::{FctBin, FlowRecord, SimResult, Totals};
pub use scenario::{LoadedScenario, Scenario, ScenarioError};
pub use sim::{FlowPosting, PfcEvent, PortCounters, QueueSample, Simulation};

/// Loads, builds and runs a scenario file, returning its results.
pub fn run_file(path: &std::path::Path) -> Result<SimResult, ScenarioError> {
    let loaded = Scenario::load(path)?;
    run_loaded(&loaded)
}

/// Builds and runs a loaded scenario.
pub fn run_loaded(loaded: &LoadedScenario) -> Result<SimResult, ScenarioError> {
    let mut sim = Simulation::new(loaded)?;
    sim.run();
    let s = &loaded.scenario;
    Ok(sim.result(&s.name, s.seed, &s.output.fct_bins))
}
