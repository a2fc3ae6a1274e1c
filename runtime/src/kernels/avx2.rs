//! AVX2 + FMA tier: Haswell, Zen and later. Implements all twelve kernels with
//! 256-bit vectors.
//!
//! Integer dot (DESIGN.md §5): the SSE4.1 strategy at 256 bits, one whole block
//! per register: vpabsb on the activation, vpsignb moves its sign onto the
//! weight, vpmaddubsw, then vpmaddwd with ones to int32 (Q4_0 four-row
//! groups multiply the unsigned nibbles instead and take 8·Σx off, as
//! SSE4.1's do, two blocks a step in the matvec). Per-block int32 sums are
//! exact; their scaling is accumulated with FMA, so matvec results differ
//! from the scalar kernel by rounding only (DESIGN.md §7: ≤ 1e-5 relative).
//!
//! The matmul runs eight tokens at a time in token lanes (`matmul_lanes`):
//! one int32 lane per token, the activations transposed once per call and
//! each row's four weights broadcast from memory (Q4_0's staged once per
//! row group with the nibbles one a byte), so a block's sums need no
//! horizontal adds; the same integers and float steps as the matvec, lane
//! by lane, so every output keeps the matvec's bits.
//!
//! FMA is used only where it is a pure accuracy/speed gain: the matvec scale
//! accumulation, the dot/rmsnorm reductions and the exp polynomial. The
//! elementwise kernels (quantize_q8, rope, add, axpy_f32) keep the scalar
//! kernel's separate multiply and add, so they stay bit-identical to it.

#[cfg(target_arch = "x86")]
use std::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

pub const TIER: &str = "avx2";
/// `avx2` and `fma` imply avx, sse4.2 … sse2 for the code generator.
pub const REQUIRED_FEATURES: &[&str] = &["sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "fma", "avx2"];

// ---------------------------------------------------------------------------
// Integer path: matvec_q8, matvec_q4

matvec_entry_points!();
tiled_matmul_entry_points!(matmul_lanes);

/// One weight block as 32 int8; Q4 nibbles unpacked (low nibbles are
/// elements 0–15, high nibbles 16–31) and re-centred. Shared with the
/// avxvnni tier and avx512vnni's odd last block.
///
/// # Safety
///
/// `p` is readable for one block (QK bytes, Q4: Q4_BLOCK_BYTES).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn load_w<const Q4: bool>(p: *const u8) -> __m256i {
    if Q4 {
        // SAFETY: a Q4 block is 16 bytes (the caller's contract).
        let packed = unsafe { _mm_loadu_si128(p.cast()) };
        let both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
        _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8))
    } else {
        // SAFETY: a Q8 block is 32 bytes (the caller's contract).
        unsafe { _mm256_loadu_si256(p.cast()) }
    }
}

/// An activation block as (|x|, x): vpsignb moves x's sign onto the weight,
/// so the unsigned × signed multiply sees |x|.
#[derive(Clone, Copy)]
pub(super) struct XBlock {
    pub(super) abs: __m256i,
    pub(super) x: __m256i,
}

/// # Safety
///
/// `p` is readable for QK bytes.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn load_x(p: *const i8) -> XBlock {
    // SAFETY: QK = 32 bytes, readable by the caller's contract.
    let x = unsafe { _mm256_loadu_si256(p.cast()) };
    XBlock {
        abs: _mm256_abs_epi8(x),
        x,
    }
}

/// The block's weights with the activation's signs: the signed operand of
/// an unsigned × signed byte multiply whose unsigned operand is |x|.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn signed_w(w: __m256i, x: &XBlock) -> __m256i {
    _mm256_sign_epi8(w, x.x)
}

/// Integer dot of a weight block with an activation block: eight int32
/// partials.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn block_dot(w: __m256i, x: &XBlock) -> __m256i {
    let pairs = _mm256_maddubs_epi16(x.abs, signed_w(w, x));
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// Q4 group weights are the unsigned nibbles q (0–15) themselves, as
/// vpmaddubsw's unsigned operand: no re-centring, and no sign transfer
/// per activation (`group_dot`); Q8 blocks are `load_w`'s.
pub(super) const Q4_NIBBLE_GROUPS: bool = true;

/// # Safety
///
/// As `load_w`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn load_group_w<const Q4: bool>(p: *const u8) -> __m256i {
    if Q4 {
        // SAFETY: a Q4 block is 16 bytes (the caller's contract).
        let packed = unsafe { _mm_loadu_si128(p.cast()) };
        let both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
        _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
    } else {
        // SAFETY: as above, a Q8 block is 32 bytes.
        unsafe { load_w::<false>(p) }
    }
}

/// Four rows' sums of one block. Q4_0: vpmaddubsw multiplies the nibbles q
/// by x directly, and 8·Σx (`xsum`, the activation block's sum) is taken
/// off the sums, so Σ(q − 8)·x comes out as the same integers. q·x is at
/// most 15·127 = 1905 in size, so eight of them add up in int16 (15240):
/// the rows' byte-pair sums are reduced with vphaddw to eight products a
/// lane, then widened once (vpmaddwd) for all four rows. Q8_0 pairs (up to
/// 2·127²) need widening each on its own, as `block_dot` does.
#[target_feature(enable = "avx2,fma")]
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
    let v = w.map(|q| _mm256_maddubs_epi16(q, x.x));
    let h = _mm256_hadd_epi16(_mm256_hadd_epi16(v[0], v[1]), _mm256_hadd_epi16(v[2], v[3]));
    // Per 128-bit lane [row 0, 1, 2, 3]: its half of each row's Σq·x.
    let s = _mm256_madd_epi16(h, _mm256_set1_epi16(1));
    let qx = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    _mm_sub_epi32(qx, _mm_set1_epi32(8 * xsum))
}

/// [Σa, Σb, Σc, Σd] of four vectors of eight int32.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn hsum4(a: __m256i, b: __m256i, c: __m256i, d: __m256i) -> __m128i {
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1))
}

/// Σ of eight int32.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn hsum1(v: __m256i) -> i32 {
    let v = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let v = _mm_hadd_epi32(v, v);
    _mm_cvtsi128_si32(_mm_hadd_epi32(v, v))
}

// Each row computes sum = fma(sumi·dw, dx, sum) over its blocks in order.
pub(super) use super::x86::{scale_fma1 as scale1, scale_fma4 as scale4};
matvec_by_row_groups!("avx2,fma", q4_pairs: pair_dot_q4);

/// Activation blocks b and b+1 (64 quants at x) as the pair step wants
/// them, against a row's 32 packed bytes of both blocks: quants 0–15 of
/// each (the low nibbles' partners), quants 16–31 of each (the high
/// nibbles'), and 8·Σx of each block over four int32 lanes, block b low.
///
/// # Safety
///
/// `x` is readable for 2·QK bytes.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn pair_x(x: *const i8, xsums: [i32; 2]) -> (__m256i, __m256i, __m256i) {
    // SAFETY: two blocks of QK bytes (the caller's contract).
    let (b0, b1) = unsafe { (_mm256_loadu_si256(x.cast()), _mm256_loadu_si256(x.add(32).cast())) };
    let bias = _mm256_set_m128i(_mm_set1_epi32(8 * xsums[1]), _mm_set1_epi32(8 * xsums[0]));
    (
        _mm256_permute2x128_si256::<0x20>(b0, b1),
        _mm256_permute2x128_si256::<0x31>(b0, b1),
        bias,
    )
}

/// A row's 32 packed bytes of two Q4_0 blocks as unsigned nibbles: the low
/// ones (quants 0–15 of each block, `pair_x`'s first) and the high ones
/// (quants 16–31, its second).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn pair_nibbles(packed: __m256i) -> (__m256i, __m256i) {
    let low4 = _mm256_set1_epi8(0x0F);
    (
        _mm256_and_si256(packed, low4),
        _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4),
    )
}

/// The matvec's Q4_0 step over blocks b and b+1 of four rows
/// (`matvec_by_row_groups!`'s `q4_pairs`): one 32-byte load a row holds
/// both blocks' nibbles, so no lane insert per row; vpmaddubsw multiplies
/// the unsigned nibbles by x, each row's two halves add in int16 (four
/// products of at most 15·127), three vphaddw bring the four rows together
/// (sixteen products: 30480), one vpmaddwd widens, and 8·Σx comes off.
///
/// # Safety
///
/// `x` is readable for 2·QK bytes.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn pair_dot_q4(w: [__m256i; 4], x: *const i8, xsums: [i32; 2]) -> __m256i {
    // SAFETY: the caller's contract.
    let (lo_x, hi_x, bias) = unsafe { pair_x(x, xsums) };
    let v = w.map(|p| {
        let (lo, hi) = pair_nibbles(p);
        _mm256_add_epi16(_mm256_maddubs_epi16(lo, lo_x), _mm256_maddubs_epi16(hi, hi_x))
    });
    let h = _mm256_hadd_epi16(_mm256_hadd_epi16(v[0], v[1]), _mm256_hadd_epi16(v[2], v[3]));
    _mm256_sub_epi32(_mm256_madd_epi16(h, _mm256_set1_epi16(1)), bias)
}

matmul_by_row_groups!("avx2,fma");

// ---------------------------------------------------------------------------
// Token lanes: the matmul with one token per int32 lane

// `tiled_matmul_entry_points!(matmul_lanes)`: one int32 lane per token,
// so a block's sums for a row and eight tokens come out of the multiplies
// lane by lane, with no horizontal adds. Each group of eight tokens is
// transposed once per call (`lane_acts`, on the stack), and each four-row
// group's weights are staged once for all the lane groups (`stage_group`):
// Q4_0's nibbles one a byte and, for a tier whose multiply wants them
// unsigned (`UNSIGNED_Q8`), Q8_0's plus 128; AVX2's Q8_0 is read in
// place. The hot loop then broadcasts a row's four weights to every lane
// by the load itself (vpbroadcastd) and unpacks nothing.
// The group's rows after the last four go through the matvec, and the
// tokens after the last whole group through `matmul_rows`'s tiles, as
// does everything when one group's activations outgrow the stack buffer
// (K above 5760 for AVX2's Q8_0, 9824 otherwise). Each lane gets the
// matvec's exact block sums and float steps for its token, so every
// output keeps the matvec's bits.
//
// SSE4.1 has no broadcast load: a movd + pshufd per row and four weights
// cost what the horizontal adds saved, so its Q8_0 stays on the tiles and
// its Q4_0 lanes read weights staged already spread (sse41.rs).

/// Tokens a lane group holds: one per int32 lane.
pub(super) const LANES: usize = 8;

/// AVX2 multiplies unsigned by signed bytes in int16 pairs, which Q8_0's
/// weights plus 128 would overflow, so its Q8_0 lanes read the weights in
/// place, move x's sign onto them and multiply |x| (`LaneActs::abs`).
const UNSIGNED_Q8: bool = false;

/// A lane group's activations, transposed so that one load gives the same
/// four quants (k..k+4) of each of its tokens, lane t for token t:
/// `x[b][c]` holds block b's quants 4c..4c+4, `dx[b]` the tokens' scales of
/// block b. For Q4_0, and Q8_0 with unsigned weights, `bias[b]` holds the
/// tokens' −8·Σx or −128·Σx of block b, which re-centres the staged
/// weights exactly; for Q8_0 with signed weights, `abs` holds |x|.
pub(super) struct LaneActs<'a> {
    pub(super) x: &'a [[__m256i; 8]],
    pub(super) abs: &'a [[__m256i; 8]],
    pub(super) dx: &'a [__m256],
    pub(super) bias: &'a [__m256i],
}

/// Vectors of `LaneActs` the stack holds for one matmul call: 96 KiB.
pub(super) const LANE_STACK: usize = 98304 / std::mem::size_of::<__m256i>();

/// Lane groups a pass over the rows takes at most: 128 tokens,
/// `--batch`'s largest.
pub(super) const PASS_GROUPS: usize = 128 / LANES;

/// Vectors one lane group's `LaneActs` take for `nb` blocks: eight of
/// quants, the scales, and the bias or eight of magnitudes.
pub(super) const fn lane_vectors<const Q4: bool, const UNSIGNED_Q8: bool>(nb: usize) -> usize {
    if Q4 || UNSIGNED_Q8 {
        10 * nb
    } else {
        17 * nb
    }
}

/// Blocks a row has at most when one lane group fits `LANE_STACK`: the
/// size of `stage_group`'s buffer.
pub(super) const MAX_LANE_BLOCKS: usize = LANE_STACK / lane_vectors::<true, true>(1);

/// Transposes tokens t0..t0+LANES of `x` into `slots`
/// (`lane_vectors` long) and returns the view (`LaneActs`).
///
/// # Safety
///
/// The CPU has AVX2 and x holds tokens t0..t0+LANES.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn lane_acts<'a, const Q4: bool, const UNSIGNED_Q8: bool>(
    x: &crate::core::tensor::QActs,
    t0: usize,
    slots: &'a mut [std::mem::MaybeUninit<__m256i>],
) -> LaneActs<'a> {
    use crate::core::quant::QK;
    let nb = x.cols / QK;
    let biased = Q4 || UNSIGNED_Q8;
    let centre = if Q4 { 8 } else { 128 };
    let tokens: [crate::core::tensor::QAct; LANES] = std::array::from_fn(|t| x.token(t0 + t));
    let (xs, rest) = slots.split_at_mut(8 * nb);
    let (abs, rest) = rest.split_at_mut(if biased { 0 } else { 8 * nb });
    let (dx, rest) = rest.split_at_mut(nb);
    let bias = &mut rest[..if biased { nb } else { 0 }];
    // SAFETY: a LANES-long i32 array is one vector.
    let lanes = |v: [i32; LANES]| unsafe { _mm256_loadu_si256(v.as_ptr().cast()) };
    for b in 0..nb {
        for c in 0..8 {
            let v = lanes(std::array::from_fn(|t| {
                let q = &tokens[t].q[b * QK + 4 * c..b * QK + 4 * c + 4];
                i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8])
            }));
            xs[b * 8 + c].write(v);
            if !biased {
                abs[b * 8 + c].write(_mm256_abs_epi8(v));
            }
        }
        // The scales' bits, read back as floats through `LaneActs`.
        dx[b].write(lanes(std::array::from_fn(|t| tokens[t].d[b].to_bits() as i32)));
        if biased {
            bias[b].write(lanes(std::array::from_fn(|t| {
                -centre
                    * tokens[t].q[b * QK..(b + 1) * QK]
                        .iter()
                        .map(|&v| i32::from(v))
                        .sum::<i32>()
            })));
        }
    }
    // SAFETY: every slot of the four parts was written above;
    // MaybeUninit<T> has T's layout, and __m256 __m256i's.
    unsafe {
        let eights = |s: &[std::mem::MaybeUninit<__m256i>]| {
            std::slice::from_raw_parts(s.as_ptr().cast::<[__m256i; 8]>(), s.len() / 8)
        };
        LaneActs {
            x: eights(xs),
            abs: eights(abs),
            dx: std::slice::from_raw_parts(dx.as_ptr().cast::<__m256>(), dx.len()),
            bias: std::slice::from_raw_parts(bias.as_ptr().cast::<__m256i>(), bias.len()),
        }
    }
}

/// Rows r..r+4's weights block by block into `out` (block b of row r+j at
/// 4b + j) and returns them, unsigned for vpmaddubsw or vpdpbusd: Q4_0's
/// nibbles one a byte in quant order (0–15), Q8_0's plus 128 (an xor).
/// Asks for the blocks a step ahead as the matvec does.
///
/// # Safety
///
/// The CPU has AVX2; blocks 0..nb of rows r..r+4 and their scales are in
/// bounds; `out` holds at least 4·nb blocks.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn stage_group<const Q4: bool>(
    wq: *const u8,
    wd: *const f32,
    stride: usize,
    nb: usize,
    r: usize,
    out: &mut [std::mem::MaybeUninit<[u8; crate::core::quant::QK]>],
) -> &[[u8; crate::core::quant::QK]] {
    use crate::core::quant::{Q4_BLOCK_BYTES, QK};
    let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
    let (flip, low4) = (_mm256_set1_epi8(-128), _mm_set1_epi8(0x0F));
    for b in 0..nb {
        super::prefetch::row_group::<false>(wq, wd, stride, nb, r, b, 1, bb);
        for j in 0..4 {
            // SAFETY: block b of row r+j is in bounds (the caller's
            // contract): 16 bytes (Q4) or 32.
            let v = unsafe {
                let src = wq.add((r + j) * stride + b * bb);
                if Q4 {
                    // Low nibbles are quants 0–15, high ones 16–31.
                    let packed = _mm_loadu_si128(src.cast());
                    let (lo, hi) = (
                        _mm_and_si128(packed, low4),
                        _mm_and_si128(_mm_srli_epi16(packed, 4), low4),
                    );
                    _mm256_set_m128i(hi, lo)
                } else {
                    _mm256_xor_si256(_mm256_loadu_si256(src.cast()), flip)
                }
            };
            // SAFETY: out holds 4·nb blocks of QK bytes (the caller's
            // contract).
            unsafe { _mm256_storeu_si256(out[4 * b + j].as_mut_ptr().cast(), v) };
        }
    }
    // SAFETY: the first 4·nb blocks were written above; MaybeUninit<T>
    // has T's layout.
    unsafe { std::slice::from_raw_parts(out.as_ptr().cast::<[u8; QK]>(), 4 * nb) }
}

/// Where `matmul_by_token_lanes!` reads a four-row group's weight blocks:
/// the copy `stage_group` made, or the matrix itself for AVX2's Q8_0,
/// whose weights are used as they are (a plain copy bought nothing there,
/// and cost a fifth at K = 4096, where one lane group fills a pass and
/// nothing shares it).
#[derive(Clone, Copy)]
pub(super) struct GroupWeights {
    base: *const u8,
    row_step: usize,
    block_step: usize,
    /// The matrix and its row stride when the blocks are read from it:
    /// they are then asked for ahead as they are read.
    matrix: Option<(*const u8, usize)>,
}

impl GroupWeights {
    pub(super) fn staged(blocks: &[[u8; crate::core::quant::QK]]) -> Self {
        use crate::core::quant::QK;
        GroupWeights {
            base: blocks.as_ptr().cast(),
            row_step: QK,
            block_step: 4 * QK,
            matrix: None,
        }
    }

    /// Q8_0 rows r..r+4 of the matrix at wq.
    pub(super) fn in_matrix(wq: *const u8, stride: usize, r: usize) -> Self {
        use crate::core::quant::QK;
        GroupWeights {
            base: wq.wrapping_add(r * stride),
            row_step: stride,
            block_step: QK,
            matrix: Some((wq, stride)),
        }
    }

    /// Block b of the group's row j.
    #[inline(always)]
    pub(super) fn block(&self, j: usize, b: usize) -> *const u8 {
        self.base.wrapping_add(j * self.row_step + b * self.block_step)
    }

    /// Asks for the group's block b ahead when it is read from the matrix
    /// (`stage_group` asked already for a staged copy's).
    #[inline(always)]
    pub(super) fn prefetch(&self, wd: *const f32, nb: usize, r: usize, b: usize) {
        use crate::core::quant::QK;
        if let Some((wq, stride)) = self.matrix {
            super::prefetch::row_group::<false>(wq, wd, stride, nb, r, b, 1, QK);
        }
    }
}

matmul_by_token_lanes!("avx2,fma");

/// One row's Q8_0 block sums for a lane group (`matmul_by_token_lanes!`):
/// per quad c, vpsignb moves x's sign onto the weight, vpmaddubsw with |x|,
/// vpmaddwd to int32, in two add chains.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn lane_row_q8(w: impl Fn(usize) -> __m256i, a: &LaneActs, b: usize) -> __m256i {
    let (x, abs) = (&a.x[b], &a.abs[b]);
    let ones = _mm256_set1_epi16(1);
    let unit = |c: usize| _mm256_madd_epi16(_mm256_maddubs_epi16(abs[c], _mm256_sign_epi8(w(c), x[c])), ones);
    let (mut even, mut odd) = (unit(0), unit(1));
    for c in (2..8).step_by(2) {
        even = _mm256_add_epi32(even, unit(c));
        odd = _mm256_add_epi32(odd, unit(c + 1));
    }
    _mm256_add_epi32(even, odd)
}

/// One row's Q4_0 block sums for a lane group (`matmul_by_token_lanes!`):
/// the staged nibbles times x summed in int16 over the block (eight terms
/// of at most 2·15·127: 30480), widened once, less 8·Σx.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn lane_row_q4(w: impl Fn(usize) -> __m256i, a: &LaneActs, b: usize) -> __m256i {
    let x = &a.x[b];
    let (mut even, mut odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for c in (0..8).step_by(2) {
        even = _mm256_add_epi16(even, _mm256_maddubs_epi16(w(c), x[c]));
        odd = _mm256_add_epi16(odd, _mm256_maddubs_epi16(w(c + 1), x[c + 1]));
    }
    let s = _mm256_add_epi16(even, odd);
    _mm256_add_epi32(_mm256_madd_epi16(s, _mm256_set1_epi16(1)), a.bias[b])
}

// ---------------------------------------------------------------------------
// quantize_q8

quantize_by_blocks!();

/// One block, bit-identical to `quant::quantize_block_q8` for every input
/// (NaN and infinities included): amax and id are computed in the same
/// scalar operations, then q = trunc(x·id + copysign(0.5, x)) with a
/// separate multiply and add (no FMA), NaN → 0, clamped to ±127.
///
/// Safety: AVX2; `q` and `x` are valid for QK elements.
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_block(q: *mut i8, x: *const f32) -> f32 {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(x.add(8 * i)));
        // maxps returns its second operand when either is NaN, so a NaN |x| is
        // skipped, as f32::max skips it in the scalar fold.
        let mut m = _mm256_setzero_ps();
        for &vi in &v {
            m = _mm256_max_ps(_mm256_andnot_ps(sign, vi), m);
        }
        let amax = hmax_ps(m);
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };

        let idv = _mm256_set1_ps(id);
        let half = _mm256_set1_ps(0.5);
        let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
        let qi: [__m256i; 4] = std::array::from_fn(|i| {
            let r = _mm256_add_ps(_mm256_mul_ps(v[i], idv), _mm256_or_ps(_mm256_and_ps(v[i], sign), half));
            // The scalar `as i8` maps NaN to 0; cvttps would give INT_MIN.
            let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(r, r));
            _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi))
        });
        // In range already, so the saturating packs only narrow; they work per
        // 128-bit lane, which leaves the dwords in the order 0 2 4 6 1 3 5 7.
        let p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
        let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(q.cast(), p);
        d
    }
}

// ---------------------------------------------------------------------------
// exp, for softmax and silu

/// e^x for eight lanes: Cephes expf. n = round(x/ln2), r = x − n·ln2 in two
/// FMA steps, e^r = 1 + r + r²·P(r) with P of degree 5 on |r| ≤ ln2/2, then
/// ·2ⁿ. Relative error ≈ 2e-7 on [-88, 88] (tests hold it to 1e-6).
///
/// 2ⁿ is applied as 2^⌊n/2⌋ · 2^(n−⌊n/2⌋) so that results in the subnormal
/// range (x < −87.3) and up to the overflow edge are right: each factor is a
/// normal float for every n the clamp allows.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn exp_ps(x: __m256) -> __m256 {
    let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
    let n = _mm256_cvtps_epi32(_mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)));
    let nf = _mm256_cvtepi32_ps(n);
    let r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let e = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0));
    let n1 = _mm256_srai_epi32(n, 1);
    let n2 = _mm256_sub_epi32(n, n1);
    let pow2 = |k: __m256i| _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
    _mm256_mul_ps(_mm256_mul_ps(e, pow2(n1)), pow2(n2))
}

use super::exp_poly::{EXP_HI, EXP_LO, EXP_POLY, LN2_HI, LN2_LO};

// ---------------------------------------------------------------------------
// Float kernels

#[target_feature(enable = "avx2,fma")]
#[inline]
fn hsum_ps(v: __m256) -> f32 {
    let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    _mm_cvtss_f32(_mm_add_ss(v, _mm_shuffle_ps(v, v, 1)))
}

#[target_feature(enable = "avx2,fma")]
#[inline]
fn hmax_ps(v: __m256) -> f32 {
    let v = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let v = _mm_max_ps(v, _mm_movehl_ps(v, v));
    _mm_cvtss_f32(_mm_max_ss(v, _mm_shuffle_ps(v, v, 1)))
}

/// Σ a[i]·b[i] over n elements: four FMA accumulators to hide its latency.
///
/// Safety: AVX2 + FMA; `a` and `b` valid for n reads.
#[target_feature(enable = "avx2,fma")]
unsafe fn dot(a: *const f32, b: *const f32, n: usize) -> f32 {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (j, s) in acc.iter_mut().enumerate() {
                let k = i + 8 * j;
                *s = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(k)), _mm256_loadu_ps(b.add(k)), *s);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i)), _mm256_loadu_ps(b.add(i)), acc[0]);
            i += 8;
        }
        let mut sum = hsum_ps(_mm256_add_ps(
            _mm256_add_ps(acc[0], acc[1]),
            _mm256_add_ps(acc[2], acc[3]),
        ));
        while i < n {
            sum = (*a.add(i)).mul_add(*b.add(i), sum);
            i += 1;
        }
        sum
    }
}

/// o[i] = w[i] · (scale · x[i]), the scalar kernel's order.
///
/// Safety: AVX2; pointers valid for n elements.
#[target_feature(enable = "avx2,fma")]
unsafe fn scale_mul(o: *mut f32, x: *const f32, w: *const f32, scale: f32, n: usize) {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        let s = _mm256_set1_ps(scale);
        let mut i = 0;
        while i + 8 <= n {
            let v = _mm256_mul_ps(_mm256_loadu_ps(w.add(i)), _mm256_mul_ps(s, _mm256_loadu_ps(x.add(i))));
            _mm256_storeu_ps(o.add(i), v);
            i += 8;
        }
        while i < n {
            *o.add(i) = *w.add(i) * (scale * *x.add(i));
            i += 1;
        }
    }
}

exp_kernels! {
    "avx2,fma", __m256, 8;
    _mm256_set1_ps _mm256_setzero_ps _mm256_loadu_ps _mm256_storeu_ps _mm256_add_ps
    _mm256_sub_ps _mm256_mul_ps _mm256_div_ps _mm256_max_ps _mm256_xor_ps
}

rope_by_heads!();

/// Four pairs per vector: [a b …]·[c c …] then vaddsubps with [b a …]·[s s …]
/// gives a·c − b·s in even lanes and b·c + a·s in odd ones, rounded exactly
/// as the scalar kernel's expressions.
///
/// Safety: AVX2; `v` valid for 2·pairs elements, cos/sin for `pairs`.
#[target_feature(enable = "avx2,fma")]
unsafe fn rotate(v: *mut f32, cos: *const f32, sin: *const f32, pairs: usize) {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        // [t0 t1 t2 t3] → [t0 t0 t1 t1 t2 t2 t3 t3]
        let dup = |t: __m128| _mm256_set_m128(_mm_unpackhi_ps(t, t), _mm_unpacklo_ps(t, t));
        let mut i = 0;
        while i + 4 <= pairs {
            let x = _mm256_loadu_ps(v.add(2 * i));
            let c = dup(_mm_loadu_ps(cos.add(i)));
            let s = dup(_mm_loadu_ps(sin.add(i)));
            let swapped = _mm256_permute_ps(x, 0b10_11_00_01);
            let out = _mm256_addsub_ps(_mm256_mul_ps(x, c), _mm256_mul_ps(swapped, s));
            _mm256_storeu_ps(v.add(2 * i), out);
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

float_entry_points!();

/// y += a·x, or y += x without a; multiply then add, as the scalar kernels
/// (an FMA would round differently and gain nothing in a load-bound loop).
///
/// Safety: AVX2; pointers valid for n elements.
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy(y: *mut f32, a: Option<f32>, x: *const f32, n: usize) {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        let term = |xv: __m256| match a {
            Some(a) => _mm256_mul_ps(_mm256_set1_ps(a), xv),
            None => xv,
        };
        let mut i = 0;
        while i + 16 <= n {
            let t0 = term(_mm256_loadu_ps(x.add(i)));
            let t1 = term(_mm256_loadu_ps(x.add(i + 8)));
            _mm256_storeu_ps(y.add(i), _mm256_add_ps(_mm256_loadu_ps(y.add(i)), t0));
            _mm256_storeu_ps(y.add(i + 8), _mm256_add_ps(_mm256_loadu_ps(y.add(i + 8)), t1));
            i += 16;
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

// ---------------------------------------------------------------------------
// Attention over the KV cache: attn_scores, attn_mix

/// out[t] = dot(q, row t) · scale: `dot` itself per row (so bit-identical to
/// `dot_f32` row by row), but inlined in one loop: at head_dim 64 a call
/// per row cost more than the row's eight FMAs.
pub fn attn_scores(out: &mut [f32], q: &[f32], rows: &[f32], stride: usize, scale: f32) {
    super::scaffold::check_rows(rows, out.len(), stride, q.len());
    // SAFETY: AVX2 and FMA verified by the guard; check_rows bounded every
    // row read, q holds q.len() elements and out out.len().
    unsafe {
        scores(
            out.as_mut_ptr(),
            out.len(),
            q.as_ptr(),
            q.len(),
            rows.as_ptr(),
            stride,
            scale,
        )
    }
}

/// Safety: AVX2 + FMA; `check_rows(rows, keys, stride, n)` holds.
#[target_feature(enable = "avx2,fma")]
unsafe fn scores(out: *mut f32, keys: usize, q: *const f32, n: usize, rows: *const f32, stride: usize, scale: f32) {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        if n == 64 {
            return scores_64(out, keys, q, rows, stride, scale);
        }
        for t in 0..keys {
            super::prefetch::prefetch_f32(rows.wrapping_add((t + super::prefetch::ROWS_AHEAD) * stride), n);
            *out.add(t) = dot(q, rows.add(t * stride), n) * scale;
        }
    }
}

/// `scores` at head size 64 (SmolLM2's, stories15M's, Llama's is 128) with
/// q held in eight registers across all rows and the row's dot unrolled:
/// `dot`'s exact operations (four accumulators from zero, two chunks of 32,
/// then (a0 + a1) + (a2 + a3) and `hsum_ps`), so still bit-identical to
/// `dot_f32`. It saves a sixth of attention's time at SmolLM2's shape in
/// L2.
///
/// Safety: as `scores`, with n = 64.
#[target_feature(enable = "avx2,fma")]
unsafe fn scores_64(out: *mut f32, keys: usize, q: *const f32, rows: *const f32, stride: usize, scale: f32) {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        let qv: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(q.add(8 * j)));
        for t in 0..keys {
            let row = rows.add(t * stride);
            super::prefetch::prefetch_f32(rows.wrapping_add((t + super::prefetch::ROWS_AHEAD) * stride), 64);
            let mut acc: [__m256; 4] =
                std::array::from_fn(|j| _mm256_fmadd_ps(qv[j], _mm256_loadu_ps(row.add(8 * j)), _mm256_setzero_ps()));
            for (j, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(qv[4 + j], _mm256_loadu_ps(row.add(32 + 8 * j)), *a);
            }
            let sum = hsum_ps(_mm256_add_ps(
                _mm256_add_ps(acc[0], acc[1]),
                _mm256_add_ps(acc[2], acc[3]),
            ));
            *out.add(t) = sum * scale;
        }
    }
}

/// out += p[t] · row t in t order, with axpy's multiply-then-add per element
/// (bit-identical to `axpy_f32` row by row), 64 outputs at a time held in
/// registers across all rows instead of loaded and stored once per row.
pub fn attn_mix(out: &mut [f32], p: &[f32], rows: &[f32], stride: usize) {
    super::scaffold::check_rows(rows, p.len(), stride, out.len());
    // SAFETY: AVX2 verified by the guard; check_rows bounded every row read,
    // p holds p.len() elements and out out.len().
    unsafe { mix(out.as_mut_ptr(), out.len(), p.as_ptr(), p.len(), rows.as_ptr(), stride) }
}

/// Safety: AVX2; `check_rows(rows, keys, stride, n)` holds.
#[target_feature(enable = "avx2,fma")]
unsafe fn mix(out: *mut f32, n: usize, p: *const f32, keys: usize, rows: *const f32, stride: usize) {
    // SAFETY: the caller upholds this function's contract (above).
    unsafe {
        let mut i = 0;
        while i + 64 <= n {
            let mut acc: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(out.add(i + 8 * j)));
            for t in 0..keys {
                let row = rows.add(t * stride + i);
                super::prefetch::prefetch_f32(row.wrapping_add(super::prefetch::ROWS_AHEAD * stride), 64);
                let pt = _mm256_set1_ps(*p.add(t));
                for (j, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(pt, _mm256_loadu_ps(row.add(8 * j))));
                }
            }
            for (j, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(out.add(i + 8 * j), *a);
            }
            i += 64;
        }
        while i + 8 <= n {
            let mut a = _mm256_loadu_ps(out.add(i));
            for t in 0..keys {
                a = _mm256_add_ps(
                    a,
                    _mm256_mul_ps(_mm256_set1_ps(*p.add(t)), _mm256_loadu_ps(rows.add(t * stride + i))),
                );
            }
            _mm256_storeu_ps(out.add(i), a);
            i += 8;
        }
        while i < n {
            let mut a = *out.add(i);
            for t in 0..keys {
                a += *p.add(t) * *rows.add(t * stride + i);
            }
            *out.add(i) = a;
            i += 1;
        }
    }
}
