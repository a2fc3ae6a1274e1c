//! SSE4.1 tier (with SSSE3, which every SSE4.1 CPU has): Core 2 Penryn,
//! Nehalem and later. Implements the two matvecs; everything else is the
//! SSE2 tier's, since no SSSE3/SSE4.1 instruction shortens it.
//!
//! Integer dot (spec §5): pmaddubsw multiplies unsigned by signed bytes, so
//! the activation is made unsigned with pabsb and its sign moved onto the
//! weight with psignb: |x|·sign(x)·w = x·w. Pair sums stay below int16's
//! limit because quants are clamped to ±127 (2·127² = 32258). pmaddwd with
//! ones then widens to int32.
//!
//! The matvecs perform the scalar kernel's float operations in its order, so
//! their results are bit-identical to the reference.

#[cfg(target_arch = "x86")]
use std::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::prefetch;
use crate::core::quant::{Q4_BLOCK_BYTES, QK};
use crate::core::tensor::QAct;

// The fallback chain: what this tier does not implement is SSE2's.
pub use super::sse2::{add, attn_mix, attn_scores, axpy_f32, dot_f32, quantize_q8, rmsnorm, rope, silu_mul, softmax};

pub const TIER: &str = "sse41";
/// `sse4.1` implies ssse3 and sse3 for the code generator, so all are needed.
pub const REQUIRED_FEATURES: &[&str] = &["sse2", "sse3", "ssse3", "sse4_1"];
/// Kernels this module implements itself.
pub const PROVIDES: &[&str] = &["matvec_q8", "matvec_q4"];

matvec_entry_points!();

/// One weight block as 32 int8 in two vectors; Q4 nibbles unpacked (low
/// nibbles are elements 0–15, high nibbles 16–31) and re-centred.
#[target_feature(enable = "sse4.1")]
#[inline]
unsafe fn load_w<const Q4: bool>(p: *const u8) -> [__m128i; 2] {
    if Q4 {
        let packed = _mm_loadu_si128(p.cast());
        let low4 = _mm_set1_epi8(0x0F);
        let eight = _mm_set1_epi8(8);
        let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low4);
        [
            _mm_sub_epi8(_mm_and_si128(packed, low4), eight),
            _mm_sub_epi8(hi, eight),
        ]
    } else {
        [_mm_loadu_si128(p.cast()), _mm_loadu_si128(p.add(16).cast())]
    }
}

/// An activation block as (|x|, x), prepared once and shared by four rows.
struct XBlock {
    abs: [__m128i; 2],
    sign: [__m128i; 2],
}

/// Integer dot of a weight block with an activation block: four int32 partials.
#[target_feature(enable = "sse4.1")]
#[inline]
unsafe fn block_dot(w: [__m128i; 2], x: &XBlock) -> __m128i {
    let ones = _mm_set1_epi16(1);
    let p0 = _mm_maddubs_epi16(x.abs[0], _mm_sign_epi8(w[0], x.sign[0]));
    let p1 = _mm_maddubs_epi16(x.abs[1], _mm_sign_epi8(w[1], x.sign[1]));
    // Widen each half separately: two int16 pair sums could overflow.
    _mm_add_epi32(_mm_madd_epi16(p0, ones), _mm_madd_epi16(p1, ones))
}

/// Rows four at a time sharing each activation block, then a row-at-a-time
/// tail. Per row and block it adds `sumi · dw · dx` as the scalar kernel does.
///
/// Safety: SSE4.1; `check_matvec` has accepted these arguments.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "sse4.1")]
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
    let load_x = |b: usize| {
        let x0 = _mm_loadu_si128(xq.add(b * QK).cast());
        let x1 = _mm_loadu_si128(xq.add(b * QK + 16).cast());
        XBlock {
            abs: [_mm_abs_epi8(x0), _mm_abs_epi8(x1)],
            sign: [x0, x1],
        }
    };
    let mut r = r0;
    while r + 4 <= r1 {
        let row = |j: usize| wq.add((r + j) * stride);
        let mut acc = _mm_setzero_ps();
        for b in 0..nb {
            prefetch::row_group::<false>(wq, wd, stride, nb, r, b, 1, bb);
            let xb = load_x(b);
            let d0 = block_dot(load_w::<Q4>(row(0).add(b * bb)), &xb);
            let d1 = block_dot(load_w::<Q4>(row(1).add(b * bb)), &xb);
            let d2 = block_dot(load_w::<Q4>(row(2).add(b * bb)), &xb);
            let d3 = block_dot(load_w::<Q4>(row(3).add(b * bb)), &xb);
            let sumi = _mm_hadd_epi32(_mm_hadd_epi32(d0, d1), _mm_hadd_epi32(d2, d3));
            let dw = _mm_set_ps(
                *wd.add((r + 3) * nb + b),
                *wd.add((r + 2) * nb + b),
                *wd.add((r + 1) * nb + b),
                *wd.add(r * nb + b),
            );
            let t = _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(sumi), dw), _mm_set1_ps(*xd.add(b)));
            acc = _mm_add_ps(acc, t);
        }
        _mm_storeu_ps(y.add(r - r0), acc);
        r += 4;
    }
    while r < r1 {
        let row = wq.add(r * stride);
        let mut sum = 0.0f32;
        for b in 0..nb {
            let v = block_dot(load_w::<Q4>(row.add(b * bb)), &load_x(b));
            let v = _mm_hadd_epi32(v, v);
            let sumi = _mm_cvtsi128_si32(_mm_hadd_epi32(v, v));
            sum += sumi as f32 * *wd.add(r * nb + b) * *xd.add(b);
        }
        *y.add(r - r0) = sum;
        r += 1;
    }
}
