//! hawkmesh-tuner — PARALEON (Chen et al., ICNP 2024): "tune the fabric so it happens less".
//!
//! - [`fsd`]: the flow-size distribution from the ToR sketches — ternary flow states over a
//!   sliding window (§III-B), the network-wide sum, the KL divergence between intervals,
//!   and the baselines the evaluation compares (naive Elastic Sketch, ground truth);
//! - [`utility`]: Eq. 1 from an interval's runtime metrics, with the operator's weights or
//!   the throughput-/latency-leaning presets;
//! - [`sa`]: the knobs searched ([`hawkmesh_knobs`] gives their ranges and directions) and
//!   Algorithm 1's guided simulated annealing, with the naive baseline and a safe rollback;
//! - [`controller`]: the loop — KL trigger, search, what to dispatch each interval;
//! - [`rounds`]: the controller of a deployed fabric — the ToRs' and hosts' reports of each
//!   interval gathered (a silent ToR left behind), the setting versioned.
//!
//! Pure and deterministic (seeded); time is the caller's monitor interval. The ToR control
//! planes read the sketches (switch agent), the knob writers apply settings (host agent,
//! switch agent); netsim's glue runs all of it in simulation (lab).

pub mod controller;
pub mod fsd;
pub mod rounds;
pub mod sa;
pub mod utility;

pub use controller::{Controller, ControllerConfig, Outcome};
pub use fsd::{Dominant, FlowId, Fsd, MonitorConfig, TorMonitor};
pub use sa::{Annealer, SaConfig, Setting, Space, Step, StepKind};
pub use utility::{IntervalMetrics, Weights};
