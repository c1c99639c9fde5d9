//! Every byte format of hawkmesh in one place, in the smoltcp `wire` style: typed views over
//! byte buffers with checked parsing of untrusted input, and plain `Repr` structs that parse
//! from and emit to those views.
//!
//! - [`dataplane`]: constants and header layouts generated from the switch program (codegen).
//! - [`pfc`]: IEEE 802.1Qbb priority-based flow control frames.
//! - [`topology`]: the fabric description shared by netsim, the switch agent and the analyzer.
//! - [`telemetry`]: HAWKEYE telemetry reports sent by switch agents to the analyzer.

pub mod dataplane;
pub mod pfc;
pub mod telemetry;
pub mod topology;
