//! SVE tier (AArch64 only): A64FX, Graviton3, Neoverse V1/N2/V2 and later.
//! Implements the two matvecs, vector-length agnostic; everything else is
//! the NEON tier's (bound, not re-implemented: the float kernels are
//! load-bound at the model's sizes).
//!
//! This tier deliberately does not use the neon_dotprod module: SVE does
//! not imply FEAT_DotProd (qemu's a64fx model has SVE without it), and
//! SVE's own `sdot z.s, z.b, z.b` is part of base SVE. So the guard checks
//! asimd and sve only.
//!
//! SVE has no stable intrinsics: each step is one `asm!` block inside a
//! function compiled with `#[target_feature(enable = "sve")]`. The blocks
//! use z0–z7, z16–z27 (declared through their overlapping v registers) and
//! p0–p3 as clobbers; the four row sums live in v28–v31.
//!
//! Integer dot (spec §5), per step of G = max(1, VL/256) blocks and four
//! rows:
//! 1. a `whilelt` loop over the step's 32·G bytes, one vector of bytes per
//!    iteration (two iterations at VL = 128, one at VL ≥ 256), loads each
//!    activation chunk once and `sdot`s it with each row's chunk into that
//!    row's int32 accumulator: lane i holds bytes 4i..4i+4 (at VL = 128 the
//!    second half-block adds onto the first);
//! 2. three rounds of `uzp1`/`uzp2` against a zero vector add lanes 2k and
//!    2k+1 into lane k, so lane k ends up holding block k's int32 sum at
//!    every vector length: blocks start at multiples of 8 lanes, inactive
//!    bytes were loaded as zeros, and the zero operand fills the upper half
//!    (uzp of a vector with itself would repeat it, and at VL = 128, where 4
//!    lanes already hold a whole block, the third round would double it);
//! 3. the block sums are converted, multiplied by the row's and the
//!    activation's block scales (`ld1w` under a `whilelt` over G blocks) and
//!    added to the row sum with `fadda`, which adds the lanes strictly in
//!    order: the scalar kernel's `sum += sumi · dw · dx`, block after block.
//!
//! So every result is bit-identical to the scalar kernel's at every vector
//! length, and a row never depends on the step size or on its neighbours.
//! Q4 weights are unpacked in-register: `tbl` gathers each output byte's
//! packed byte, a per-lane shift (0 or 4) picks its nibble, then & 0x0F − 8.
//!
//! Rows come four at a time; a last group of one to three rows runs the
//! same four-row step with its last row repeated in the spare slots (and
//! stores only its own rows), so there is no separate tail code to drift.
//!
//! Cost, unmeasured (qemu timings are functional only): the reduction is
//! nine instructions per row and step whatever G is, so it is amortised over
//! 2 blocks at VL = 512 (A64FX) and 8 at 2048, but not at VL = 256
//! (Graviton3), where a per-block `saddv` would be cheaper. That is a
//! tuning choice to make on real hardware; correctness does not depend on it.

use std::arch::asm;

use crate::core::quant::{Q4_BLOCK_BYTES, QK};
use crate::core::tensor::{QAct, QTensor};

// The fallback chain, skipping neon_dotprod (see above): the rest is NEON's.
pub use super::neon::{add, attn_mix, attn_scores, axpy_f32, dot_f32, quantize_q8, rmsnorm, rope, silu_mul, softmax};

pub const TIER: &str = "sve";
/// HWCAP_ASIMD (the NEON tier's kernels are bound here) and HWCAP_SVE.
/// Not asimddp: see the module comment.
pub const REQUIRED_FEATURES: &[&str] = &["asimd", "sve"];
/// Kernels this module implements itself.
pub const PROVIDES: &[&str] = &["matvec_q8", "matvec_q4"];

pub fn matvec_q8(y: &mut [f32], w: &QTensor, x: &QAct, r0: usize, r1: usize) {
    let nb = super::check_matvec(y, w, x, r0, r1, w.cols, QK);
    // SAFETY: SVE is verified by the guard; check_matvec bounded every row,
    // block and scale the loop touches.
    unsafe { matvec::<false>(y.as_mut_ptr(), w.q.as_ptr(), w.d.as_ptr(), x, nb, w.cols, r0, r1) }
}

pub fn matvec_q4(y: &mut [f32], w: &QTensor, x: &QAct, r0: usize, r1: usize) {
    let nb = super::check_matvec(y, w, x, r0, r1, w.row_bytes(), Q4_BLOCK_BYTES);
    // SAFETY: as in matvec_q8, with Q4's row stride and block size.
    unsafe { matvec::<true>(y.as_mut_ptr(), w.q.as_ptr(), w.d.as_ptr(), x, nb, w.row_bytes(), r0, r1) }
}

/// The vector length in bytes (16 to 256).
///
/// # Safety
/// The CPU must have SVE (the guard of this build checks it).
#[target_feature(enable = "sve")]
pub unsafe fn vector_bytes() -> usize {
    let n: usize;
    // SAFETY: cntb only reads the vector length.
    asm!("cntb {n}", n = out(reg) n, options(pure, nomem, nostack, preserves_flags));
    n
}

/// Rows four at a time; each step covers G blocks (as many as one vector
/// holds, at least one). A last group of fewer than four rows repeats its
/// last row in the unused slots and stores only its own rows, so it runs the
/// same code as every other group.
///
/// Safety: SVE; `check_matvec` has accepted these arguments.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "sve")]
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
    let g = (vector_bytes() / QK).max(1);
    let (xq, xd) = (x.q.as_ptr(), x.d.as_ptr());
    let mut r = r0;
    while r < r1 {
        let rows = (r1 - r).min(4);
        // Row j of the group, or the group's last row for the unused slots.
        let row = |j: usize| r + j.min(rows - 1);
        let mut sums = [0.0f32; 4];
        let mut b0 = 0;
        while b0 < nb {
            let gb = g.min(nb - b0);
            let step = Step {
                x: xq.add(b0 * QK),
                w: std::array::from_fn(|j| wq.add(row(j) * stride + b0 * bb)),
                sx: xd.add(b0),
                sw: std::array::from_fn(|j| wd.add(row(j) * nb + b0)),
                blocks: gb,
            };
            if Q4 {
                step_q4(&step, &mut sums);
            } else {
                step_q8(&step, &mut sums);
            }
            b0 += gb;
        }
        for (j, &s) in sums.iter().enumerate().take(rows) {
            *y.add(r - r0 + j) = s;
        }
        r += rows;
    }
}

/// One step's operands: `blocks` (1 ≤ blocks ≤ G) blocks of the activation
/// and of four weight rows, with their scales.
struct Step {
    x: *const i8,
    w: [*const u8; 4],
    sx: *const f32,
    sw: [*const f32; 4],
    blocks: usize,
}

// Steps 2 and 3 of the module comment, as asm text shared by both formats.
// z23 is zero, z24/z25 scratch, z26 the activation scales, p0 all-true, p3
// the step's blocks.

/// Lane k of `$z` ← block k's int32 sum (three rounds of adjacent adds).
macro_rules! block_sums {
    ($z:literal) => {
        concat!(
            "uzp1 z24.s, ",
            $z,
            ".s, z23.s\n",
            "uzp2 z25.s, ",
            $z,
            ".s, z23.s\n",
            "add ",
            $z,
            ".s, z24.s, z25.s\n",
            "uzp1 z24.s, ",
            $z,
            ".s, z23.s\n",
            "uzp2 z25.s, ",
            $z,
            ".s, z23.s\n",
            "add ",
            $z,
            ".s, z24.s, z25.s\n",
            "uzp1 z24.s, ",
            $z,
            ".s, z23.s\n",
            "uzp2 z25.s, ",
            $z,
            ".s, z23.s\n",
            "add ",
            $z,
            ".s, z24.s, z25.s\n",
        )
    };
}

/// `$s` += Σ_k (float(sumi_k) · dw_k) · dx_k, in block order.
macro_rules! scale_add {
    ($z:literal, $sw:literal, $s:literal) => {
        concat!(
            "scvtf ",
            $z,
            ".s, p0/m, ",
            $z,
            ".s\n",
            "ld1w {{z24.s}}, p3/z, [{",
            $sw,
            "}]\n",
            "fmul ",
            $z,
            ".s, ",
            $z,
            ".s, z24.s\n",
            "fmul ",
            $z,
            ".s, ",
            $z,
            ".s, z26.s\n",
            "fadda ",
            $s,
            ", p3, ",
            $s,
            ", ",
            $z,
            ".s\n",
        )
    };
}

macro_rules! finish_step {
    () => {
        concat!(
            block_sums!("z16"),
            block_sums!("z17"),
            block_sums!("z18"),
            block_sums!("z19"),
            "whilelt p3.s, xzr, {blocks}\n",
            "ld1w {{z26.s}}, p3/z, [{sx}]\n",
            scale_add!("z16", "sw0", "s28"),
            scale_add!("z17", "sw1", "s29"),
            scale_add!("z18", "sw2", "s30"),
            scale_add!("z19", "sw3", "s31"),
        )
    };
}

/// Q8_0 step: the weight chunks are loaded as they are.
///
/// Safety: SVE; the step's pointers are valid for its blocks.
#[target_feature(enable = "sve")]
unsafe fn step_q8(s: &Step, sums: &mut [f32; 4]) {
    let [mut a, mut b, mut c, mut d] = *sums;
    // SAFETY: reads 32·blocks bytes at x and at each w[j], and `blocks`
    // scales at sx and each sw[j] (predicated: nothing beyond); writes only
    // the declared registers.
    asm!(
        "ptrue p0.b",
        "mov z23.s, #0",
        "mov z16.s, #0",
        "mov z17.s, #0",
        "mov z18.s, #0",
        "mov z19.s, #0",
        "mov {off}, #0",
        "2:",
        "whilelt p1.b, {off}, {nbytes}",
        "ld1b {{z0.b}}, p1/z, [{x}, {off}]",
        "ld1b {{z1.b}}, p1/z, [{w0}, {off}]",
        "ld1b {{z2.b}}, p1/z, [{w1}, {off}]",
        "ld1b {{z3.b}}, p1/z, [{w2}, {off}]",
        "ld1b {{z4.b}}, p1/z, [{w3}, {off}]",
        "sdot z16.s, z1.b, z0.b",
        "sdot z17.s, z2.b, z0.b",
        "sdot z18.s, z3.b, z0.b",
        "sdot z19.s, z4.b, z0.b",
        "incb {off}",
        "cmp {off}, {nbytes}",
        "b.lo 2b",
        finish_step!(),
        x = in(reg) s.x,
        w0 = in(reg) s.w[0],
        w1 = in(reg) s.w[1],
        w2 = in(reg) s.w[2],
        w3 = in(reg) s.w[3],
        sx = in(reg) s.sx,
        sw0 = in(reg) s.sw[0],
        sw1 = in(reg) s.sw[1],
        sw2 = in(reg) s.sw[2],
        sw3 = in(reg) s.sw[3],
        nbytes = in(reg) s.blocks * QK,
        blocks = in(reg) s.blocks,
        off = out(reg) _,
        inout("v28") a,
        inout("v29") b,
        inout("v30") c,
        inout("v31") d,
        out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
        out("v16") _, out("v17") _, out("v18") _, out("v19") _,
        out("v23") _, out("v24") _, out("v25") _, out("v26") _,
        out("p0") _, out("p1") _, out("p3") _,
        options(readonly, nostack)
    );
    *sums = [a, b, c, d];
}

/// Q4_0 step: each row's 16·blocks packed bytes are loaded once; every
/// chunk of output bytes j = off + lane takes packed byte 16·(j / 32) +
/// j % 16, shifted right by 4 when j % 32 ≥ 16 (the high nibbles are
/// elements 16–31), then & 0x0F − 8.
///
/// Safety: SVE; the step's pointers are valid for its blocks.
#[target_feature(enable = "sve")]
unsafe fn step_q4(s: &Step, sums: &mut [f32; 4]) {
    let [mut a, mut b, mut c, mut d] = *sums;
    // SAFETY: reads 32·blocks bytes at x, 16·blocks bytes at each w[j], and
    // `blocks` scales at sx and each sw[j] (predicated: nothing beyond);
    // writes only the declared registers.
    asm!(
        "ptrue p0.b",
        "mov z23.s, #0",
        "mov z16.s, #0",
        "mov z17.s, #0",
        "mov z18.s, #0",
        "mov z19.s, #0",
        "whilelt p2.b, xzr, {pbytes}",
        "ld1b {{z1.b}}, p2/z, [{w0}]",
        "ld1b {{z2.b}}, p2/z, [{w1}]",
        "ld1b {{z3.b}}, p2/z, [{w2}]",
        "ld1b {{z4.b}}, p2/z, [{w3}]",
        "mov {off}, #0",
        "2:",
        "whilelt p1.b, {off}, {nbytes}",
        "ld1b {{z0.b}}, p1/z, [{x}, {off}]",
        // z21 = tbl index, z22 = nibble shift, for j = off + lane.
        "index z20.b, {off:w}, #1",
        "lsr z21.b, z20.b, #5",
        "lsl z21.b, z21.b, #4",
        "mov z22.d, z20.d",
        "and z22.b, z22.b, #15",
        "orr z21.d, z21.d, z22.d",
        "mov z22.d, z20.d",
        "and z22.b, z22.b, #16",
        "lsr z22.b, z22.b, #2",
        "tbl z5.b, {{z1.b}}, z21.b",
        "tbl z6.b, {{z2.b}}, z21.b",
        "tbl z7.b, {{z3.b}}, z21.b",
        "tbl z27.b, {{z4.b}}, z21.b",
        "lsr z5.b, p0/m, z5.b, z22.b",
        "lsr z6.b, p0/m, z6.b, z22.b",
        "lsr z7.b, p0/m, z7.b, z22.b",
        "lsr z27.b, p0/m, z27.b, z22.b",
        "and z5.b, z5.b, #15",
        "and z6.b, z6.b, #15",
        "and z7.b, z7.b, #15",
        "and z27.b, z27.b, #15",
        "sub z5.b, z5.b, #8",
        "sub z6.b, z6.b, #8",
        "sub z7.b, z7.b, #8",
        "sub z27.b, z27.b, #8",
        // Lanes past the step's bytes multiply a zero activation.
        "sdot z16.s, z5.b, z0.b",
        "sdot z17.s, z6.b, z0.b",
        "sdot z18.s, z7.b, z0.b",
        "sdot z19.s, z27.b, z0.b",
        "incb {off}",
        "cmp {off}, {nbytes}",
        "b.lo 2b",
        finish_step!(),
        x = in(reg) s.x,
        w0 = in(reg) s.w[0],
        w1 = in(reg) s.w[1],
        w2 = in(reg) s.w[2],
        w3 = in(reg) s.w[3],
        sx = in(reg) s.sx,
        sw0 = in(reg) s.sw[0],
        sw1 = in(reg) s.sw[1],
        sw2 = in(reg) s.sw[2],
        sw3 = in(reg) s.sw[3],
        nbytes = in(reg) s.blocks * QK,
        pbytes = in(reg) s.blocks * Q4_BLOCK_BYTES,
        blocks = in(reg) s.blocks,
        off = out(reg) _,
        inout("v28") a,
        inout("v29") b,
        inout("v30") c,
        inout("v31") d,
        out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
        out("v5") _, out("v6") _, out("v7") _,
        out("v16") _, out("v17") _, out("v18") _, out("v19") _,
        out("v20") _, out("v21") _, out("v22") _, out("v23") _,
        out("v24") _, out("v25") _, out("v26") _, out("v27") _,
        out("p0") _, out("p1") _, out("p2") _, out("p3") _,
        options(readonly, nostack)
    );
    *sums = [a, b, c, d];
}
