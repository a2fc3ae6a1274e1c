//! SSE4.1 tier (with SSSE3, which every SSE4.1 CPU has): Core 2 Penryn,
//! Nehalem and later. Implements the two matvecs and their matmuls: Q8_0
//! on weights and activations widened to int16 (`x86::matmul_widened!`,
//! from four tokens; fewer in the tiles of `x86::matmul_by_row_groups!`),
//! Q4_0 with four tokens in a vector's lanes (`matmul_lanes`); everything
//! else is the SSE2 tier's, since no SSSE3/SSE4.1 instruction shortens it.
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
//! matmuls, which run the matvec's per-block steps for each token.

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
tiled_matmul_entry_points!(matmul_lanes);

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

// ---------------------------------------------------------------------------
// matmul_lanes: Q4_0 with four tokens in a vector's int32 lanes
//
// SSE4.1 has no broadcast load, so for whole groups of four tokens the Q4_0
// matmul stages each four-row group's weights block by block on the stack,
// the nibbles one a byte and every four of them repeated across a vector
// (`stage`), once for all the token groups of a pass. The tokens'
// activations are transposed once per call (`LaneActs`): one load gives
// the same four quants of four tokens, lane t for token t. A row's block
// sums then come out a lane per token with no horizontal add and no sign
// transfer: pmaddubsw multiplies the unsigned nibbles by x, the products
// (at most 2·15·127 a pair) add up in int16 over the block's eight steps
// (30480), are widened once, and 8·Σx of the token's block comes off: the
// matvec's integers. Each lane then takes the matvec's float step
// acc + (sumi·dw)·dx in block order, so every output keeps the matvec's
// bits.
//
// Q8_0 does not take the lanes: its weights need either a sign moved per
// row and token or, staged unsigned (w + 128) in two nibbles, two
// multiplies and two int16 adds per four weights (in cache 54–55 → 56–58
// GOPS against the tiles, pp128 unchanged, Zen 4); it goes to
// `x86::matmul_widened!` (below). Q4_0's fewer than eight tokens and its
// tokens after the last group of four go to the tiles; rows after the last
// four go through the matvec.

/// Tokens a lane group holds: one per int32 lane.
const LANES: usize = 4;

/// Vectors of `LaneActs` the stack holds for one matmul call: 64 KiB.
const LANE_STACK: usize = 65536 / std::mem::size_of::<__m128i>();

/// Lane groups a pass over the rows takes at most: 128 tokens,
/// `--batch`'s largest.
const PASS_GROUPS: usize = 128 / LANES;

/// Vectors one lane group takes for `nb` blocks: eight of quants, the
/// bias and the scales, a block.
const fn lane_vectors(nb: usize) -> usize {
    10 * nb
}

/// A pass's activations, block-major: block b of lane group g at
/// b·groups + g. `x` holds its quants 4c..4c+4 (lane t for token t),
/// `bias` the tokens' −8·Σx of the block, `dx` their scales.
struct LaneActs<'a> {
    groups: usize,
    x: &'a [[__m128i; 8]],
    bias: &'a [__m128i],
    dx: &'a [__m128],
}

/// Transposes `groups` lane groups of tokens from t0 into `slots`
/// (`groups · lane_vectors(nb)` long) and returns the view.
///
/// # Safety
///
/// The CPU has SSE4.1 and x holds tokens t0..t0 + groups·LANES.
#[target_feature(enable = "sse4.1")]
unsafe fn lane_acts<'a>(
    x: &crate::core::tensor::QActs,
    t0: usize,
    groups: usize,
    slots: &'a mut [std::mem::MaybeUninit<__m128i>],
) -> LaneActs<'a> {
    use crate::core::quant::QK;
    let nb = x.cols / QK;
    let (xs, rest) = slots.split_at_mut(8 * nb * groups);
    let (bias, dx) = rest.split_at_mut(nb * groups);
    // SAFETY: a LANES-long i32 array is one vector.
    let lanes = |v: [i32; LANES]| unsafe { _mm_loadu_si128(v.as_ptr().cast()) };
    for g in 0..groups {
        let tokens: [crate::core::tensor::QAct; LANES] = std::array::from_fn(|t| x.token(t0 + g * LANES + t));
        for b in 0..nb {
            let i = b * groups + g;
            for c in 0..8 {
                xs[8 * i + c].write(lanes(std::array::from_fn(|t| {
                    let q = &tokens[t].q[b * QK + 4 * c..b * QK + 4 * c + 4];
                    i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8])
                })));
            }
            bias[i].write(lanes(std::array::from_fn(|t| {
                -8 * tokens[t].q[b * QK..(b + 1) * QK]
                    .iter()
                    .map(|&v| i32::from(v))
                    .sum::<i32>()
            })));
            // The scales' bits, read back as floats through `LaneActs`.
            dx[i].write(lanes(std::array::from_fn(|t| tokens[t].d[b].to_bits() as i32)));
        }
    }
    // SAFETY: every slot of the three parts was written above;
    // MaybeUninit<T> has T's layout, and __m128 __m128i's.
    unsafe {
        LaneActs {
            groups,
            x: std::slice::from_raw_parts(xs.as_ptr().cast::<[__m128i; 8]>(), nb * groups),
            bias: std::slice::from_raw_parts(bias.as_ptr().cast::<__m128i>(), nb * groups),
            dx: std::slice::from_raw_parts(dx.as_ptr().cast::<__m128>(), nb * groups),
        }
    }
}

/// The matmul's driver (see above).
///
/// # Safety
///
/// As `matmul_rows`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "sse4.1")]
unsafe fn matmul_lanes<const Q4: bool>(
    y: &mut [&mut [f32]],
    wq: *const u8,
    wd: *const f32,
    x: &crate::core::tensor::QActs,
    nb: usize,
    stride: usize,
    r0: usize,
    r1: usize,
) {
    let per_group = lane_vectors(nb);
    let fit = (LANE_STACK / per_group).min(PASS_GROUPS);
    let groups = x.n / LANES;
    let rows4 = r0 + (r1 - r0) / 4 * 4;
    if !Q4 && super::x86::takes_widened(x.n, r0, r1) {
        // SAFETY: the caller's contract is matmul_rows's.
        return unsafe { matmul_widened::<false>(y, wq, wd, x, nb, stride, r0, r1) };
    }
    if !Q4 || groups < 2 || rows4 == r0 || fit == 0 {
        // SAFETY: the caller's contract is matmul_rows's.
        return unsafe { matmul_rows::<Q4>(y, wq, wd, x, nb, stride, r0, r1) };
    }
    let mut stack = [std::mem::MaybeUninit::<__m128i>::uninit(); LANE_STACK];
    let mut first = 0;
    while first < groups {
        let pass = fit.min(groups - first);
        // SAFETY: SSE4.1 (the caller's contract); the pass's tokens exist.
        let acts = unsafe { lane_acts(x, first * LANES, pass, &mut stack[..pass * per_group]) };
        let ys = &mut y[first * LANES..(first + pass) * LANES];
        let mut r = r0;
        while r < rows4 {
            // SAFETY: rows r..r+4 lie in [r0, r1), bounded for every token
            // by the caller's contract; ys holds the pass's tokens.
            unsafe { lane_rows(ys, wq, wd, &acts, nb, stride, r, r - r0) };
            r += 4;
        }
        first += pass;
    }
    super::x86::lane_tails(
        y,
        x,
        (groups * LANES, rows4, r0, r1),
        // SAFETY: rows rows4..r1 are within what the caller's contract
        // bounded for this token, and yt holds their outputs.
        |yt, xt| unsafe { matvec::<Q4>(yt.as_mut_ptr(), wq, wd, xt, nb, stride, rows4, r1) },
        // SAFETY: the remaining tokens, all rows, as the caller's contract.
        |ys, rest| unsafe { matmul_rows::<Q4>(ys, wq, wd, rest, nb, stride, r0, r1) },
    );
}

/// Block b of rows r..r+4 (Q4_0) as pmaddubsw's unsigned operands, four
/// nibbles repeated across each vector: `out[8j + c]` holds row r+j's
/// quants 4c..4c+4.
///
/// # Safety
///
/// The CPU has SSE4.1; block b of the four rows is readable.
#[target_feature(enable = "sse4.1")]
#[inline]
unsafe fn stage(out: &mut [__m128i; 32], wq: *const u8, r: usize, stride: usize, b: usize) {
    use crate::core::quant::Q4_BLOCK_BYTES;
    let low4 = _mm_set1_epi8(0x0F);
    // Each of a vector's four dwords repeated across a vector.
    let spread = |v: __m128i| {
        [
            _mm_shuffle_epi32::<0x00>(v),
            _mm_shuffle_epi32::<0x55>(v),
            _mm_shuffle_epi32::<0xAA>(v),
            _mm_shuffle_epi32::<0xFF>(v),
        ]
    };
    for j in 0..4 {
        // SAFETY: a Q4 block is 16 bytes (the caller's contract).
        let packed = unsafe { _mm_loadu_si128(wq.add((r + j) * stride + b * Q4_BLOCK_BYTES).cast()) };
        // Low nibbles are quants 0–15, high ones 16–31.
        let (lo, hi) = (
            _mm_and_si128(packed, low4),
            _mm_and_si128(_mm_srli_epi16(packed, 4), low4),
        );
        for (slot, v) in out[8 * j..8 * j + 8]
            .iter_mut()
            .zip(spread(lo).into_iter().chain(spread(hi)))
        {
            *slot = v;
        }
    }
}

/// Rows r..r+4 for a pass's tokens (see above), written at `out` in each
/// token's output.
///
/// # Safety
///
/// As `matmul_rows`, rows r..r+4 in bounds, y holding the pass's tokens
/// with out + 4 outputs each.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "sse4.1")]
unsafe fn lane_rows(
    y: &mut [&mut [f32]],
    wq: *const u8,
    wd: *const f32,
    a: &LaneActs,
    nb: usize,
    stride: usize,
    r: usize,
    out: usize,
) {
    use crate::core::quant::Q4_BLOCK_BYTES;
    let ones = _mm_set1_epi16(1);
    let mut acc = [[_mm_setzero_ps(); 4]; PASS_GROUPS];
    let mut staged = [_mm_setzero_si128(); 32];
    for b in 0..nb {
        super::prefetch::row_group::<false>(wq, wd, stride, nb, r, b, 1, Q4_BLOCK_BYTES);
        // SAFETY: block b of rows r..r+4 and their scales are in bounds
        // (the caller's contract).
        let dw: [__m128; 4] = unsafe {
            stage(&mut staged, wq, r, stride, b);
            [
                _mm_set1_ps(*wd.add(r * nb + b)),
                _mm_set1_ps(*wd.add((r + 1) * nb + b)),
                _mm_set1_ps(*wd.add((r + 2) * nb + b)),
                _mm_set1_ps(*wd.add((r + 3) * nb + b)),
            ]
        };
        for (g, f) in acc.iter_mut().take(a.groups).enumerate() {
            let i = b * a.groups + g;
            let mut sums = [_mm_setzero_si128(); 4];
            for (c, &xc) in a.x[i].iter().enumerate() {
                for (j, s) in sums.iter_mut().enumerate() {
                    *s = _mm_add_epi16(*s, _mm_maddubs_epi16(staged[8 * j + c], xc));
                }
            }
            for j in 0..4 {
                let sumi = _mm_add_epi32(_mm_madd_epi16(sums[j], ones), a.bias[i]);
                f[j] = _mm_add_ps(f[j], _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(sumi), dw[j]), a.dx[i]));
            }
        }
    }
    for (g, f) in acc.iter().take(a.groups).enumerate() {
        for (j, v) in f.iter().enumerate() {
            let mut lanes = [0.0f32; LANES];
            // SAFETY: lanes holds four floats.
            unsafe { _mm_storeu_ps(lanes.as_mut_ptr(), *v) };
            for (t, &l) in lanes.iter().enumerate() {
                y[g * LANES + t][out + j] = l;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Q8_0 (from four tokens): `x86::matmul_widened!`, weights and activations
// widened to int16 with pmovsxbw.

/// Eight int8 quants at `p`, widened to int16.
///
/// # Safety
///
/// The CPU has SSE4.1; `p` is readable for 8 bytes.
#[target_feature(enable = "sse4.1")]
#[inline]
unsafe fn widen8(p: *const i8) -> __m128i {
    // SAFETY: the caller's contract.
    unsafe { _mm_cvtepi8_epi16(_mm_loadl_epi64(p.cast())) }
}

/// An activation block's quants as int16, eight a vector.
///
/// # Safety
///
/// The CPU has SSE4.1; `p` is readable for QK bytes.
#[target_feature(enable = "sse4.1")]
#[inline]
unsafe fn widen_x(p: *const i8) -> [__m128i; 4] {
    // SAFETY: the four loads read the QK = 4·8 bytes the caller guarantees.
    unsafe { [widen8(p), widen8(p.add(8)), widen8(p.add(16)), widen8(p.add(24))] }
}

/// A weight block's quants as int16, eight a vector: Q8_0's by pmovsxbw;
/// Q4_0's (which this tier's matmul never widens, its lanes being faster)
/// as SSE2 does, for the macro's generic signature.
///
/// # Safety
///
/// The CPU has SSE4.1; `p` is readable for one block.
#[target_feature(enable = "sse4.1")]
#[inline]
unsafe fn widen_w<const Q4: bool>(p: *const u8) -> [__m128i; 4] {
    // SAFETY: a block of the type (the caller's contract): QK = 4·8
    // quants for Q8_0.
    unsafe {
        if Q4 {
            super::sse2::widen_w::<true>(p)
        } else {
            widen_x(p.cast())
        }
    }
}

matmul_widened!("sse4.1");
