//! AVX-VNNI tier: the VEX-encoded 256-bit vpdpbusd of Alder Lake, Zen 5 and
//! later. Implements the two matvecs; everything else is the AVX2 tier's,
//! since VNNI only adds integer dot products.
//!
//! Integer dot (DESIGN.md §5): vpdpbusd multiplies unsigned by signed bytes and
//! sums each group of four into int32 in one instruction, replacing AVX2's
//! vpmaddubsw + vpmaddwd pair (and its int16 intermediate). In the matvec,
//! as in AVX2, the activation is made unsigned with vpabsb and its sign
//! moved onto the weight with vpsignb (Q4_0: the unsigned nibbles times x,
//! two blocks a step).
//!
//! The matmul is AVX2's token lanes (`x86::matmul_by_token_lanes!`), one
//! int32 lane per token, with vpdpbusd for each row's block sums. Its
//! unsigned operand is the weights, staged once per four-row group (Q8_0's
//! plus 128, Q4_0's nibbles one a byte), so a quad is one broadcast load
//! and one vpdpbusd for eight tokens, Q8_0 and Q4_0 alike (AVX2: four
//! steps for Q8_0, two for Q4_0).
//!
//! Not to be confused with AVX-512 VNNI: a CPU may have either without the
//! other (Zen 4 has only AVX-512 VNNI), so the avx512vnni tier does not use
//! this module.

#[cfg(target_arch = "x86")]
use std::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

// The fallback chain: what this tier does not implement is AVX2's.
pub use super::avx2::{add, attn_mix, attn_scores, axpy_f32, dot_f32, quantize_q8, rmsnorm, rope, silu_mul, softmax};

pub const TIER: &str = "avxvnni";
/// The AVX2 tier's features (its kernels are bound here too) plus AVX-VNNI.
pub const REQUIRED_FEATURES: &[&str] = &[
    "sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "fma", "avx2", "avx_vnni",
];

matvec_entry_points!();
tiled_matmul_entry_points!(matmul_lanes);

/// Integer dot of a weight block with an activation block: eight int32
/// partials. AVX2's `block_dot` with vpdpbusd for its vpmaddubsw + vpmaddwd.
#[target_feature(enable = "avx2,fma,avxvnni")]
#[inline]
fn block_dot(w: __m256i, x: &XBlock) -> __m256i {
    _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), x.abs, signed_w(w, x))
}

// All but the block dots (`block_dot`, `group_dot`, `lane_row`) is
// AVX2's: loads, horizontal sums, the lanes' staging, and its scale step
// sum = fma(sumi·dw, dx, sum) per row and block in order.
use super::avx2::{
    hsum1, hsum4, load_group_w, load_w, load_x, scale1, scale4, signed_w, LaneActs, XBlock, Q4_NIBBLE_GROUPS,
};

/// Four rows' sums of one block, as `hsum4` of their block dots. Q4_0's
/// group weights are AVX2's unsigned nibbles q (`load_group_w`), which
/// vpdpbusd multiplies by x with no sign transfer; 8·Σx (`xsum`) taken
/// off gives Σ(q − 8)·x, the same integers.
#[target_feature(enable = "avx2,fma,avxvnni")]
#[inline]
fn group_dot<const Q4: bool>(w: [__m256i; 4], x: &XBlock, xsum: i32) -> __m128i {
    if !Q4 {
        return hsum4(
            block_dot(w[0], x),
            block_dot(w[1], x),
            block_dot(w[2], x),
            block_dot(w[3], x),
        );
    }
    let dot = |q: __m256i| _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q, x.x);
    let qx = hsum4(dot(w[0]), dot(w[1]), dot(w[2]), dot(w[3]));
    _mm_sub_epi32(qx, _mm_set1_epi32(8 * xsum))
}
matvec_by_row_groups!("avx2,fma,avxvnni", q4_pairs: pair_dot_q4);

/// AVX2's `pair_dot_q4` with vpdpbusd: each row's nibbles times x straight
/// into int32 (two vpdpbusd, no int16 stage), the four rows brought
/// together by three vphaddd, less 8·Σx.
///
/// # Safety
///
/// `x` is readable for 2·QK bytes.
#[target_feature(enable = "avx2,fma,avxvnni")]
#[inline]
unsafe fn pair_dot_q4(w: [__m256i; 4], x: *const i8, xsums: [i32; 2]) -> __m256i {
    // SAFETY: the caller's contract.
    let (lo_x, hi_x, bias) = unsafe { super::avx2::pair_x(x, xsums) };
    let v = w.map(|p| {
        let (lo, hi) = super::avx2::pair_nibbles(p);
        _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), lo, lo_x), hi, hi_x)
    });
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    _mm256_sub_epi32(h, bias)
}
matmul_by_row_groups!("avx2,fma,avxvnni");
matmul_by_token_lanes!("avx2,fma,avxvnni");

/// vpdpbusd wants its unsigned operand on one side: the lanes stage Q8_0's
/// weights plus 128 (`avx2::stage_group`) and start each lane from
/// −128·Σx, so a quad is one broadcast load and one vpdpbusd, with no sign
/// moved per weight and token.
const UNSIGNED_Q8: bool = true;

/// One row's block sums for a lane group (`matmul_by_token_lanes!`), Q8_0
/// and Q4_0 alike: the staged unsigned weights (Q8_0's plus 128, Q4_0's
/// nibbles) times x straight into int32, one vpdpbusd a quad in two chains
/// for its latency, the first starting from the tokens' −128·Σx or −8·Σx.
#[target_feature(enable = "avx2,fma,avxvnni")]
#[inline]
fn lane_row(w: impl Fn(usize) -> __m256i, a: &LaneActs, b: usize) -> __m256i {
    let x = &a.x[b];
    let (mut even, mut odd) = (a.bias[b], _mm256_setzero_si256());
    for c in (0..8).step_by(2) {
        even = _mm256_dpbusd_avx_epi32(even, w(c), x[c]);
        odd = _mm256_dpbusd_avx_epi32(odd, w(c + 1), x[c + 1]);
    }
    _mm256_add_epi32(even, odd)
}
use lane_row as lane_row_q8;
use lane_row as lane_row_q4;
