//! AVX-VNNI tier: the VEX-encoded 256-bit vpdpbusd of Alder Lake, Zen 5 and
//! later. Implements the two matvecs; everything else is the AVX2 tier's,
//! since VNNI only adds integer dot products.
//!
//! Integer dot (DESIGN.md §5): vpdpbusd multiplies unsigned by signed bytes and
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

// The fallback chain: what this tier does not implement is AVX2's.
pub use super::avx2::{add, attn_mix, attn_scores, axpy_f32, dot_f32, quantize_q8, rmsnorm, rope, silu_mul, softmax};

pub const TIER: &str = "avxvnni";
/// The AVX2 tier's features (its kernels are bound here too) plus AVX-VNNI.
pub const REQUIRED_FEATURES: &[&str] = &[
    "sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "fma", "avx2", "avx_vnni",
];

matvec_entry_points!();
tiled_matmul_entry_points!(matmul_rows);

/// Integer dot of a weight block with an activation block: eight int32
/// partials. AVX2's `block_dot` with vpdpbusd for its vpmaddubsw + vpmaddwd.
#[target_feature(enable = "avx2,fma,avxvnni")]
#[inline]
fn block_dot(w: __m256i, x: &XBlock) -> __m256i {
    _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), x.abs, signed_w(w, x))
}

// All but the block dot is AVX2's: loads, sums, and its scale step
// sum = fma(sumi·dw, dx, sum) per row and block in order.
use super::avx2::{hsum1, hsum4, load_w, load_x, scale1, scale4, signed_w, XBlock};
group_dot_by_block_dots!("avx2,fma,avxvnni", __m256i, XBlock);
matvec_by_row_groups!("avx2,fma,avxvnni");
matmul_by_row_groups!("avx2,fma,avxvnni");
