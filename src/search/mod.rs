//! Retrieval over the indexes, and fusion of runs.
//!
//! Owns: [`fusion`] (normalized-sum and RRF over runs, exact with the reference's `util.fusion`).

pub mod fusion;

pub use fusion::{FusionMethod, FusionOptions, fuse};
