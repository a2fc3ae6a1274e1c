//! legacy-ml: an inference-only runtime for small Llama-style decoder
//! transformers with Q8_0 and Q4_0 weights, from SSE2 and ARMv7 up to
//! AVX512-VNNI and SVE, with the instruction set chosen at compile time.
//!
//! Layers, each depending only on those below it:
//! `model` (file format, forward pass, sampler, tokenizer, load-time layout
//! policy) → `ops` → `kernels` (one file per ISA, one binding table) →
//! `core` (errors, quantization, tensors, memory). The CPU `guard` checks,
//! before any kernel runs, the features the bound `kernels` need, so it
//! sits above them and below whatever calls them.

pub mod core;
pub mod guard;
pub mod kernels;
pub mod model;
pub mod ops;

pub use crate::core::error::{ErrorKind, MlError, Result};
