//! SSE2 tier: the x86-64 baseline (and the i686 target's), so this build runs
//! on every 64-bit x86 CPU. Implements all twelve kernels with 128-bit vectors,
//! and the matmuls on weights widened to int16 once per four-row group
//! from four tokens (`x86::matmul_widened!`), fewer tokens as tiles of four
//! rows (`x86::matmul_by_row_groups!`); each token's outputs are the
//! matvec's bits.
//!
//! Integer dot (DESIGN.md §5): SSE2 has neither pmovsxbw nor pmaddubsw, so int8
//! quants are sign-extended to int16 by interleaving each byte with itself
//! and shifting right arithmetically by 8, then multiplied with pmaddwd.
//!
//! Every kernel without a reduction (matvec, quantize_q8, rope, add, axpy_f32)
//! performs the scalar kernel's operations in the scalar kernel's order, so
//! its results are bit-identical to the reference. Only exp (polynomial) and
//! reordered sums (dot_f32, rmsnorm, softmax) differ, within DESIGN.md §7.
//!
//! Every intrinsic lives in a `#[target_feature]` function: safe where it
//! touches registers only, an `unsafe fn` with a safety contract where it
//! reads or writes memory. The safe entry points check slice bounds first;
//! the guard (`guard`) has verified the CPU before any kernel runs.

#[cfg(target_arch = "x86")]
use std::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

pub const TIER: &str = "sse2";
pub const REQUIRED_FEATURES: &[&str] = &["sse2"];

// ---------------------------------------------------------------------------
// Integer path: matvec_q8, matvec_q4

matvec_entry_points!();
tiled_matmul_entry_points!(matmul);

/// The matmuls' driver: from four tokens on weights widened once per
/// four-row group (`x86::matmul_widened!`), below that in tiles.
///
/// # Safety
///
/// As `matmul_rows`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "sse2")]
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
    // SAFETY: both take matmul_rows's contract, the caller's.
    unsafe {
        if super::x86::takes_widened(x.n, r0, r1) {
            matmul_widened::<Q4>(y, wq, wd, x, nb, stride, r0, r1)
        } else {
            matmul_rows::<Q4>(y, wq, wd, x, nb, stride, r0, r1)
        }
    }
}

/// One weight block as 32 int8 in two vectors. Q4 nibbles are unpacked
/// (low nibbles are elements 0–15, high nibbles 16–31) and re-centred, so
/// both formats share the Q8 dot below. The sse41 tier's too.
///
/// # Safety
///
/// `p` is readable for one block (QK bytes, Q4: Q4_BLOCK_BYTES).
#[target_feature(enable = "sse2")]
#[inline]
pub(super) unsafe fn load_w<const Q4: bool>(p: *const u8) -> [__m128i; 2] {
    if Q4 {
        // SAFETY: a Q4 block is 16 bytes (the caller's contract).
        let packed = unsafe { _mm_loadu_si128(p.cast()) };
        let low4 = _mm_set1_epi8(0x0F);
        let eight = _mm_set1_epi8(8);
        // No byte shift exists; a 16-bit shift leaks the neighbour's bits into
        // the top nibble, which the mask then drops.
        let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low4);
        [
            _mm_sub_epi8(_mm_and_si128(packed, low4), eight),
            _mm_sub_epi8(hi, eight),
        ]
    } else {
        // SAFETY: a Q8 block is 32 bytes (the caller's contract).
        unsafe { [_mm_loadu_si128(p.cast()), _mm_loadu_si128(p.add(16).cast())] }
    }
}

/// Sign-extends 16 int8 to two vectors of 8 int16.
#[target_feature(enable = "sse2")]
#[inline]
fn widen(v: __m128i) -> [__m128i; 2] {
    [
        _mm_srai_epi16(_mm_unpacklo_epi8(v, v), 8),
        _mm_srai_epi16(_mm_unpackhi_epi8(v, v), 8),
    ]
}

/// An activation block widened to int16, once per block for four rows.
///
/// # Safety
///
/// `p` is readable for QK bytes.
#[target_feature(enable = "sse2")]
#[inline]
unsafe fn load_x(p: *const i8) -> [__m128i; 4] {
    // SAFETY: both loads lie in the QK bytes the caller guarantees.
    let (lo, hi) = unsafe { (_mm_loadu_si128(p.cast()), _mm_loadu_si128(p.add(16).cast())) };
    let [x0, x1] = widen(lo);
    let [x2, x3] = widen(hi);
    [x0, x1, x2, x3]
}

/// Integer dot of a weight block with an activation block already widened to
/// int16 (`load_x`); four int32 partials.
#[target_feature(enable = "sse2")]
#[inline]
fn block_dot(w: [__m128i; 2], x: &[__m128i; 4]) -> __m128i {
    let [w0, w1] = widen(w[0]);
    let [w2, w3] = widen(w[1]);
    // |products| ≤ 127², pairs ≤ 32258: no int32 overflow anywhere.
    let a = _mm_add_epi32(_mm_madd_epi16(w0, x[0]), _mm_madd_epi16(w1, x[1]));
    let b = _mm_add_epi32(_mm_madd_epi16(w2, x[2]), _mm_madd_epi16(w3, x[3]));
    _mm_add_epi32(a, b)
}

/// [Σa, Σb, Σc, Σd] by a 4×4 transpose-and-add (SSE2 has no phaddd).
#[target_feature(enable = "sse2")]
#[inline]
pub(super) fn hsum4(a: __m128i, b: __m128i, c: __m128i, d: __m128i) -> __m128i {
    let ab = _mm_add_epi32(_mm_unpacklo_epi32(a, b), _mm_unpackhi_epi32(a, b));
    let cd = _mm_add_epi32(_mm_unpacklo_epi32(c, d), _mm_unpackhi_epi32(c, d));
    _mm_add_epi32(_mm_unpacklo_epi64(ab, cd), _mm_unpackhi_epi64(ab, cd))
}

#[target_feature(enable = "sse2")]
#[inline]
fn hsum1(v: __m128i) -> i32 {
    let v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0b01_00_11_10));
    let v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0b10_11_00_01));
    _mm_cvtsi128_si32(v)
}

// Per row and block `sumi · dw · dx` exactly as the scalar kernel adds it
// (same operations, same order), so the result is bit-identical to it.
use super::x86::{scale_exact1 as scale1, scale_exact4 as scale4};
group_dot_by_block_dots!("sse2", [__m128i; 2], [__m128i; 4]);
matvec_by_row_groups!("sse2");
matmul_by_row_groups!("sse2");

/// A weight block's quants as int16, eight a vector (Q4_0's re-centred),
/// for `matmul_widened`.
///
/// # Safety
///
/// `p` is readable for one block.
#[target_feature(enable = "sse2")]
#[inline]
pub(super) unsafe fn widen_w<const Q4: bool>(p: *const u8) -> [__m128i; 4] {
    // SAFETY: the caller's contract is load_w's.
    let [lo, hi] = unsafe { load_w::<Q4>(p) };
    let [w0, w1] = widen(lo);
    let [w2, w3] = widen(hi);
    [w0, w1, w2, w3]
}

/// `load_x` under the name `matmul_widened` calls.
use load_x as widen_x;
matmul_widened!("sse2");

// ---------------------------------------------------------------------------
// quantize_q8

quantize_by_blocks!();

/// One block, bit-identical to `quant::quantize_block_q8` for every input
/// (NaN and infinities included): amax and id are computed in the same
/// scalar operations, then q = trunc(x·id + copysign(0.5, x)) with a
/// separate multiply and add (no FMA), NaN → 0, clamped to ±127.
///
/// Safety: SSE2; `q` and `x` are valid for QK elements.
#[target_feature(enable = "sse2")]
unsafe fn quantize_block(q: *mut i8, x: *const f32) -> f32 {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        let sign = _mm_set1_ps(-0.0);
        let v: [__m128; 8] = std::array::from_fn(|i| _mm_loadu_ps(x.add(4 * i)));
        // maxps returns its second operand when either is NaN, so a NaN |x| is
        // skipped, as f32::max skips it in the scalar fold.
        let mut m = _mm_setzero_ps();
        for &vi in &v {
            m = _mm_max_ps(_mm_andnot_ps(sign, vi), m);
        }
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };

        let idv = _mm_set1_ps(id);
        let half = _mm_set1_ps(0.5);
        let (lo, hi) = (_mm_set1_ps(-127.0), _mm_set1_ps(127.0));
        let mut qi = [_mm_setzero_si128(); 8];
        for (qv, &vi) in qi.iter_mut().zip(&v) {
            let r = _mm_add_ps(_mm_mul_ps(vi, idv), _mm_or_ps(_mm_and_ps(vi, sign), half));
            // The scalar `as i8` maps NaN to 0; cvttps would give INT_MIN.
            let r = _mm_and_ps(r, _mm_cmpord_ps(r, r));
            *qv = _mm_cvttps_epi32(_mm_min_ps(_mm_max_ps(r, lo), hi));
        }
        // In range already, so the saturating packs only narrow.
        let w0 = _mm_packs_epi16(_mm_packs_epi32(qi[0], qi[1]), _mm_packs_epi32(qi[2], qi[3]));
        let w1 = _mm_packs_epi16(_mm_packs_epi32(qi[4], qi[5]), _mm_packs_epi32(qi[6], qi[7]));
        _mm_storeu_si128(q.cast(), w0);
        _mm_storeu_si128(q.add(16).cast(), w1);
        d
    }
}

// ---------------------------------------------------------------------------
// exp, for softmax and silu

/// e^x for four lanes: Cephes expf. n = round(x/ln2) and r = x − n·ln2 in
/// two parts, 1 + r + r²·P(r) with P of degree 5 for e^r on |r| ≤ ln2/2,
/// then ·2ⁿ. Relative error ≈ 2e-7 on
/// [-88, 88] (tests hold it to 1e-6 against f64).
///
/// 2ⁿ is applied as 2^⌊n/2⌋ · 2^(n−⌊n/2⌋) so that results in the subnormal
/// range (x < −87.3) and up to the overflow edge are right: each factor is a
/// normal float for every n the clamp allows.
#[target_feature(enable = "sse2")]
#[inline]
fn exp_ps(x: __m128) -> __m128 {
    let x = _mm_min_ps(_mm_max_ps(x, _mm_set1_ps(EXP_LO)), _mm_set1_ps(EXP_HI));
    let n = _mm_cvtps_epi32(_mm_mul_ps(x, _mm_set1_ps(std::f32::consts::LOG2_E)));
    let nf = _mm_cvtepi32_ps(n);
    let r = _mm_sub_ps(
        _mm_sub_ps(x, _mm_mul_ps(nf, _mm_set1_ps(LN2_HI))),
        _mm_mul_ps(nf, _mm_set1_ps(LN2_LO)),
    );
    let mut p = _mm_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(c));
    }
    let e = _mm_add_ps(_mm_add_ps(_mm_mul_ps(_mm_mul_ps(p, r), r), r), _mm_set1_ps(1.0));
    let n1 = _mm_srai_epi32(n, 1);
    let n2 = _mm_sub_epi32(n, n1);
    let pow2 = |k: __m128i| _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(k, _mm_set1_epi32(127)), 23));
    _mm_mul_ps(_mm_mul_ps(e, pow2(n1)), pow2(n2))
}

use super::exp_poly::{EXP_HI, EXP_LO, EXP_POLY, LN2_HI, LN2_LO};

// ---------------------------------------------------------------------------
// Float kernels

#[target_feature(enable = "sse2")]
#[inline]
fn hsum_ps(v: __m128) -> f32 {
    let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    _mm_cvtss_f32(_mm_add_ss(v, _mm_shuffle_ps(v, v, 1)))
}

#[target_feature(enable = "sse2")]
#[inline]
fn hmax_ps(v: __m128) -> f32 {
    let v = _mm_max_ps(v, _mm_movehl_ps(v, v));
    _mm_cvtss_f32(_mm_max_ss(v, _mm_shuffle_ps(v, v, 1)))
}

/// Σ a[i]·b[i] over n elements, four accumulators to hide add latency.
///
/// Safety: SSE2; `a` and `b` valid for n reads.
#[target_feature(enable = "sse2")]
unsafe fn dot(a: *const f32, b: *const f32, n: usize) -> f32 {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        let mut acc = [_mm_setzero_ps(); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (j, s) in acc.iter_mut().enumerate() {
                let k = i + 4 * j;
                *s = _mm_add_ps(*s, _mm_mul_ps(_mm_loadu_ps(a.add(k)), _mm_loadu_ps(b.add(k))));
            }
            i += 16;
        }
        while i + 4 <= n {
            acc[0] = _mm_add_ps(acc[0], _mm_mul_ps(_mm_loadu_ps(a.add(i)), _mm_loadu_ps(b.add(i))));
            i += 4;
        }
        let mut sum = hsum_ps(_mm_add_ps(_mm_add_ps(acc[0], acc[1]), _mm_add_ps(acc[2], acc[3])));
        while i < n {
            sum += *a.add(i) * *b.add(i);
            i += 1;
        }
        sum
    }
}

/// o[i] = w[i] · (scale · x[i]), the scalar kernel's order.
///
/// Safety: SSE2; pointers valid for n elements.
#[target_feature(enable = "sse2")]
unsafe fn scale_mul(o: *mut f32, x: *const f32, w: *const f32, scale: f32, n: usize) {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        let s = _mm_set1_ps(scale);
        let mut i = 0;
        while i + 4 <= n {
            _mm_storeu_ps(
                o.add(i),
                _mm_mul_ps(_mm_loadu_ps(w.add(i)), _mm_mul_ps(s, _mm_loadu_ps(x.add(i)))),
            );
            i += 4;
        }
        while i < n {
            *o.add(i) = *w.add(i) * (scale * *x.add(i));
            i += 1;
        }
    }
}

exp_kernels! {
    "sse2", __m128, 4;
    _mm_set1_ps _mm_setzero_ps _mm_loadu_ps _mm_storeu_ps _mm_add_ps _mm_sub_ps _mm_mul_ps _mm_div_ps _mm_max_ps _mm_xor_ps
}

rope_by_heads!();

/// Two pairs per vector: [a0 b0 a1 b1]·[c0 c0 c1 c1] + [b0 a0 b1 a1]·[s0 s0 s1 s1]
/// with the even lanes' second product negated, which is the scalar
/// kernel's a·c − b·s and b·c + a·s rounded identically.
///
/// Safety: SSE2; `v` valid for 2·pairs elements, cos/sin for `pairs`.
#[target_feature(enable = "sse2")]
unsafe fn rotate(v: *mut f32, cos: *const f32, sin: *const f32, pairs: usize) {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        let neg_even = _mm_castsi128_ps(_mm_set_epi32(0, i32::MIN, 0, i32::MIN));
        let mut i = 0;
        while i + 2 <= pairs {
            let x = _mm_loadu_ps(v.add(2 * i));
            // [c_i, c_i+1] loaded as 64 bits, then each duplicated.
            let c = _mm_castsi128_ps(_mm_loadl_epi64(cos.add(i).cast()));
            let s = _mm_castsi128_ps(_mm_loadl_epi64(sin.add(i).cast()));
            let (c, s) = (_mm_unpacklo_ps(c, c), _mm_unpacklo_ps(s, s));
            let swapped = _mm_shuffle_ps(x, x, 0b10_11_00_01);
            let rot = _mm_xor_ps(_mm_mul_ps(swapped, s), neg_even);
            _mm_storeu_ps(v.add(2 * i), _mm_add_ps(_mm_mul_ps(x, c), rot));
            i += 2;
        }
        if i < pairs {
            let (a, b) = (*v.add(2 * i), *v.add(2 * i + 1));
            let (c, s) = (*cos.add(i), *sin.add(i));
            *v.add(2 * i) = a * c - b * s;
            *v.add(2 * i + 1) = a * s + b * c;
        }
    }
}

float_entry_points!(without add);

/// y += x
pub fn add(y: &mut [f32], x: &[f32]) {
    let n = y.len().min(x.len());
    // Feature `asm`: the hand-written kernels/sse2/add.S instead (DESIGN.md §3).
    #[cfg(all(feature = "asm", target_arch = "x86_64"))]
    // SAFETY: ml_k_add_sse2 reads n floats from x and reads and writes n
    // floats of y, both of which hold n elements; SSE2 is baseline x86-64.
    return unsafe { ml_k_add_sse2(y.as_mut_ptr(), x.as_ptr(), n) };
    #[cfg(not(all(feature = "asm", target_arch = "x86_64")))]
    // SAFETY: SSE2 verified by the guard; both slices hold n elements.
    unsafe {
        axpy(y.as_mut_ptr(), None, x.as_ptr(), n)
    }
}

#[cfg(all(feature = "asm", target_arch = "x86_64"))]
core::arch::global_asm!(include_str!("sse2/add.S"), options(att_syntax));

#[cfg(all(feature = "asm", target_arch = "x86_64"))]
extern "C" {
    /// kernels/sse2/add.S: y[i] += x[i] for i < n (System V x86-64).
    fn ml_k_add_sse2(y: *mut f32, x: *const f32, n: usize);
}

/// y += a·x, or y += x without a; multiply then add, as the scalar kernels.
///
/// Safety: SSE2; pointers valid for n elements.
#[target_feature(enable = "sse2")]
unsafe fn axpy(y: *mut f32, a: Option<f32>, x: *const f32, n: usize) {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        let term = |xv: __m128| match a {
            Some(a) => _mm_mul_ps(_mm_set1_ps(a), xv),
            None => xv,
        };
        let mut i = 0;
        while i + 8 <= n {
            let t0 = term(_mm_loadu_ps(x.add(i)));
            let t1 = term(_mm_loadu_ps(x.add(i + 4)));
            _mm_storeu_ps(y.add(i), _mm_add_ps(_mm_loadu_ps(y.add(i)), t0));
            _mm_storeu_ps(y.add(i + 4), _mm_add_ps(_mm_loadu_ps(y.add(i + 4)), t1));
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
