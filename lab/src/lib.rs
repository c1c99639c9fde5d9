//! hawkmesh-lab: the real agents' libraries run inside the simulator.
//!
//! Nothing deployable depends on this crate (checked by `tests/tests/layout.rs`); it
//! depends on everything:
//!
//! - [`switch_pipeline`]: the executable data-plane model as netsim's `SwitchPipeline` on
//!   every switch (packet fields serialised to header bytes, the model's decisions mapped
//!   back);
//! - [`hosts`]: the host agent's [`hawkmesh_host_agent::RttDetector`] on every simulated
//!   host, sending real polling packets into the fabric;
//! - [`hawkeye_loop`]: the whole HAWKEYE loop (model, host triggers, one switch agent per
//!   switch, the analyzer service over gRPC on loopback) stepped with simulated time; the
//!   loop behind `hawkmesh demo`;
//! - [`pingmesh`]: R-Pingmesh's probers and responders on every simulated RNIC, probing
//!   with real packets, their results as the pingmesh analyzer's records;
//! - [`pingmesh_eval`]: R-Pingmesh's evaluation on fault families (`hawkmesh pingmesh eval`);
//! - [`counters`]: netsim's port counters as the congestion crate's counter source;
//! - [`watchdog_eval`]: the counter-only PFC watchdog on a scenario, beside its ground truth;
//! - [`eval`]: HAWKEYE's evaluation (§4.2–4.3) on top of that loop (`hawkmesh eval`).

pub mod counters;
pub mod eval;
pub mod hawkeye_loop;
pub mod hostmesh;
pub mod hosts;
pub mod paraleon;
pub mod paraleon_eval;
pub mod pingmesh;
pub mod pingmesh_eval;
pub mod pingmesh_uplink;
pub mod switch_pipeline;
pub mod watchdog_eval;

pub use hawkeye_loop::*;
