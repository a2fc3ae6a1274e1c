//! Kernels, one file per instruction-set tier, and the one binding table
//! that picks, at compile time, which tier's function each kernel name means.
//!
//! The scalar tier is always compiled: it is the fallback of every chain and
//! the reference the tests hold the other tiers to.

pub mod scalar;

/// The instruction-set tier this build was compiled for.
pub const TIER: &str = "scalar";

/// CPU features the kernels bound below execute (checked by `core::isa`).
pub const REQUIRED_FEATURES: &[&str] = &[];

// The binding table. Each generic kernel name resolves to the highest enabled
// tier implementing it (spec §3). No function pointers, no runtime dispatch.
pub use scalar::{add, axpy_f32, dot_f32, matvec_q4, matvec_q8, quantize_q8, rmsnorm, rope, silu_mul, softmax};
