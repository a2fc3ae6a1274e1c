//! Core: types and memory shared by every layer above. Depends on nothing else
//! in the crate (`isa` is only the guard's old path, re-exported).

pub mod aligned;
pub mod arena;
pub mod error;
pub mod file;
pub mod isa;
pub mod quant;
pub mod rng;
pub mod tensor;
#[cfg(feature = "threads")]
pub mod threads;
