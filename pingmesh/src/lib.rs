//! R-Pingmesh (SIGCOMM'24) and Hostmesh as a pure library: what the controller decides and,
//! later, what the analyzer concludes. No I/O, no clock: the controller service and the
//! netsim glue drive it.
//!
//! - [`analysis`]: the analyzer's period: host down, QPN reset, CPU noise, RNIC anomaly,
//!   Algorithm 1 voting, SLA and service impact.
//! - [`coverage`]: Eq. 1 — how many random 5-tuples cover every parallel cross-ToR path.
//! - [`hostmesh`]: Hostmesh — each host probes between its own RNICs across rails, no
//!   controller; one-way loss and latency located by an explain-away loop.
//! - [`inventory`]: the RNICs of a fabric, their ToRs and the parallel paths between ToRs.
//! - [`pinglist`]: ToR-mesh and inter-ToR pinglists, probe intervals, 5-tuple rotation.
//! - [`rng`]: the seeded generator behind every random choice (same seed, same pinglists).

pub mod analysis;
pub mod coverage;
pub mod hostmesh;
pub mod inventory;
pub mod pinglist;
pub mod rng;

pub use coverage::{five_tuples_for_coverage, miss_probability, CoverageError};
pub use inventory::{Inventory, InventoryError, Rnic, RnicId};
pub use pinglist::{InterTorTarget, PinglistConfig, PinglistError, Pinglists, RnicPinglist};
