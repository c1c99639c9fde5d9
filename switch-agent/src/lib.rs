//! The switch agent (HAWKEYE §3.4 controller-assisted collection): on a polling packet's
//! CPU copy it reads the relevant epochs' telemetry registers, builds a telemetry report
//! (dropping empty and stale slots, adding flows the data plane evicted), cuts it into
//! MTU-sized chunks and streams them to the analyzer over gRPC.
//!
//! The switch is behind [`backend::SwitchBackend`]: the executable model in process
//! (`backend::ModelBackend`, cargo feature `model`) or a Tofino over BF Runtime
//! (`bfrt_backend::BfrtBackend`, cargo feature `bfrt`; [`bfrt_info`] checks the switch's
//! program against the agent's).

pub mod agent;
pub mod backend;
#[cfg(feature = "bfrt")]
pub mod bfrt_backend;
pub mod bfrt_info;
pub mod collect;
#[cfg(feature = "cpu-port")]
pub mod cpu_port;
#[cfg(feature = "daemon")]
pub mod daemon;
pub mod ecn_table;
pub mod ecn_writer;
pub mod port_counters;
pub mod setup;
pub mod sketch;
pub mod transport;
#[cfg(feature = "daemon")]
pub mod tuning;

pub use agent::{
    AgentConfig, AgentError, AgentStats, Collection, SwitchAgent, DEFAULT_EVENTS_PER_PORT_PER_SEC,
    DEFAULT_EVENT_BURST, DEFAULT_GUARD_NS,
};
#[cfg(feature = "model")]
pub use backend::ModelBackend;
pub use backend::{BackendError, CpuFrame, CpuFrameKind, PortCounters, SwitchBackend};
pub use collect::{Eviction, Geometry, RegisterSnapshot};
