//! hawkmesh-codegen: the outputs of the one description of the switch data plane
//! (`hawkmesh-dataplane`).
//!
//! - [`p4`]: P4-16 emission for Tofino (TNA) and BMv2 (v1model);
//! - [`bfrt`]: the BF Runtime description (`bfrt.json`) of the TNA program;
//! - [`rust_consts`]: the generated Rust constants in `wire/src/dataplane.rs`;
//! - [`resources`]: SRAM estimate per module (HAWKEYE Fig. 13b);
//! - [`trace`]: packet traces as data and their replay on the model (BMv2 harness).
//!
//! The binary `hawkmesh-codegen` writes and checks the generated files, the emitted model
//! (`dataplane/src/model/generated.rs`) among them.

pub mod bfrt;
pub mod p4;
pub mod resources;
pub mod rust_consts;
pub mod trace;
