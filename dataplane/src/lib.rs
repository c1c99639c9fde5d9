//! hawkmesh-dataplane: the switch data plane as a runtime library.
//!
//! - [`ir`]: the typed, Tofino-shaped description; [`check`]: the rules a program must obey
//!   to fit Tofino (run by [`ir::ProgramBuilder::build`]).
//! - [`hawkeye`]: the hawkmesh program (HAWKEYE telemetry, causality meters, polling;
//!   PARALEON's Elastic Sketch on ToRs) and its parameters.
//! - [`model`]: the executable model behind the [`model::DataPlane`] trait, on an
//!   interpreter of the compiled program or on that program emitted as Rust
//!   (`model/generated.rs`, written by the `hawkmesh-codegen` binary).
//! - [`setup`]: programming a switch's model from the fabric description.
//! - [`packets`]: packet bytes built and read with the program's own header layouts;
//!   [`sketch`]: the reference Elastic Sketch and the control-plane query over register
//!   dumps; [`hash`]: the CRC the hash units use.
//!
//! The P4 and Rust-constant emitters live in `hawkmesh-codegen`; the glue that runs the
//! model inside the simulator lives in `hawkmesh-lab`. This crate depends on `wire` only.

pub mod check;
pub mod error;
pub mod hash;
pub mod hawkeye;
pub mod ir;
pub mod model;
pub mod packets;
pub mod setup;
pub mod sketch;

pub use error::{BuildError, ModelError};
