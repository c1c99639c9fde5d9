//! The switch agent (HAWKEYE §3.4 controller-assisted collection): on a polling packet's
//! CPU copy it reads the relevant epochs' telemetry registers, builds a telemetry report
//! (dropping empty and stale slots, adding flows the data plane evicted), cuts it into
//! MTU-sized chunks and streams them to the analyzer over gRPC.
//!
//! The switch is behind [`backend::SwitchBackend`]: the executable model today
//! (`backend::ModelBackend`, cargo feature `model`), BF Runtime on Tofino next.

pub mod agent;
pub mod backend;
pub mod bfrt_info;
pub mod collect;
pub mod transport;

pub use agent::{AgentConfig, AgentError, AgentStats, Collection, SwitchAgent, DEFAULT_GUARD_NS};
#[cfg(feature = "model")]
pub use backend::ModelBackend;
pub use backend::{BackendError, CpuFrame, CpuFrameKind, SwitchBackend};
pub use collect::{Eviction, Geometry, RegisterSnapshot};
