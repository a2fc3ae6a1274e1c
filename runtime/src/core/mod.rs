//! Core: types and memory shared by every layer above. Depends on nothing else
//! in the crate.

pub mod aligned;
pub mod arena;
pub mod error;
pub mod file;
pub mod quant;
pub mod rng;
pub mod tensor;
#[cfg(feature = "threads")]
pub mod threads;
