//! Every byte format of hawkmesh in one place, in the smoltcp `wire` style: typed views over
//! byte buffers with checked parsing of untrusted input, and plain `Repr` structs that parse
//! from and emit to those views.
//!
//! - [`dataplane`]: constants and header layouts generated from the switch program (codegen).
//! - [`control`]: control-plane objects every switch backend takes (table entries).
//! - [`pfc`]: IEEE 802.1Qbb priority-based flow control frames.
//! - [`polling`]: the HAWKEYE polling header hosts send and switches copy to their CPU.
//! - [`eviction`]: the flow eviction report switches copy to their CPU.
//! - [`probe`]: R-Pingmesh probe and ACK payloads between host agents.
//! - [`topology`]: the fabric description shared by netsim, the switch agent and the analyzer.
//! - [`telemetry`]: HAWKEYE telemetry reports sent by switch agents to the analyzer.

pub mod control;
pub mod dataplane;
pub mod eviction;
pub mod pfc;
pub mod polling;
pub mod probe;
pub mod rng;
pub mod roce;
pub mod telemetry;
pub mod topology;
