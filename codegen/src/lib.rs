//! hawkmesh-codegen: the one description of the switch data plane and its outputs.
//!
//! - [`ir`]: the typed, Tofino-shaped description; [`check`]: the rules a program must obey
//!   to fit Tofino (run by [`ir::ProgramBuilder::build`]).
//! - [`hawkeye`]: the hawkmesh program (HAWKEYE telemetry, causality meters, polling;
//!   PARALEON's Elastic Sketch on ToR variants) and its parameters.
//! - [`model`]: the executable model behind the [`model::DataPlane`] trait.
//! - [`p4`]: P4-16 emission for Tofino (TNA) and BMv2 (v1model); [`rust_consts`]: the
//!   generated Rust constants; [`resources`]: SRAM estimate per module.
//! - [`sketch`]: the reference Elastic Sketch and the control-plane query over register
//!   dumps; [`netsim_adapter`]: the model as a netsim `SwitchPipeline`.
//! - [`trace`]: packet traces as data and their replay on the model (BMv2 harness).

pub mod check;
pub mod error;
pub mod hash;
pub mod hawkeye;
pub mod ir;
pub mod model;
pub mod netsim_adapter;
pub mod p4;
pub mod packets;
pub mod resources;
pub mod rust_consts;
pub mod sketch;
pub mod trace;

pub use error::{BuildError, ModelError};
