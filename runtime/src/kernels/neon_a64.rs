//! NEON tier on AArch64 (`kernels::neon` when the target is aarch64; the
//! ARMv7 NEON tier is `neon_v7.rs`). Advanced SIMD is part of every AArch64
//! CPU and of the aarch64 targets' baseline, so this build runs on all of
//! them, Cortex-A53 up. Implements all twelve kernels with 128-bit vectors and
//! the stable `core::arch::aarch64` intrinsics.
//!
//! Integer dot (DESIGN.md §5): vmull_s8 widens eight int8 products to int16,
//! vmlal_s8 adds a second product into each lane, vpadalq_s16 folds the
//! int16 pairs into int32 lanes. Two products per int16 lane are at most
//! 2·127² = 32258, below i16::MAX, because quants are clamped to ±127 (the
//! loader rejects −128, the quantizer never makes it).
//!
//! Every kernel without a reduction (matvec, quantize_q8, rope, add,
//! axpy_f32) performs the scalar kernel's float operations in the scalar
//! kernel's order, with no FMA, so its results are bit-identical to the
//! reference (AArch64 SIMD float arithmetic is IEEE, subnormals included).
//! exp (polynomial, FMA) and the reordered sums (dot_f32, rmsnorm, softmax)
//! differ within DESIGN.md §7.
//!
//! Every intrinsic lives in a `#[target_feature(enable = "neon")]` function
//! (NEON is the aarch64 targets' baseline, so this only meets the
//! intrinsics' safety contract); the safe wrappers check slice bounds first.

use std::arch::aarch64::*;

use crate::core::quant::QK;

pub const TIER: &str = "neon";
/// HWCAP_ASIMD. Baseline on AArch64, checked anyway so the guard's list is
/// the tier's whole requirement.
pub const REQUIRED_FEATURES: &[&str] = &["asimd"];
// ---------------------------------------------------------------------------
// Integer path: matvec_q8, matvec_q4

matvec_entry_points!();
super::aarch64::neon_matvec!(feature = "neon", block_dot = block_dot);
super::aarch64::neon_matmul!(feature = "neon", block_dot = block_dot);

/// Integer dot of a weight block with an activation block: four int32
/// partials whose sum is the block's sumi.
#[target_feature(enable = "neon")]
#[inline]
fn block_dot(w: [int8x16_t; 2], x: [int8x16_t; 2]) -> int32x4_t {
    // Elements i and i + 16 share an int16 lane: |w·x + w'·x'| ≤ 2·127².
    let lo = vmlal_s8(
        vmull_s8(vget_low_s8(w[0]), vget_low_s8(x[0])),
        vget_low_s8(w[1]),
        vget_low_s8(x[1]),
    );
    let hi = vmlal_high_s8(vmull_high_s8(w[0], x[0]), w[1], x[1]);
    vpadalq_s16(vpaddlq_s16(lo), hi)
}

// ---------------------------------------------------------------------------
// quantize_q8

pub fn quantize_q8(q: &mut [i8], d: &mut [f32], x: &[f32]) {
    // As the scalar kernel's zip: whole blocks that all three slices hold.
    let blocks = (x.len() / QK).min(q.len() / QK).min(d.len());
    for b in 0..blocks {
        let (xb, qb) = (&x[b * QK..(b + 1) * QK], &mut q[b * QK..(b + 1) * QK]);
        // SAFETY: both slices are exactly QK long.
        d[b] = unsafe { quantize_block(qb.as_mut_ptr(), xb.as_ptr()) };
    }
}

/// One block, bit-identical to `quant::quantize_block_q8` for every input
/// (NaN and infinities included):
/// * amax: fmaxnm ignores a quiet NaN as `f32::max` does (which compiles to
///   the same instruction), and max is order-independent otherwise;
/// * d and id: the same scalar operations;
/// * q = trunc(x·id + copysign(0.5, x)), a separate multiply and add;
///   fcvtzs truncates, saturates and maps NaN to 0 as `as` does, and the
///   clamp to ±127 in integers equals the scalar clamp in floats.
///
/// # Safety
/// `q` and `x` are valid for QK elements.
#[target_feature(enable = "neon")]
unsafe fn quantize_block(q: *mut i8, x: *const f32) -> f32 {
    // SAFETY: the contract above (# Safety) bounds every pointer this
    // body reads or writes, and the CPU has the function's features.
    unsafe {
        let v: [float32x4_t; 8] = std::array::from_fn(|i| vld1q_f32(x.add(4 * i)));
        let mut m = vdupq_n_f32(0.0);
        for &vi in &v {
            m = vmaxnmq_f32(m, vabsq_f32(vi));
        }
        let amax = vmaxnmvq_f32(m);
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };

        let sign = vdupq_n_u32(0x8000_0000);
        let half = vreinterpretq_u32_f32(vdupq_n_f32(0.5));
        let (lo, hi) = (vdupq_n_s32(-127), vdupq_n_s32(127));
        let qi: [int32x4_t; 8] = std::array::from_fn(|i| {
            let bits = vreinterpretq_u32_f32(v[i]);
            let rnd = vreinterpretq_f32_u32(vorrq_u32(vandq_u32(bits, sign), half));
            let r = vaddq_f32(vmulq_n_f32(v[i], id), rnd);
            vmaxq_s32(vminq_s32(vcvtq_s32_f32(r), hi), lo)
        });
        // In range already, so the saturating narrows only narrow.
        let h: [int16x8_t; 4] = std::array::from_fn(|i| vcombine_s16(vqmovn_s32(qi[2 * i]), vqmovn_s32(qi[2 * i + 1])));
        vst1q_s8(q, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
        vst1q_s8(q.add(16), vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])));
        d
    }
}

// ---------------------------------------------------------------------------
// exp, for softmax and silu

/// e^x for four lanes: Cephes expf. n = round(x/ln2), r = x − n·ln2 in two
/// FMA steps (Cody–Waite), e^r = 1 + r + r²·P(r) with P of degree 5 on
/// |r| ≤ ln2/2, then ·2ⁿ. Relative error ≈ 2e-7 on [-88, 88] (tests hold
/// it to 1e-6 against f64).
///
/// 2ⁿ is applied as 2^⌊n/2⌋ · 2^(n−⌊n/2⌋) so that results in the subnormal
/// range (x < −87.3) and up to the overflow edge are right: each factor is a
/// normal float for every n the clamp allows.
#[target_feature(enable = "neon")]
#[inline]
fn exp_ps(x: float32x4_t) -> float32x4_t {
    let x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(EXP_LO)), vdupq_n_f32(EXP_HI));
    // fcvtns: round to nearest, ties to even, like cvtps2dq.
    let n = vcvtnq_s32_f32(vmulq_n_f32(x, std::f32::consts::LOG2_E));
    let nf = vcvtq_f32_s32(n);
    let r = vfmsq_n_f32(x, nf, LN2_HI);
    let r = vfmsq_n_f32(r, nf, LN2_LO);
    let mut p = vdupq_n_f32(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = vfmaq_f32(vdupq_n_f32(c), p, r);
    }
    let e = vaddq_f32(vfmaq_f32(r, vmulq_f32(p, r), r), vdupq_n_f32(1.0));
    let n1 = vshrq_n_s32::<1>(n);
    let n2 = vsubq_s32(n, n1);
    let pow2 = |k: int32x4_t| vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(k, vdupq_n_s32(127))));
    vmulq_f32(vmulq_f32(e, pow2(n1)), pow2(n2))
}

use super::exp_poly::{EXP_HI, EXP_LO, EXP_POLY, LN2_HI, LN2_LO};

/// e^x of each element, in place: the polynomial the float kernels use,
/// exposed so the tests can hold it to DESIGN.md §5's 1e-6.
#[doc(hidden)]
pub fn exp_in_place(v: &mut [f32]) {
    for c in v.chunks_mut(4) {
        let mut buf = [0.0f32; 4];
        buf[..c.len()].copy_from_slice(c);
        // SAFETY: buf holds four floats.
        unsafe { vst1q_f32(buf.as_mut_ptr(), exp_ps(vld1q_f32(buf.as_ptr()))) };
        c.copy_from_slice(&buf[..c.len()]);
    }
}

// ---------------------------------------------------------------------------
// Float kernels

/// Σ a[i]·b[i] over n elements: four FMA accumulators to hide its latency.
///
/// # Safety
/// `a` and `b` valid for n reads.
#[target_feature(enable = "neon")]
unsafe fn dot(a: *const f32, b: *const f32, n: usize) -> f32 {
    // SAFETY: the contract above (# Safety) bounds every pointer this
    // body reads or writes, and the CPU has the function's features.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (j, s) in acc.iter_mut().enumerate() {
                let k = i + 4 * j;
                *s = vfmaq_f32(*s, vld1q_f32(a.add(k)), vld1q_f32(b.add(k)));
            }
            i += 16;
        }
        while i + 4 <= n {
            acc[0] = vfmaq_f32(acc[0], vld1q_f32(a.add(i)), vld1q_f32(b.add(i)));
            i += 4;
        }
        let mut sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
        while i < n {
            sum = (*a.add(i)).mul_add(*b.add(i), sum);
            i += 1;
        }
        sum
    }
}

pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: both slices hold n elements.
    unsafe { dot(a.as_ptr(), b.as_ptr(), n) }
}

/// o = x / sqrt(mean(x²) + eps) · w
pub fn rmsnorm(o: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
    // SAFETY: x holds x.len() elements.
    let ss = unsafe { dot(x.as_ptr(), x.as_ptr(), x.len()) } / x.len() as f32;
    let scale = 1.0 / (ss + eps).sqrt();
    let n = o.len().min(x.len()).min(w.len());
    // SAFETY: all three slices hold n elements.
    unsafe { scale_mul(o.as_mut_ptr(), x.as_ptr(), w.as_ptr(), scale, n) }
}

/// o[i] = w[i] · (scale · x[i]), the scalar kernel's order.
///
/// # Safety
/// pointers valid for n elements.
#[target_feature(enable = "neon")]
unsafe fn scale_mul(o: *mut f32, x: *const f32, w: *const f32, scale: f32, n: usize) {
    // SAFETY: the contract above (# Safety) bounds every pointer this
    // body reads or writes, and the CPU has the function's features.
    unsafe {
        let mut i = 0;
        while i + 4 <= n {
            let v = vmulq_f32(vld1q_f32(w.add(i)), vmulq_n_f32(vld1q_f32(x.add(i)), scale));
            vst1q_f32(o.add(i), v);
            i += 4;
        }
        while i < n {
            *o.add(i) = *w.add(i) * (scale * *x.add(i));
            i += 1;
        }
    }
}

/// In-place softmax, shifted by the maximum for stability.
pub fn softmax(x: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    // SAFETY: pointer and length are x's.
    unsafe { softmax_neon(x.as_mut_ptr(), x.len()) }
}

/// # Safety
/// `x` valid for n ≥ 1 elements.
#[target_feature(enable = "neon")]
unsafe fn softmax_neon(x: *mut f32, n: usize) {
    // SAFETY: the contract above (# Safety) bounds every pointer this
    // body reads or writes, and the CPU has the function's features.
    unsafe {
        // fmaxnm skips NaN as the scalar kernel's f32::max does.
        let mut m = vdupq_n_f32(f32::NEG_INFINITY);
        let mut i = 0;
        while i + 4 <= n {
            m = vmaxnmq_f32(vld1q_f32(x.add(i)), m);
            i += 4;
        }
        let mut max = vmaxnmvq_f32(m);
        for j in i..n {
            max = max.max(*x.add(j));
        }

        let mv = vdupq_n_f32(max);
        let mut acc = vdupq_n_f32(0.0);
        let mut i = 0;
        while i + 4 <= n {
            let e = exp_ps(vsubq_f32(vld1q_f32(x.add(i)), mv));
            vst1q_f32(x.add(i), e);
            acc = vaddq_f32(acc, e);
            i += 4;
        }
        let mut sum = vaddvq_f32(acc);
        if i < n {
            // Padding lanes are computed but neither stored nor summed.
            let mut buf = [0.0f32; 4];
            for (j, v) in buf.iter_mut().enumerate().take(n - i) {
                *v = *x.add(i + j) - max;
            }
            vst1q_f32(buf.as_mut_ptr(), exp_ps(vld1q_f32(buf.as_ptr())));
            for (j, &v) in buf.iter().enumerate().take(n - i) {
                *x.add(i + j) = v;
                sum += v;
            }
        }

        // Divide, as the scalar kernel does, rather than multiply by 1/sum.
        let sv = vdupq_n_f32(sum);
        let mut i = 0;
        while i + 4 <= n {
            vst1q_f32(x.add(i), vdivq_f32(vld1q_f32(x.add(i)), sv));
            i += 4;
        }
        for j in i..n {
            *x.add(j) /= sum;
        }
    }
}

rope_by_heads!();

/// Four pairs per step: ld2 splits them into [a…] and [b…], then a·c − b·s
/// and a·s + b·c, the scalar kernel's expressions rounded identically, and
/// st2 interleaves them back.
///
/// # Safety
/// `v` valid for 2·pairs elements, cos/sin for `pairs`.
#[target_feature(enable = "neon")]
unsafe fn rotate(v: *mut f32, cos: *const f32, sin: *const f32, pairs: usize) {
    // SAFETY: the contract above (# Safety) bounds every pointer this
    // body reads or writes, and the CPU has the function's features.
    unsafe {
        let mut i = 0;
        while i + 4 <= pairs {
            let ab = vld2q_f32(v.add(2 * i));
            let (a, b) = (ab.0, ab.1);
            let (c, s) = (vld1q_f32(cos.add(i)), vld1q_f32(sin.add(i)));
            let out = float32x4x2_t(
                vsubq_f32(vmulq_f32(a, c), vmulq_f32(b, s)),
                vaddq_f32(vmulq_f32(a, s), vmulq_f32(b, c)),
            );
            vst2q_f32(v.add(2 * i), out);
            i += 4;
        }
        while i < pairs {
            let (a, b) = (*v.add(2 * i), *v.add(2 * i + 1));
            let (c, s) = (*cos.add(i), *sin.add(i));
            *v.add(2 * i) = a * c - b * s;
            *v.add(2 * i + 1) = a * s + b * c;
            i += 1;
        }
    }
}

/// g = silu(g) · u, with silu(v) = v / (1 + e^(−v)).
pub fn silu_mul(g: &mut [f32], u: &[f32]) {
    let n = g.len().min(u.len());
    // SAFETY: both slices hold n elements.
    unsafe { silu_mul_neon(g.as_mut_ptr(), u.as_ptr(), n) }
}

/// # Safety
/// pointers valid for n elements.
#[target_feature(enable = "neon")]
unsafe fn silu_mul_neon(g: *mut f32, u: *const f32, n: usize) {
    // SAFETY: the contract above (# Safety) bounds every pointer this
    // body reads or writes, and the CPU has the function's features.
    unsafe {
        let silu = |gv: float32x4_t, uv: float32x4_t| {
            let e = exp_ps(vnegq_f32(gv));
            vmulq_f32(vdivq_f32(gv, vaddq_f32(vdupq_n_f32(1.0), e)), uv)
        };
        let mut i = 0;
        while i + 4 <= n {
            vst1q_f32(g.add(i), silu(vld1q_f32(g.add(i)), vld1q_f32(u.add(i))));
            i += 4;
        }
        if i < n {
            let (mut gb, mut ub) = ([0.0f32; 4], [0.0f32; 4]);
            for j in 0..n - i {
                gb[j] = *g.add(i + j);
                ub[j] = *u.add(i + j);
            }
            vst1q_f32(gb.as_mut_ptr(), silu(vld1q_f32(gb.as_ptr()), vld1q_f32(ub.as_ptr())));
            for (j, &v) in gb.iter().enumerate().take(n - i) {
                *g.add(i + j) = v;
            }
        }
    }
}

/// y += x
pub fn add(y: &mut [f32], x: &[f32]) {
    let n = y.len().min(x.len());
    // SAFETY: both slices hold n elements.
    unsafe { axpy(y.as_mut_ptr(), None, x.as_ptr(), n) }
}

/// y += a · x
pub fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    // SAFETY: both slices hold n elements.
    unsafe { axpy(y.as_mut_ptr(), Some(a), x.as_ptr(), n) }
}

/// y += a·x, or y += x without a; multiply then add, as the scalar kernels
/// (an FMA would round differently and gain nothing in a load-bound loop).
///
/// # Safety
/// pointers valid for n elements.
#[target_feature(enable = "neon")]
unsafe fn axpy(y: *mut f32, a: Option<f32>, x: *const f32, n: usize) {
    // SAFETY: the contract above (# Safety) bounds every pointer this
    // body reads or writes, and the CPU has the function's features.
    unsafe {
        let term = |xv: float32x4_t| match a {
            Some(a) => vmulq_n_f32(xv, a),
            None => xv,
        };
        let mut i = 0;
        while i + 8 <= n {
            let t0 = term(vld1q_f32(x.add(i)));
            let t1 = term(vld1q_f32(x.add(i + 4)));
            vst1q_f32(y.add(i), vaddq_f32(vld1q_f32(y.add(i)), t0));
            vst1q_f32(y.add(i + 4), vaddq_f32(vld1q_f32(y.add(i + 4)), t1));
            i += 8;
        }
        while i < n {
            *y.add(i) += match a {
                Some(a) => a * *x.add(i),
                None => *x.add(i),
            };
            i += 1;
        }
    }
}

attention_by_rows!();
