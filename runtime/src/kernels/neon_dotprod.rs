//! NEON dot-product tier (ARMv8.2 FEAT_DotProd; AArch64 only): Cortex-A55,
//! A75, A76, Neoverse N1 and later. Implements the two matvecs and the two
//! matmuls; everything else is the NEON tier's, since dotprod only adds
//! integer dot products.
//!
//! Integer dot (DESIGN.md §5): `sdot v.4s, w.16b, x.16b` multiplies four int8
//! pairs and adds them into each int32 lane in one instruction, replacing
//! NEON's vmull/vmlal/vpadal sequence. Its intrinsic (vdotq_s32) is not
//! stable, so it is issued with `asm!` from functions compiled with
//! `#[target_feature(enable = "dotprod")]`; nothing outside them contains
//! it, and the guard has checked asimddp before any of them can run.
//!
//! The block dot is all this tier has of its own: the matvec and matmul
//! drivers, their loads and their scale step are the NEON tier's
//! (`aarch64::neon_matvec!`, `aarch64::neon_matmul!`), so the matvecs
//! perform the scalar kernel's float operations in its order (no FMA),
//! their results are bit-identical to the reference, and the matmuls'
//! to the matvecs'.

use std::arch::aarch64::*;
use std::arch::asm;

// The fallback chain: what this tier does not implement is NEON's.
pub use super::neon::{add, attn_mix, attn_scores, axpy_f32, dot_f32, quantize_q8, rmsnorm, rope, silu_mul, softmax};

pub const TIER: &str = "neon-dotprod";
/// HWCAP_ASIMD (the NEON tier's kernels are bound here too) and
/// HWCAP_ASIMDDP.
pub const REQUIRED_FEATURES: &[&str] = &["asimd", "asimddp"];

matvec_entry_points!();
super::aarch64::neon_matvec!(feature = "dotprod", block_dot = block_dot);
super::aarch64::neon_matmul!(feature = "dotprod", block_dot = block_dot);

/// acc + Σ over each group of four bytes of w·x, per int32 lane.
#[target_feature(enable = "dotprod")]
#[inline]
fn sdot(acc: int32x4_t, w: int8x16_t, x: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: sdot only reads and writes the three vector registers, and
    // this function's feature is FEAT_DotProd's.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {x:v}.16b",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            x = in(vreg) x,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    acc
}

/// Integer dot of a weight block with an activation block: four int32
/// partials whose sum is the block's sumi (exact: |sumi| ≤ 32·127²).
#[target_feature(enable = "dotprod")]
#[inline]
fn block_dot(w: [int8x16_t; 2], x: [int8x16_t; 2]) -> int32x4_t {
    sdot(sdot(vdupq_n_s32(0), w[0], x[0]), w[1], x[1])
}
