//! NEON dot-product tier (ARMv8.2 FEAT_DotProd; AArch64 only): Cortex-A55,
//! A75, A76, Neoverse N1 and later. Implements the two matvecs; everything
//! else is the NEON tier's, since dotprod only adds integer dot products.
//!
//! Integer dot (spec §5): `sdot v.4s, w.16b, x.16b` multiplies four int8
//! pairs and adds them into each int32 lane in one instruction, replacing
//! NEON's vmull/vmlal/vpadal sequence. Its intrinsic (vdotq_s32) is not
//! stable, so it is issued with `asm!` from functions compiled with
//! `#[target_feature(enable = "dotprod")]`; nothing outside them contains
//! it, and the guard has checked asimddp before any of them can run.
//!
//! The matvecs perform the scalar kernel's float operations in its order
//! (no FMA), so their results are bit-identical to the reference.

use std::arch::aarch64::*;
use std::arch::asm;

use super::neon::{hsum4_s32, load_w, row_scales};
use crate::core::quant::{Q4_BLOCK_BYTES, QK};
use crate::core::tensor::QAct;

// The fallback chain: what this tier does not implement is NEON's.
pub use super::neon::{add, attn_mix, attn_scores, axpy_f32, dot_f32, quantize_q8, rmsnorm, rope, silu_mul, softmax};

pub const TIER: &str = "neon-dotprod";
/// HWCAP_ASIMD (the NEON tier's kernels are bound here too) and
/// HWCAP_ASIMDDP.
pub const REQUIRED_FEATURES: &[&str] = &["asimd", "asimddp"];
/// Kernels this module implements itself.
pub const PROVIDES: &[&str] = &["matvec_q8", "matvec_q4"];

matvec_entry_points!();

/// acc + Σ over each group of four bytes of w·x, per int32 lane.
///
/// Safety: the CPU has FEAT_DotProd.
#[target_feature(enable = "dotprod")]
#[inline]
unsafe fn sdot(acc: int32x4_t, w: int8x16_t, x: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: sdot only reads and writes the three vector registers.
    asm!(
        "sdot {acc:v}.4s, {w:v}.16b, {x:v}.16b",
        acc = inout(vreg) acc,
        w = in(vreg) w,
        x = in(vreg) x,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}

/// Integer dot of a weight block with an activation block: four int32
/// partials whose sum is the block's sumi (exact: |sumi| ≤ 32·127²).
#[target_feature(enable = "dotprod")]
#[inline]
unsafe fn block_dot(w: [int8x16_t; 2], x: [int8x16_t; 2]) -> int32x4_t {
    sdot(sdot(vdupq_n_s32(0), w[0], x[0]), w[1], x[1])
}

/// Rows four at a time, each activation block loaded once for all four,
/// then a row-at-a-time tail. Per row and block it adds `sumi · dw · dx`
/// exactly as the scalar kernel does, so the result is bit-identical to it.
///
/// Safety: FEAT_DotProd; `check_matvec` has accepted these arguments.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "dotprod")]
unsafe fn matvec<const Q4: bool>(
    y: *mut f32,
    wq: *const u8,
    wd: *const f32,
    x: &QAct,
    nb: usize,
    stride: usize,
    r0: usize,
    r1: usize,
) {
    let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
    let (xq, xd) = (x.q.as_ptr(), x.d.as_ptr());
    let load_x = |b: usize| [vld1q_s8(xq.add(b * QK)), vld1q_s8(xq.add(b * QK + 16))];
    let mut r = r0;
    while r + 4 <= r1 {
        let row = |j: usize| wq.add((r + j) * stride);
        let mut acc = vdupq_n_f32(0.0);
        for b in 0..nb {
            let xv = load_x(b);
            let sumi = hsum4_s32(
                block_dot(load_w::<Q4>(row(0).add(b * bb)), xv),
                block_dot(load_w::<Q4>(row(1).add(b * bb)), xv),
                block_dot(load_w::<Q4>(row(2).add(b * bb)), xv),
                block_dot(load_w::<Q4>(row(3).add(b * bb)), xv),
            );
            let t = vmulq_n_f32(vmulq_f32(vcvtq_f32_s32(sumi), row_scales(wd, r, nb, b)), *xd.add(b));
            acc = vaddq_f32(acc, t);
        }
        vst1q_f32(y.add(r - r0), acc);
        r += 4;
    }
    while r < r1 {
        let row = wq.add(r * stride);
        let mut sum = 0.0f32;
        for b in 0..nb {
            let sumi = vaddvq_s32(block_dot(load_w::<Q4>(row.add(b * bb)), load_x(b)));
            sum += sumi as f32 * *wd.add(r * nb + b) * *xd.add(b);
        }
        *y.add(r - r0) = sum;
        r += 1;
    }
}
