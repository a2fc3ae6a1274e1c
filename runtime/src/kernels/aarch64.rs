//! What the AArch64 tiers that compute in NEON registers (neon,
//! neon-dotprod) share around their integer block dot: the block loads, the
//! reduction of four rows' partials, the scale step, the matvec driver
//! (`neon_matvec!`) that runs them four rows at a time, and the tiled
//! matmul (`neon_matmul!`) that runs the same steps for several tokens per
//! loaded weight block. A tier supplies its
//! block dot, `fn(w: [int8x16_t; 2], x: [int8x16_t; 2]) -> int32x4_t`
//! (four int32 partials whose sum is the block's sumi), and its target
//! feature; nothing else differs.
//!
//! The pieces are kept apart so that a kernel with another loop order
//! (several activation rows per weight block: `neon_matmul!`) reuses them
//! as they are, and so stays bit-identical to the matvec:
//! `load_w` and `load_x` bring a block into registers, the tier's block dot
//! works on registers only, `hsum4_s32` reduces four of its results, and
//! `scale4` applies the scales, per block and in the scalar kernel's order.
//!
//! The SVE tier has its own (asm) drivers: its steps depend on the vector
//! length and do not fit 128-bit blocks.

use std::arch::aarch64::*;

use crate::core::quant::QK;

/// One weight block as 32 int8 in two vectors. Q4 nibbles are unpacked
/// (low nibbles are elements 0–15, high nibbles 16–31) and re-centred, so
/// both formats share one block dot.
///
/// # Safety
/// `p` is valid for one block's reads (32 bytes Q8, 16 bytes Q4).
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn load_w<const Q4: bool>(p: *const u8) -> [int8x16_t; 2] {
    // SAFETY: the caller's contract: p holds one block.
    unsafe {
        if Q4 {
            let packed = vld1q_u8(p);
            let eight = vdupq_n_s8(8);
            let lo = vreinterpretq_s8_u8(vandq_u8(packed, vdupq_n_u8(0x0F)));
            let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(packed));
            [vsubq_s8(lo, eight), vsubq_s8(hi, eight)]
        } else {
            [vld1q_s8(p.cast()), vld1q_s8(p.add(16).cast())]
        }
    }
}

/// Activation block `b` (32 int8) in two vectors.
///
/// # Safety
/// `xq` is valid for reads of blocks 0..=b (32·(b + 1) bytes).
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn load_x(xq: *const i8, b: usize) -> [int8x16_t; 2] {
    // SAFETY: the caller's contract: block b lies inside xq's buffer.
    unsafe { [vld1q_s8(xq.add(b * QK)), vld1q_s8(xq.add(b * QK + 16))] }
}

/// [Σa, Σb, Σc, Σd]: three pairwise adds.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn hsum4_s32(a: int32x4_t, b: int32x4_t, c: int32x4_t, d: int32x4_t) -> int32x4_t {
    vpaddq_s32(vpaddq_s32(a, b), vpaddq_s32(c, d))
}

/// Rows r..r+4's scales at block `b`, as a vector.
///
/// # Safety
/// Rows r..r+4 have scales at `wd[(r + j) · nb + b]`.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) unsafe fn row_scales(wd: *const f32, r: usize, nb: usize, b: usize) -> float32x4_t {
    // SAFETY: the caller's contract: the four scales are inside wd.
    unsafe {
        let s = [
            *wd.add(r * nb + b),
            *wd.add((r + 1) * nb + b),
            *wd.add((r + 2) * nb + b),
            *wd.add((r + 3) * nb + b),
        ];
        vld1q_f32(s.as_ptr())
    }
}

/// The scale step of one block for four rows: acc + sumi · dw · dx, lane by
/// lane, the scalar kernel's operations in its order (no FMA), so a row's
/// sum is bit-identical to the scalar kernel's.
#[target_feature(enable = "neon")]
#[inline]
pub(crate) fn scale4(acc: float32x4_t, sumi: int32x4_t, dw: float32x4_t, dx: f32) -> float32x4_t {
    vaddq_f32(acc, vmulq_n_f32(vmulq_f32(vcvtq_f32_s32(sumi), dw), dx))
}

/// The tier's `unsafe fn matvec<const Q4: bool>` (what
/// `matvec_entry_points!` calls) compiled with `#[target_feature(enable =
/// $feature)]` around the tier's block dot `$block_dot` (a safe function
/// with that feature, or one it implies): rows four at a time, each
/// activation block loaded once for all four, then a row-at-a-time tail.
/// Per row and block it adds `sumi · dw · dx` exactly as the scalar kernel
/// does (same operations, same order, no FMA), so the result is
/// bit-identical to it and a row does not depend on whether it fell in a
/// group or the tail.
macro_rules! neon_matvec {
    (feature = $feature:literal, block_dot = $block_dot:path) => {
        /// # Safety
        /// The CPU has the tier's features; `check_matvec` has accepted these
        /// arguments (every row, block and scale read lies inside the
        /// operands, and y holds r1 − r0 floats).
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $feature)]
        unsafe fn matvec<const Q4: bool>(
            y: *mut f32,
            wq: *const u8,
            wd: *const f32,
            x: &crate::core::tensor::QAct,
            nb: usize,
            stride: usize,
            r0: usize,
            r1: usize,
        ) {
            use super::aarch64::{hsum4_s32, load_w, load_x, row_scales, scale4};
            use std::arch::aarch64::*;
            let bb = if Q4 {
                crate::core::quant::Q4_BLOCK_BYTES
            } else {
                crate::core::quant::QK
            };
            let (xq, xd) = (x.q.as_ptr(), x.d.as_ptr());
            let mut r = r0;
            while r + 4 <= r1 {
                // SAFETY: rows r..r+4 < r1 were bounded by check_matvec.
                let row = |j: usize| unsafe { wq.add((r + j) * stride) };
                let mut acc = vdupq_n_f32(0.0);
                for b in 0..nb {
                    // SAFETY: rows r..r+4 < r1 and block b < nb were bounded
                    // by check_matvec, as were xq's and xd's nb blocks and
                    // y's r1 − r0 floats.
                    unsafe {
                        let xv = load_x(xq, b);
                        let sumi = hsum4_s32(
                            $block_dot(load_w::<Q4>(row(0).add(b * bb)), xv),
                            $block_dot(load_w::<Q4>(row(1).add(b * bb)), xv),
                            $block_dot(load_w::<Q4>(row(2).add(b * bb)), xv),
                            $block_dot(load_w::<Q4>(row(3).add(b * bb)), xv),
                        );
                        acc = scale4(acc, sumi, row_scales(wd, r, nb, b), *xd.add(b));
                    }
                }
                // SAFETY: as above.
                unsafe { vst1q_f32(y.add(r - r0), acc) };
                r += 4;
            }
            while r < r1 {
                let mut sum = 0.0f32;
                for b in 0..nb {
                    // SAFETY: as above, for row r < r1.
                    unsafe {
                        let w = load_w::<Q4>(wq.add(r * stride + b * bb));
                        let sumi = vaddvq_s32($block_dot(w, load_x(xq, b)));
                        sum += sumi as f32 * *wd.add(r * nb + b) * *xd.add(b);
                    }
                }
                // SAFETY: as above.
                unsafe { *y.add(r - r0) = sum };
                r += 1;
            }
        }
    };
}
pub(crate) use neon_matvec;

/// The tier's safe `matmul_q8` and `matmul_q4` and their register-tiled
/// driver, around the same `$block_dot` as `neon_matvec!`: rows in the
/// matvec's groups of four from r0, each group's tokens in tiles of four
/// (then one tile of the remaining three, two or one), then the matvec's
/// row-at-a-time tail with the same token tiles.
///
/// A weight block is loaded (and for Q4_0 unpacked) and its four rows'
/// scales gathered once per tile, and then used for each of the tile's
/// tokens; everything after the load is the matvec's, per token: the same
/// block dot, reduction and `scale4` into one accumulator per token, in
/// block order, and in the tail the same scalar `sumi · dw · dx`. So every
/// output is bit-identical to the matvec's for its row and token (batch
/// invariance, `kernels::scalar`), however the tokens and rows fall into
/// tiles. Four tokens keep the four rows' weights (eight vectors), four
/// accumulators and the block dots' temporaries within the 32 registers.
macro_rules! neon_matmul {
    (feature = $feature:literal, block_dot = $block_dot:path) => {
        tiled_matmul_entry_points!(matmul);

        /// # Safety
        /// The CPU has the tier's features; `scaffold::check_matmul_operands` has
        /// accepted these arguments and returned `nb`.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $feature)]
        unsafe fn matmul<const Q4: bool>(
            y: &mut [&mut [f32]],
            wq: *const u8,
            wd: *const f32,
            x: &crate::core::tensor::QActs,
            nb: usize,
            stride: usize,
            r0: usize,
            r1: usize,
        ) {
            // Token t's activations, as `QActs::token` cuts them.
            let (xq, xd) = (x.q.as_ptr(), x.d.as_ptr());
            let (xq_stride, xd_stride) = (x.cols, x.cols / crate::core::quant::QK);
            let mut r = r0;
            while r < r1 {
                let group = r + 4 <= r1;
                let mut t = 0;
                while t < x.n {
                    let tile = (x.n - t).min(4);
                    let mut yp = [std::ptr::null_mut::<f32>(); 4];
                    let mut xqp = [std::ptr::null::<i8>(); 4];
                    let mut xdp = [std::ptr::null::<f32>(); 4];
                    for j in 0..tile {
                        // SAFETY: token t + j < x.n: check_matmul_operands bounded its
                        // activations and its output row's r1 − r0 floats.
                        unsafe {
                            yp[j] = y[t + j].as_mut_ptr().add(r - r0);
                            xqp[j] = xq.add((t + j) * xq_stride);
                            xdp[j] = xd.add((t + j) * xd_stride);
                        }
                    }
                    // SAFETY: rows r..r+4 (a group) or row r (the tail) lie
                    // below r1, and the tile's `tile` tokens below x.n, all
                    // bounded by check_matmul_operands.
                    unsafe {
                        match (group, tile) {
                            (true, 4) => group_tile::<Q4, 4>(yp, xqp, xdp, wq, wd, nb, stride, r),
                            (true, 3) => group_tile::<Q4, 3>(yp, xqp, xdp, wq, wd, nb, stride, r),
                            (true, 2) => group_tile::<Q4, 2>(yp, xqp, xdp, wq, wd, nb, stride, r),
                            (true, _) => group_tile::<Q4, 1>(yp, xqp, xdp, wq, wd, nb, stride, r),
                            (false, 4) => row_tile::<Q4, 4>(yp, xqp, xdp, wq, wd, nb, stride, r),
                            (false, 3) => row_tile::<Q4, 3>(yp, xqp, xdp, wq, wd, nb, stride, r),
                            (false, 2) => row_tile::<Q4, 2>(yp, xqp, xdp, wq, wd, nb, stride, r),
                            (false, _) => row_tile::<Q4, 1>(yp, xqp, xdp, wq, wd, nb, stride, r),
                        }
                    }
                    t += tile;
                }
                r += if group { 4 } else { 1 };
            }
        }

        /// Rows r..r+4 for the first T tokens of the tile: the matvec's
        /// group loop with the weights loaded once for all T.
        ///
        /// # Safety
        /// As `matmul`; rows r..r+4 are inside the weights, and for j < T,
        /// `xq[j]`/`xd[j]` hold nb blocks and `y[j]` four floats.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $feature)]
        #[inline]
        unsafe fn group_tile<const Q4: bool, const T: usize>(
            y: [*mut f32; 4],
            xq: [*const i8; 4],
            xd: [*const f32; 4],
            wq: *const u8,
            wd: *const f32,
            nb: usize,
            stride: usize,
            r: usize,
        ) {
            use super::aarch64::{hsum4_s32, load_w, load_x, row_scales, scale4};
            use std::arch::aarch64::*;
            let bb = if Q4 {
                crate::core::quant::Q4_BLOCK_BYTES
            } else {
                crate::core::quant::QK
            };
            // SAFETY: the caller's contract bounds every pointer below.
            unsafe {
                let rows = [
                    wq.add(r * stride),
                    wq.add((r + 1) * stride),
                    wq.add((r + 2) * stride),
                    wq.add((r + 3) * stride),
                ];
                let mut acc = [vdupq_n_f32(0.0); T];
                for b in 0..nb {
                    let w0 = load_w::<Q4>(rows[0].add(b * bb));
                    let w1 = load_w::<Q4>(rows[1].add(b * bb));
                    let w2 = load_w::<Q4>(rows[2].add(b * bb));
                    let w3 = load_w::<Q4>(rows[3].add(b * bb));
                    let dw = row_scales(wd, r, nb, b);
                    for j in 0..T {
                        let xv = load_x(xq[j], b);
                        let sumi = hsum4_s32(
                            $block_dot(w0, xv),
                            $block_dot(w1, xv),
                            $block_dot(w2, xv),
                            $block_dot(w3, xv),
                        );
                        acc[j] = scale4(acc[j], sumi, dw, *xd[j].add(b));
                    }
                }
                for j in 0..T {
                    vst1q_f32(y[j], acc[j]);
                }
            }
        }

        /// Row r alone for the first T tokens of the tile: the matvec's
        /// tail loop with the weight block loaded once for all T.
        ///
        /// # Safety
        /// As `group_tile`, for row r and one float of each `y[j]`.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $feature)]
        #[inline]
        unsafe fn row_tile<const Q4: bool, const T: usize>(
            y: [*mut f32; 4],
            xq: [*const i8; 4],
            xd: [*const f32; 4],
            wq: *const u8,
            wd: *const f32,
            nb: usize,
            stride: usize,
            r: usize,
        ) {
            use super::aarch64::{load_w, load_x};
            use std::arch::aarch64::*;
            let bb = if Q4 {
                crate::core::quant::Q4_BLOCK_BYTES
            } else {
                crate::core::quant::QK
            };
            // SAFETY: the caller's contract bounds every pointer below.
            unsafe {
                let mut sum = [0.0f32; T];
                for b in 0..nb {
                    let w = load_w::<Q4>(wq.add(r * stride + b * bb));
                    let dw = *wd.add(r * nb + b);
                    for j in 0..T {
                        let sumi = vaddvq_s32($block_dot(w, load_x(xq[j], b)));
                        sum[j] += sumi as f32 * dw * *xd[j].add(b);
                    }
                }
                for j in 0..T {
                    *y[j] = sum[j];
                }
            }
        }
    };
}
pub(crate) use neon_matmul;
