//! SSE4.1 tier (with SSSE3, which every SSE4.1 CPU has): Core 2 Penryn,
//! Nehalem and later. Implements the two matvecs and their tiled matmuls
//! (`x86::matmul_by_row_groups!`); everything else is the
//! SSE2 tier's, since no SSSE3/SSE4.1 instruction shortens it.
//!
//! Integer dot (DESIGN.md §5): pmaddubsw multiplies unsigned by signed bytes, so
//! the activation is made unsigned with pabsb and its sign moved onto the
//! weight with psignb: |x|·sign(x)·w = x·w. Pair sums stay below int16's
//! limit because quants are clamped to ±127 (2·127² = 32258). pmaddwd with
//! ones then widens to int32. Q4_0 four-row groups skip the sign transfer:
//! the unsigned nibbles are pmaddubsw's unsigned operand and 8·Σx comes off
//! the sums (`group_dot`), the same integers.
//!
//! The matvecs perform the scalar kernel's float operations in its order, so
//! their results are bit-identical to the reference, and so are the
//! matmuls, which run the matvec's per-block steps for each token of a tile.

#[cfg(target_arch = "x86")]
use std::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

// The fallback chain: what this tier does not implement is SSE2's.
pub use super::sse2::{add, attn_mix, attn_scores, axpy_f32, dot_f32, quantize_q8, rmsnorm, rope, silu_mul, softmax};

pub const TIER: &str = "sse41";
/// `sse4.1` implies ssse3 and sse3 for the code generator, so all are needed.
pub const REQUIRED_FEATURES: &[&str] = &["sse2", "sse3", "ssse3", "sse4_1"];

matvec_entry_points!();
tiled_matmul_entry_points!(matmul_rows);

/// An activation block as (|x|, x), prepared once and shared by four rows.
struct XBlock {
    abs: [__m128i; 2],
    x: [__m128i; 2],
}

/// # Safety
///
/// `p` is readable for QK bytes.
#[target_feature(enable = "sse4.1")]
#[inline]
unsafe fn load_x(p: *const i8) -> XBlock {
    // SAFETY: both loads lie in the QK bytes the caller guarantees.
    let (x0, x1) = unsafe { (_mm_loadu_si128(p.cast()), _mm_loadu_si128(p.add(16).cast())) };
    XBlock {
        abs: [_mm_abs_epi8(x0), _mm_abs_epi8(x1)],
        x: [x0, x1],
    }
}

/// Integer dot of a weight block with an activation block: four int32 partials.
#[target_feature(enable = "sse4.1")]
#[inline]
fn block_dot(w: [__m128i; 2], x: &XBlock) -> __m128i {
    let ones = _mm_set1_epi16(1);
    let p0 = _mm_maddubs_epi16(x.abs[0], _mm_sign_epi8(w[0], x.x[0]));
    let p1 = _mm_maddubs_epi16(x.abs[1], _mm_sign_epi8(w[1], x.x[1]));
    // Widen each half separately: two int16 pair sums could overflow.
    _mm_add_epi32(_mm_madd_epi16(p0, ones), _mm_madd_epi16(p1, ones))
}

/// Q4 group weights are the unsigned nibbles q (0–15) themselves, as
/// pmaddubsw's unsigned operand: no re-centring, and no sign transfer per
/// activation (`group_dot`); Q8 blocks are `load_w`'s.
const Q4_NIBBLE_GROUPS: bool = true;

/// # Safety
///
/// As `load_w`.
#[target_feature(enable = "sse4.1")]
#[inline]
unsafe fn load_group_w<const Q4: bool>(p: *const u8) -> [__m128i; 2] {
    if Q4 {
        // SAFETY: a Q4 block is 16 bytes (the caller's contract).
        let packed = unsafe { _mm_loadu_si128(p.cast()) };
        let low4 = _mm_set1_epi8(0x0F);
        [
            _mm_and_si128(packed, low4),
            _mm_and_si128(_mm_srli_epi16(packed, 4), low4),
        ]
    } else {
        // SAFETY: as above, a Q8 block is 32 bytes.
        unsafe { load_w::<false>(p) }
    }
}

/// Four rows' sums of one block. Q4_0: pmaddubsw multiplies the nibbles q
/// by x directly, and 8·Σx (`xsum`, the activation block's sum) is taken
/// off the sums, so Σ(q − 8)·x comes out as the same integers. q·x is at
/// most 15·127 = 1905 in size, so sixteen of them add up in int16 (30480):
/// each row's two byte-pair halves are added before widening, and the rows
/// are reduced with phaddw to sixteen products a lane, then widened once
/// (pmaddwd) for all four rows. Q8_0 products (up to 127²) need each pair
/// widened on its own, as `block_dot` does.
#[target_feature(enable = "sse4.1")]
#[inline]
fn group_dot<const Q4: bool>(w: [[__m128i; 2]; 4], x: &XBlock, xsum: i32) -> __m128i {
    if !Q4 {
        return hsum4(
            block_dot(w[0], x),
            block_dot(w[1], x),
            block_dot(w[2], x),
            block_dot(w[3], x),
        );
    }
    let half = |q: [__m128i; 2], i: usize| _mm_maddubs_epi16(q[i], x.x[i]);
    let v = w.map(|q| _mm_add_epi16(half(q, 0), half(q, 1)));
    let h = _mm_hadd_epi16(_mm_hadd_epi16(v[0], v[1]), _mm_hadd_epi16(v[2], v[3]));
    _mm_sub_epi32(_mm_madd_epi16(h, _mm_set1_epi16(1)), _mm_set1_epi32(8 * xsum))
}

/// [Σa, Σb, Σc, Σd] of four vectors of four int32.
#[target_feature(enable = "sse4.1")]
#[inline]
fn hsum4(a: __m128i, b: __m128i, c: __m128i, d: __m128i) -> __m128i {
    _mm_hadd_epi32(_mm_hadd_epi32(a, b), _mm_hadd_epi32(c, d))
}

#[target_feature(enable = "sse4.1")]
#[inline]
fn hsum1(v: __m128i) -> i32 {
    let v = _mm_hadd_epi32(v, v);
    _mm_cvtsi128_si32(_mm_hadd_epi32(v, v))
}

// SSE2's weight loads; per row and block `sumi · dw · dx` as the scalar
// kernel adds it, so the results are bit-identical to it.
use super::sse2::load_w;
use super::x86::{scale_exact1 as scale1, scale_exact4 as scale4};
matvec_by_row_groups!("sse4.1");
matmul_by_row_groups!("sse4.1");
