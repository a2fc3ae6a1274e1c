//! AVX-VNNI tier: the VEX-encoded 256-bit vpdpbusd of Alder Lake, Zen 5 and
//! later. Implements the two matvecs; everything else is the AVX2 tier's,
//! since VNNI only adds integer dot products.
//!
//! Integer dot (spec §5): vpdpbusd multiplies unsigned by signed bytes and
//! sums each group of four into int32 in one instruction, replacing AVX2's
//! vpmaddubsw + vpmaddwd pair (and its int16 intermediate). As in AVX2 the
//! activation is made unsigned with vpabsb and its sign moved onto the
//! weight with vpsignb.
//!
//! Not to be confused with AVX-512 VNNI: a CPU may have either without the
//! other (Zen 4 has only AVX-512 VNNI), so the avx512vnni tier does not use
//! this module.

#[cfg(target_arch = "x86")]
use std::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::prefetch;
use crate::core::quant::{Q4_BLOCK_BYTES, QK};
use crate::core::tensor::QAct;

// The fallback chain: what this tier does not implement is AVX2's.
pub use super::avx2::{add, attn_mix, attn_scores, axpy_f32, dot_f32, quantize_q8, rmsnorm, rope, silu_mul, softmax};

pub const TIER: &str = "avxvnni";
/// The AVX2 tier's features (its kernels are bound here too) plus AVX-VNNI.
pub const REQUIRED_FEATURES: &[&str] = &[
    "sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "fma", "avx2", "avx_vnni",
];
/// Kernels this module implements itself.
pub const PROVIDES: &[&str] = &["matvec_q8", "matvec_q4"];

matvec_entry_points!();

/// One weight block as 32 int8; Q4 nibbles unpacked (low nibbles are
/// elements 0–15, high nibbles 16–31) and re-centred.
#[target_feature(enable = "avx2,fma,avxvnni")]
#[inline]
unsafe fn load_w<const Q4: bool>(p: *const u8) -> __m256i {
    if Q4 {
        let packed = _mm_loadu_si128(p.cast());
        let both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
        _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8))
    } else {
        _mm256_loadu_si256(p.cast())
    }
}

/// Integer dot of a weight block with an activation block given as (|x|, x):
/// eight int32 partials.
#[target_feature(enable = "avx2,fma,avxvnni")]
#[inline]
unsafe fn block_dot(w: __m256i, xabs: __m256i, x: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), xabs, _mm256_sign_epi8(w, x))
}

/// [Σa, Σb, Σc, Σd] of four vectors of eight int32.
#[target_feature(enable = "avx2,fma,avxvnni")]
#[inline]
unsafe fn hsum4_epi32(a: __m256i, b: __m256i, c: __m256i, d: __m256i) -> __m128i {
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1))
}

#[target_feature(enable = "avx2,fma,avxvnni")]
#[inline]
unsafe fn hsum_epi32(v: __m256i) -> i32 {
    let v = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let v = _mm_hadd_epi32(v, v);
    _mm_cvtsi128_si32(_mm_hadd_epi32(v, v))
}

/// Rows four at a time, each activation block loaded once for all four,
/// then a row-at-a-time tail. Each row computes sum = fma(sumi·dw, dx, sum)
/// over its blocks in order, as the AVX2 tier does, so a row's result does
/// not depend on how [r0, r1) splits into groups.
///
/// Safety: AVX2 + FMA + AVX-VNNI; `check_matvec` has accepted these arguments.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,avxvnni")]
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
    let mut r = r0;
    while r + 4 <= r1 {
        let row = |j: usize| wq.add((r + j) * stride);
        let mut acc = _mm_setzero_ps();
        for b in 0..nb {
            prefetch::row_group::<false>(wq, wd, stride, nb, r, b, 1, bb);
            let xv = _mm256_loadu_si256(xq.add(b * QK).cast());
            let xabs = _mm256_abs_epi8(xv);
            let sumi = hsum4_epi32(
                block_dot(load_w::<Q4>(row(0).add(b * bb)), xabs, xv),
                block_dot(load_w::<Q4>(row(1).add(b * bb)), xabs, xv),
                block_dot(load_w::<Q4>(row(2).add(b * bb)), xabs, xv),
                block_dot(load_w::<Q4>(row(3).add(b * bb)), xabs, xv),
            );
            let dw = _mm_set_ps(
                *wd.add((r + 3) * nb + b),
                *wd.add((r + 2) * nb + b),
                *wd.add((r + 1) * nb + b),
                *wd.add(r * nb + b),
            );
            acc = _mm_fmadd_ps(_mm_mul_ps(_mm_cvtepi32_ps(sumi), dw), _mm_set1_ps(*xd.add(b)), acc);
        }
        _mm_storeu_ps(y.add(r - r0), acc);
        r += 4;
    }
    while r < r1 {
        let row = wq.add(r * stride);
        let mut sum = 0.0f32;
        for b in 0..nb {
            let xv = _mm256_loadu_si256(xq.add(b * QK).cast());
            let sumi = hsum_epi32(block_dot(load_w::<Q4>(row.add(b * bb)), _mm256_abs_epi8(xv), xv));
            sum = (sumi as f32 * *wd.add(r * nb + b)).mul_add(*xd.add(b), sum);
        }
        *y.add(r - r0) = sum;
        r += 1;
    }
}
