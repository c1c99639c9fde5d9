//! The controller's seeded random numbers: [`hawkmesh_wire::rng::SplitMix64`], shared with
//! the other deployable libraries.

pub use hawkmesh_wire::rng::SplitMix64;
