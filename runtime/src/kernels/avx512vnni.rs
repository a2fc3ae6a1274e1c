//! AVX-512 VNNI tier: Ice Lake, Sapphire Rapids, Zen 4 and later. Implements
//! the two matvecs and quantize_q8 with 512-bit vectors; the float kernels
//! are the AVX2 tier's (bound, not re-implemented: at the model's vector
//! lengths they are load-bound, and Zen 4 splits 512-bit float ops in two).
//!
//! This tier deliberately does not fall back on the avxvnni module: AVX-512
//! VNNI does not imply AVX-VNNI (Zen 4 has the first only), so everything
//! the avxvnni tier implements is implemented here again with EVEX code.
//!
//! Integer dot (DESIGN.md §5): 512-bit vpdpbusd, which multiplies unsigned
//! by signed bytes. Q8_0's matvec goes two blocks at a time: the activation
//! made unsigned with vpabsb and, AVX-512 having no vpsignb, its sign moved
//! onto the weight with a masked subtract from zero under its sign-bit mask
//! (`pair_dot`; where the activation is 0, |x| = 0 already zeroes the
//! product). Q4 row groups, and Q8_0's in the matmul, go four blocks at a
//! time (quads: one block per 128-bit lane, so four rows' sums reduce once
//! per four blocks) with unsigned weights as they are: Q4's nibbles, or
//! Q8_0's plus 128 (an xor shared by a tile's tokens), the accumulator
//! starting at −8·Σx or −128·Σx to re-centre them exactly (`quad_weights`,
//! `XQuad`); Q4 pairs likewise (`q4_pair_dot`). The matmul puts sixteen
//! tokens in a vector's lanes instead (`matmul_lanes`), its tiles taking
//! the rest.
//!
//! Only 512-bit EVEX forms and AVX2 (VEX) forms are used, never EVEX at 128
//! or 256 bits, so AVX512VL is not required.

#[cfg(target_arch = "x86")]
use std::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::prefetch;
use crate::core::quant::{Q4_BLOCK_BYTES, QK};
use crate::core::tensor::{packed_offset, QAct, QActs, QTensor, PACK_CHUNK};

// The fallback chain, skipping avxvnni (see above): the float kernels are AVX2's.
pub use super::avx2::{add, attn_mix, attn_scores, axpy_f32, dot_f32, rmsnorm, rope, silu_mul, softmax};

pub const TIER: &str = "avx512vnni";
/// The AVX2 tier's features (its float kernels are bound here) plus what the
/// EVEX code uses. Not avx_vnni, not avx512vl.
pub const REQUIRED_FEATURES: &[&str] = &[
    "sse2",
    "sse3",
    "ssse3",
    "sse4_1",
    "sse4_2",
    "avx",
    "fma",
    "avx2",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
];

// ---------------------------------------------------------------------------
// Integer path: matvec_q8, matvec_q4

pub fn matvec_q8(y: &mut [f32], w: &QTensor, x: &QAct, r0: usize, r1: usize) {
    let nb = super::scaffold::check_matvec_any_layout(y, w, x, r0, r1, w.cols, QK);
    let (y, q, d) = (y.as_mut_ptr(), w.q.as_ptr(), w.d.as_ptr());
    // SAFETY: AVX-512 F/BW/VNNI (and AVX2, FMA) are verified by the guard;
    // check_matvec bounded every row, block and scale the loop touches, and
    // a packed group occupies the same bytes as its four rows.
    unsafe {
        match w.packed {
            false => matvec::<false, false>(y, q, d, x, nb, w.cols, r0, r1),
            true => matvec::<false, true>(y, q, d, x, nb, w.cols, r0, r1),
        }
    }
}

pub fn matvec_q4(y: &mut [f32], w: &QTensor, x: &QAct, r0: usize, r1: usize) {
    let nb = super::scaffold::check_matvec_any_layout(y, w, x, r0, r1, w.row_bytes(), Q4_BLOCK_BYTES);
    let (y, q, d) = (y.as_mut_ptr(), w.q.as_ptr(), w.d.as_ptr());
    // SAFETY: as in matvec_q8, with Q4's row stride and block size.
    unsafe {
        match w.packed {
            false => matvec::<true, false>(y, q, d, x, nb, w.row_bytes(), r0, r1),
            true => matvec::<true, true>(y, q, d, x, nb, w.row_bytes(), r0, r1),
        }
    }
}

pub fn matmul_q8(y: &mut [&mut [f32]], w: &QTensor, x: &QActs, r0: usize, r1: usize) {
    let nb = super::scaffold::check_matmul_operands(y, w, x, r0, r1, w.cols, QK, true);
    let (q, d) = (w.q.as_ptr(), w.d.as_ptr());
    // SAFETY: as in matvec_q8, for every token (scaffold::check_matmul_operands).
    unsafe {
        match w.packed {
            false => matmul_lanes::<false, false>(y, q, d, x, nb, w.cols, r0, r1),
            true => matmul_lanes::<false, true>(y, q, d, x, nb, w.cols, r0, r1),
        }
    }
}

pub fn matmul_q4(y: &mut [&mut [f32]], w: &QTensor, x: &QActs, r0: usize, r1: usize) {
    let nb = super::scaffold::check_matmul_operands(y, w, x, r0, r1, w.row_bytes(), Q4_BLOCK_BYTES, true);
    let (q, d) = (w.q.as_ptr(), w.d.as_ptr());
    // SAFETY: as in matvec_q4, for every token (scaffold::check_matmul_operands).
    unsafe {
        match w.packed {
            false => matmul_lanes::<true, false>(y, q, d, x, nb, w.row_bytes(), r0, r1),
            true => matmul_lanes::<true, true>(y, q, d, x, nb, w.row_bytes(), r0, r1),
        }
    }
}

/// Two consecutive weight blocks as 64 int8 (block b in the low 256 bits).
/// Q4: 32 packed bytes hold both blocks' low and high nibbles; they are
/// arranged as [lo(b), hi(b), lo(b+1), hi(b+1)] and re-centred.
///
/// # Safety
///
/// `p` is readable for two blocks (2·QK bytes, Q4: 2·Q4_BLOCK_BYTES).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn load_w2<const Q4: bool>(p: *const u8) -> __m512i {
    if Q4 {
        // SAFETY: two Q4 blocks are 32 bytes (the caller's contract).
        let packed = unsafe { _mm256_loadu_si256(p.cast()) };
        let both = _mm512_inserti64x4(_mm512_castsi256_si512(packed), _mm256_srli_epi16(packed, 4), 1);
        // 128-bit lanes [p0 p1 s0 s1] → [p0 s0 p1 s1]
        let both = _mm512_shuffle_i64x2(both, both, 0b11_01_10_00);
        _mm512_sub_epi8(_mm512_and_si512(both, _mm512_set1_epi8(0x0F)), _mm512_set1_epi8(8))
    } else {
        // SAFETY: two Q8 blocks are 64 bytes (the caller's contract).
        unsafe { _mm512_loadu_si512(p.cast()) }
    }
}

/// One weight block in the low 256 bits, zeros above (the odd last block).
///
/// # Safety
///
/// `p` is readable for one block.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn load_w1<const Q4: bool>(p: *const u8) -> __m512i {
    // SAFETY: the caller's contract is load_w's.
    _mm512_zextsi256_si512(unsafe { super::avx2::load_w::<Q4>(p) })
}

/// Two activation blocks as |x| and the mask of negative bytes, prepared
/// once and shared by four rows.
#[derive(Clone, Copy)]
struct XPair {
    abs: __m512i,
    neg: __mmask64,
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn x_pair(x: __m512i) -> XPair {
    XPair {
        abs: _mm512_abs_epi8(x),
        neg: _mm512_movepi8_mask(x),
    }
}

/// Integer dots of two weight blocks with two activation blocks: int32
/// partials, lanes 0–7 for the first block and 8–15 for the second.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn pair_dot(w: __m512i, x: XPair) -> __m512i {
    let zero = _mm512_setzero_si512();
    let signed_w = _mm512_mask_sub_epi8(w, x.neg, zero, w);
    _mm512_dpbusd_epi32(zero, x.abs, signed_w)
}

/// Per-lane sums of four rows' dot vectors: a 4×4 transpose-and-add within
/// each 128-bit lane leaves lane L as [Σa, Σb, Σc, Σd] over that lane.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn hsum4_lanes(a: __m512i, b: __m512i, c: __m512i, d: __m512i) -> __m512i {
    let ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    let cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd))
}

/// Per-block sums of four rows' pair dots whose lanes 0–1 hold block b and
/// 2–3 block b+1: [a(b) b(b) c(b) d(b) a(b+1) b(b+1) c(b+1) d(b+1)].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn hsum4x2_epi32(a: __m512i, b: __m512i, c: __m512i, d: __m512i) -> __m256i {
    let s = hsum4_lanes(a, b, c, d);
    let s = _mm512_shuffle_i64x2(s, s, 0b11_01_10_00); // [L0 L2 L1 L3]
    _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1))
}

/// The per-block sums of four rows' Q4 pair dots (`q4_pair_dot`): lanes 0
/// and 2 hold block b, 1 and 3 block b+1, and lanes 2–3 count 16× (they
/// multiplied the high nibbles in place). Exact: those sums are multiples
/// of 16, so the arithmetic shift divides without rounding.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn hsum4x2_q4_epi32(a: __m512i, b: __m512i, c: __m512i, d: __m512i) -> __m256i {
    let s = hsum4_lanes(a, b, c, d);
    _mm256_add_epi32(
        _mm512_castsi512_si256(s),
        _mm256_srai_epi32(_mm512_extracti64x4_epi64(s, 1), 4),
    )
}

/// The Q4 fast path's activation pair: two blocks with their 128-bit lanes
/// reordered to [b 0–15, b+1 0–15, b 16–31, b+1 16–31], the order of the
/// nibbles `q4_pair_dot` lays out; and the accumulator start that
/// re-centres them: −8·Σx against the low nibbles and −128·Σx against the
/// high ones, which stay 16× their value. Σ(n−8)·x = Σn·x − 8·Σx exactly,
/// in int32.
#[derive(Clone, Copy)]
struct XPairQ4 {
    x: __m512i,
    bias: __m512i,
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn x_pair_q4(xb: __m512i) -> XPairQ4 {
    let x = _mm512_shuffle_i64x2(xb, xb, 0b11_01_10_00);
    let zero = _mm512_setzero_si512();
    // vpdpbusd multiplies unsigned (8, 128) by signed (x) bytes.
    let centre = _mm512_inserti64x4(_mm512_set1_epi8(8), _mm256_set1_epi8(-128), 1);
    XPairQ4 {
        x,
        bias: _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, centre, x)),
    }
}

/// Two packed Q4 blocks (32 bytes at `p`) dotted with an activation pair.
/// The nibbles stay unsigned, the multiplicand vpdpbusd wants, and the high
/// ones are masked in place rather than shifted down (`hsum4x2_q4_epi32`
/// divides their sums by 16), so a pair costs a broadcast load, one mask and
/// one vpdpbusd.
///
/// # Safety
///
/// `p` is readable for 32 bytes.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn q4_pair_dot(p: *const u8, x: XPairQ4) -> __m512i {
    // SAFETY: 32 bytes, readable by the caller's contract.
    let packed = _mm512_broadcast_i64x4(unsafe { _mm256_loadu_si256(p.cast()) });
    let nibbles = _mm512_and_si512(
        packed,
        _mm512_inserti64x4(_mm512_set1_epi8(0x0F), _mm256_set1_epi8(0xF0u8 as i8), 1),
    );
    _mm512_dpbusd_epi32(x.bias, nibbles, x.x)
}

/// The quad path's activations: four blocks as their first halves
/// [b 0–15, b+1 0–15, b+2 0–15, b+3 0–15] (against the low nibbles, or
/// the weights' first halves) and their second halves, and the accumulator
/// start that re-centres the unsigned weights exactly, in int32: −8·Σx for
/// Q4's nibbles, −128·Σx for Q8_0's weights plus 128 (`quad_weights`); and
/// the blocks' scales, laid out as the group's sums are.
#[derive(Clone, Copy)]
struct XQuad {
    lo: __m512i,
    hi: __m512i,
    bias: __m512i,
    /// The four blocks' scales, each over its lane group (block b+L in group L).
    dx: __m512,
}

/// # Safety
///
/// `x` is readable for 4·QK bytes, `d` for 4 scales.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn x_quad<const Q4: bool>(x: *const i8, d: *const f32) -> XQuad {
    // SAFETY: the four blocks and their scales, readable by the caller's contract.
    let (a, b, d4) = unsafe {
        (
            _mm512_loadu_si512(x.cast()),
            _mm512_loadu_si512(x.add(2 * QK).cast()),
            _mm_loadu_ps(d),
        )
    };
    let lo = _mm512_shuffle_i64x2(a, b, 0b10_00_10_00);
    let hi = _mm512_shuffle_i64x2(a, b, 0b11_01_11_01);
    let zero = _mm512_setzero_si512();
    let centre = _mm512_set1_epi8(if Q4 { 8 } else { -128 });
    // vpdpbusd multiplies unsigned (8 or 128) by signed (x) bytes.
    let centre_x = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, centre, lo), centre, hi);
    XQuad {
        lo,
        hi,
        bias: _mm512_sub_epi32(zero, centre_x),
        dx: _mm512_permutexvar_ps(
            _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
            _mm512_castps128_ps512(d4),
        ),
    }
}

/// Activation quads `matvec` prepares once per call rather than once per
/// four-row group: 64 (16 KiB of stack) cover K ≤ 8192; past that each
/// group prepares its own. Q4_0 in cache gained about a tenth (PERF.md).
const MAX_HOISTED_QUADS: usize = 64;

/// Q8_0's activation pairs, prepared once per call the same way: 128 cover
/// K ≤ 8192.
const MAX_HOISTED_PAIRS: usize = 128;

/// Σ of eight int32.
use super::avx2::hsum1 as hsum_epi32;

/// The activation of one matvec: blocks at `q` (QK bytes each), scales at
/// `d`, `nb` of each (`check_matvec`).
#[derive(Clone, Copy)]
struct Act {
    q: *const i8,
    d: *const f32,
}

impl Act {
    /// Blocks b and b+1.
    ///
    /// # Safety
    ///
    /// b + 2 ≤ nb.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn pair(self, b: usize) -> XPair {
        // SAFETY: blocks b and b+1 exist (the caller's contract).
        x_pair(unsafe { _mm512_loadu_si512(self.q.add(b * QK).cast()) })
    }

    /// Block b, zeros in the second half.
    ///
    /// # Safety
    ///
    /// b < nb.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn single(self, b: usize) -> XPair {
        // SAFETY: block b exists (the caller's contract).
        x_pair(_mm512_zextsi256_si512(unsafe {
            _mm256_loadu_si256(self.q.add(b * QK).cast())
        }))
    }

    /// Block b's scale.
    ///
    /// # Safety
    ///
    /// b < nb.
    #[inline(always)]
    unsafe fn dx(self, b: usize) -> f32 {
        // SAFETY: scale b exists (the caller's contract).
        unsafe { *self.d.add(b) }
    }

    /// Blocks b's and b+1's scales, each over four lanes.
    ///
    /// # Safety
    ///
    /// b + 2 ≤ nb.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn dx2(self, b: usize) -> __m256 {
        // SAFETY: scales b and b+1 exist (the caller's contract).
        let (lo, hi) = unsafe { (self.dx(b), self.dx(b + 1)) };
        _mm256_set_m128(_mm_set1_ps(hi), _mm_set1_ps(lo))
    }
}

/// Rows r..r+4 of a matrix: where their blocks and scales lie. `PACKED`:
/// the group is packed (`core::tensor::pack_row_groups`), one ascending
/// stream of 64-byte chunks from its first row's start, and its scales lie
/// block by block, the four rows' side by side.
#[derive(Clone, Copy)]
struct Group<const PACKED: bool> {
    wq: *const u8,
    wd: *const f32,
    stride: usize,
    nb: usize,
    r: usize,
}

impl<const PACKED: bool> Group<PACKED> {
    /// Byte `offset` of row r + j. In a packed matrix an offset below the
    /// last whole chunk, a multiple of PACK_CHUNK in every call but the
    /// odd last block's, skips packed_offset's branch.
    ///
    /// # Safety
    ///
    /// j < 4, offset < the row's nb blocks, and the group lies in the matrix.
    #[inline(always)]
    unsafe fn at(self, j: usize, offset: usize) -> *const u8 {
        let (wq, r, stride) = (self.wq, self.r, self.stride);
        // SAFETY: the byte lies in the group's rows (the caller's contract),
        // which a packed group occupies likewise.
        unsafe {
            if !PACKED {
                wq.add((r + j) * stride + offset)
            } else if offset.is_multiple_of(PACK_CHUNK) && offset + PACK_CHUNK <= stride {
                wq.add(r * stride + 4 * offset + j * PACK_CHUNK)
            } else {
                wq.add(r * stride + packed_offset(j, offset, stride))
            }
        }
    }

    /// Row r + j's scale of block b.
    ///
    /// # Safety
    ///
    /// j < 4, b < nb and the group lies in the matrix.
    #[inline(always)]
    unsafe fn dw(self, j: usize, b: usize) -> f32 {
        let (wd, r, nb) = (self.wd, self.r, self.nb);
        // SAFETY: the scale exists (the caller's contract); a packed group
        // keeps its four rows' scales of a block side by side.
        unsafe {
            if PACKED {
                *wd.add(r * nb + 4 * b + j)
            } else {
                *wd.add((r + j) * nb + b)
            }
        }
    }

    /// Scales of the four rows for block b.
    ///
    /// # Safety
    ///
    /// b < nb and the group lies in the matrix.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn dw4(self, b: usize) -> __m128 {
        let (wd, r, nb) = (self.wd, self.r, self.nb);
        // SAFETY: the four rows' scales for block b (the caller's contract),
        // side by side when packed.
        unsafe {
            if PACKED {
                _mm_loadu_ps(wd.add(r * nb + 4 * b))
            } else {
                super::x86::row_scales(wd, r, nb, b)
            }
        }
    }

    /// Scales of the four rows for blocks b and b+1, as [dw4(b), dw4(b+1)]:
    /// each row's two are adjacent, so four 8-byte loads and a transpose.
    ///
    /// # Safety
    ///
    /// b + 2 ≤ nb and the group lies in the matrix.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn dw4x2(self, b: usize) -> __m256 {
        let (wd, r, nb) = (self.wd, self.r, self.nb);
        if PACKED {
            // SAFETY: blocks b and b+1's scales of the group, side by side.
            return unsafe { _mm256_loadu_ps(wd.add(r * nb + 4 * b)) };
        }
        // Unaligned 8-byte reads: a row's scale pair is only 4-byte
        // aligned, and _mm_load_sd/_mm_loadh_pd dereference an f64
        // pointer, which must be 8-byte aligned (Miri caught it).
        let two = |j: usize, k: usize| {
            // SAFETY: rows r+j and r+k hold scales b and b+1.
            let (lo, hi) = unsafe {
                (
                    wd.add((r + j) * nb + b).cast::<i64>().read_unaligned(),
                    wd.add((r + k) * nb + b).cast::<i64>().read_unaligned(),
                )
            };
            _mm_castsi128_ps(_mm_set_epi64x(hi, lo))
        };
        let (v01, v23) = (two(0, 1), two(2, 3)); // [a(b) a(b+1) b(b) b(b+1)], rows 2–3 alike
        _mm256_set_m128(
            _mm_shuffle_ps::<0b11_01_11_01>(v01, v23),
            _mm_shuffle_ps::<0b10_00_10_00>(v01, v23),
        )
    }

    /// Scales of the four rows for blocks b..b+4, lane group L for block
    /// b+L (the layout of a quad's sums).
    ///
    /// # Safety
    ///
    /// b + 4 ≤ nb and the group lies in the matrix.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn dw_quad(self, b: usize) -> __m512 {
        let (wd, r, nb) = (self.wd, self.r, self.nb);
        if PACKED {
            // SAFETY: lane group L holds block b+L's four rows already.
            return unsafe { _mm512_loadu_ps(wd.add(r * nb + 4 * b)) };
        }
        // SAFETY: row r+j's scales b..b+4.
        let scales = |j: usize| unsafe { _mm_loadu_ps(wd.add((r + j) * nb + b)) };
        // Lane group j holds row j's four scales; transpose to group L = block b+L.
        let by_row = _mm512_insertf32x4(
            _mm512_insertf32x4(
                _mm512_insertf32x4(_mm512_castps128_ps512(scales(0)), scales(1), 1),
                scales(2),
                2,
            ),
            scales(3),
            3,
        );
        _mm512_permutexvar_ps(
            _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0),
            by_row,
        )
    }
}

/// The first `n` of `slots`, all written, as a slice.
///
/// # Safety
///
/// `slots[..n]` are initialised.
#[inline(always)]
unsafe fn assume_init<T>(slots: &[std::mem::MaybeUninit<T>], n: usize) -> &[T] {
    // SAFETY: MaybeUninit<T> has T's layout and the first n are initialised.
    unsafe { std::slice::from_raw_parts(slots.as_ptr().cast::<T>(), n) }
}

/// Quads for a group: four rows × four blocks make one 16-lane vector
/// of int32 sums, lane group L for block b+L, each lane a running
/// fma(sumi·dw, dx, acc) of its own. `hoisted`: the quads prepared once
/// per call, when they fit (empty when not).
///
/// # Safety
///
/// The CPU has the tier's features, `check_matvec` accepted the matvec and
/// the group lies in it; quads = nb / 4.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn group_quads<const Q4: bool, const PACKED: bool>(
    g: Group<PACKED>,
    act: Act,
    quads: usize,
    hoisted: &[XQuad],
) -> __m512 {
    let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
    let mut acc4 = _mm512_setzero_ps();
    for qd in 0..quads {
        let b = 4 * qd;
        // Packed or not, the group is prefetched ahead in software: an
        // Intel Xeon's hardware prefetchers alone fell far short of the
        // probe cold (PERF.md), and Q4_0 decode on the Zen 4 needs it too
        // (packed Q8_0's matvec pairs go without: `group_pairs`).
        prefetch::row_group::<PACKED>(g.wq, g.wd, g.stride, g.nb, g.r, b, 4, bb);
        // SAFETY: blocks b..b+4 of the activation and of the group's rows
        // exist (b + 4 ≤ 4·quads ≤ nb), with their scales.
        let (sumi, dw, xb) = unsafe {
            let xb = match hoisted.get(qd) {
                Some(&xb) => xb,
                None => x_quad::<Q4>(act.q.add(b * QK), act.d.add(b)),
            };
            let sumi = hsum4_lanes(
                quad_dot(quad_weights::<Q4, PACKED>(g, 0, b), &xb),
                quad_dot(quad_weights::<Q4, PACKED>(g, 1, b), &xb),
                quad_dot(quad_weights::<Q4, PACKED>(g, 2, b), &xb),
                quad_dot(quad_weights::<Q4, PACKED>(g, 3, b), &xb),
            );
            (sumi, g.dw_quad(b), xb)
        };
        acc4 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sumi), dw), xb.dx, acc4);
    }
    acc4
}

/// Block pairs for a group, from block `first`, added to `acc`: [even-block
/// sums, odd-block sums] of the four rows, each lane a running
/// fma(sumi·dw, dx, acc). `prefetch`: ask for the group's lines ahead in
/// software (`prefetch::row_group`).
/// `hoisted`: Q8_0's pairs (with their scales) prepared once per call
/// (empty when not).
///
/// # Safety
///
/// As `group_quads`; first + 2·pairs ≤ nb.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn group_pairs<const Q4: bool, const PACKED: bool>(
    g: Group<PACKED>,
    act: Act,
    first: usize,
    pairs: usize,
    hoisted: &[(XPair, __m256)],
    mut acc: __m256,
    prefetch: bool,
) -> __m256 {
    let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
    for p in 0..pairs {
        let b = first + 2 * p;
        if prefetch {
            prefetch::row_group::<PACKED>(g.wq, g.wd, g.stride, g.nb, g.r, b, 2, bb);
        }
        // SAFETY: blocks b and b+1 of the activation and of the group's
        // rows exist, with their scales.
        let (sumi, dw, dx) = unsafe {
            if Q4 {
                let xb = x_pair_q4(_mm512_loadu_si512(act.q.add(b * QK).cast()));
                let sumi = hsum4x2_q4_epi32(
                    q4_pair_dot(g.at(0, b * bb), xb),
                    q4_pair_dot(g.at(1, b * bb), xb),
                    q4_pair_dot(g.at(2, b * bb), xb),
                    q4_pair_dot(g.at(3, b * bb), xb),
                );
                (sumi, g.dw4x2(b), act.dx2(b))
            } else {
                let (xb, dx) = match hoisted.get(p) {
                    Some(&pair) => pair,
                    None => (act.pair(b), act.dx2(b)),
                };
                let sumi = hsum4x2_epi32(
                    pair_dot(load_w2::<Q4>(g.at(0, b * bb)), xb),
                    pair_dot(load_w2::<Q4>(g.at(1, b * bb)), xb),
                    pair_dot(load_w2::<Q4>(g.at(2, b * bb)), xb),
                    pair_dot(load_w2::<Q4>(g.at(3, b * bb)), xb),
                );
                (sumi, g.dw4x2(b), dx)
            }
        };
        acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sumi), dw), dx, acc);
    }
    acc
}

/// The odd last block b of a group, added to the even sums of `acc` only.
///
/// # Safety
///
/// As `group_quads`; b = nb − 1.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn group_last_block<const Q4: bool, const PACKED: bool>(
    g: Group<PACKED>,
    act: Act,
    b: usize,
    acc: __m256,
) -> __m256 {
    let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
    // SAFETY: block b of the activation and of the group's rows exists,
    // with its scales.
    let (sumi, dw, dx) = unsafe {
        let xb = act.single(b);
        let sumi = hsum4x2_epi32(
            pair_dot(load_w1::<Q4>(g.at(0, b * bb)), xb),
            pair_dot(load_w1::<Q4>(g.at(1, b * bb)), xb),
            pair_dot(load_w1::<Q4>(g.at(2, b * bb)), xb),
            pair_dot(load_w1::<Q4>(g.at(3, b * bb)), xb),
        );
        (sumi, g.dw4(b), act.dx(b))
    };
    // Only the low (even) half: the odd sums must stay untouched.
    let t = _mm_mul_ps(_mm_cvtepi32_ps(_mm256_castsi256_si128(sumi)), dw);
    let even = _mm_fmadd_ps(t, _mm_set1_ps(dx), _mm256_castps256_ps128(acc));
    _mm256_insertf128_ps(acc, even, 0)
}

/// The four rows' results: the quads' lane sums, then the pairs',
/// ((L0 + L2) + (L1 + L3)) + (even + odd), as `tail_row` adds them.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn group_total<const Q4: bool>(acc4: __m512, acc: __m256) -> __m128 {
    let sums = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    if !Q4 {
        return sums;
    }
    let q = _mm256_add_ps(
        _mm512_castps512_ps256(acc4),
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc4), 1)),
    );
    _mm_add_ps(_mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)), sums)
}

/// One row-major row, with the group's sums in the group's order: the quad
/// lanes block by block, then even and odd blocks.
///
/// # Safety
///
/// The CPU has the tier's features; `row` holds nb blocks, `dw` nb scales,
/// the activation nb blocks; quads and pairs are the group's.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn tail_row<const Q4: bool>(
    row: *const u8,
    dw: *const f32,
    act: Act,
    nb: usize,
    quads: usize,
    pairs: usize,
) -> f32 {
    let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
    // SAFETY: every b below is < nb (the caller's contract).
    let dw = |b: usize| unsafe { *dw.add(b) };
    let mut quad = [0.0f32; 4];
    for qd in 0..quads {
        for half in 0..2 {
            let b = 4 * qd + 2 * half;
            // SAFETY: blocks b and b+1 exist (b + 2 ≤ 4·quads ≤ nb).
            let (v, dx) = unsafe {
                (
                    pair_dot(load_w2::<Q4>(row.add(b * bb)), act.pair(b)),
                    [act.dx(b), act.dx(b + 1)],
                )
            };
            for (i, sumi) in [_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)]
                .into_iter()
                .enumerate()
            {
                let lane = &mut quad[2 * half + i];
                *lane = (hsum_epi32(sumi) as f32 * dw(b + i)).mul_add(dx[i], *lane);
            }
        }
    }
    let (mut even, mut odd) = (0.0f32, 0.0f32);
    for p in 0..pairs {
        let b = 4 * quads + 2 * p;
        // SAFETY: blocks b and b+1 exist (b + 2 ≤ nb).
        let (v, dx0, dx1) = unsafe {
            (
                pair_dot(load_w2::<Q4>(row.add(b * bb)), act.pair(b)),
                act.dx(b),
                act.dx(b + 1),
            )
        };
        let lo = hsum_epi32(_mm512_castsi512_si256(v));
        let hi = hsum_epi32(_mm512_extracti64x4_epi64(v, 1));
        even = (lo as f32 * dw(b)).mul_add(dx0, even);
        odd = (hi as f32 * dw(b + 1)).mul_add(dx1, odd);
    }
    if nb % 2 == 1 {
        let b = nb - 1;
        // SAFETY: block b = nb − 1 exists.
        let (v, dx) = unsafe { (pair_dot(load_w1::<Q4>(row.add(b * bb)), act.single(b)), act.dx(b)) };
        let lo = hsum_epi32(_mm512_castsi512_si256(v));
        even = (lo as f32 * dw(b)).mul_add(dx, even);
    }
    if Q4 {
        ((quad[0] + quad[2]) + (quad[1] + quad[3])) + (even + odd)
    } else {
        even + odd
    }
}

/// Rows four at a time, blocks two at a time, each activation pair loaded
/// once for all four rows; an odd last block runs with zeros in its second
/// half; then a row-at-a-time tail. `PACKED`: the matrix's whole four-row
/// groups are packed (`core::tensor::pack_row_groups`), so a group reads one
/// ascending stream; the tail rows are row-major either way. Q4 runs whole
/// quads of blocks first.
///
/// Each row keeps two sums, even blocks and odd blocks, each
/// fma(sumi·dw, dx, sum) in block order, and returns even + odd (Q4: four
/// more, one per quad lane, and ((L0 + L2) + (L1 + L3)) + (even + odd)), in
/// the group and in the tail alike, so a row's result does not depend on
/// how [r0, r1) splits into groups.
///
/// # Safety
///
/// The CPU has AVX-512 F/BW/VNNI, AVX2 and FMA; `check_matvec_any_layout`
/// has accepted these arguments.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn matvec<const Q4: bool, const PACKED: bool>(
    y: *mut f32,
    wq: *const u8,
    wd: *const f32,
    x: &QAct,
    nb: usize,
    stride: usize,
    r0: usize,
    r1: usize,
) {
    let act = Act {
        q: x.q.as_ptr(),
        d: x.d.as_ptr(),
    };
    let quads = if Q4 { nb / 4 } else { 0 };
    let pairs = (nb - 4 * quads) / 2;
    // Every row group reads the same activation quads (Q4) or pairs with
    // their scales (Q8_0): prepare them once.
    let mut xquads = [std::mem::MaybeUninit::<XQuad>::uninit(); MAX_HOISTED_QUADS];
    // Loops in this function, not closures: as `.then(|| …)` closures they
    // were not inlined, and Q8_0 in cache lost speed.
    let hoisted_quads = if quads <= MAX_HOISTED_QUADS {
        for (qd, slot) in xquads[..quads].iter_mut().enumerate() {
            // SAFETY: blocks 4·qd..4·qd+4 exist (4·quads ≤ nb).
            slot.write(unsafe { x_quad::<Q4>(act.q.add(4 * qd * QK), act.d.add(4 * qd)) });
        }
        // SAFETY: slots 0..quads were written just above.
        unsafe { assume_init(&xquads, quads) }
    } else {
        &[]
    };
    let mut xpairs = [std::mem::MaybeUninit::<(XPair, __m256)>::uninit(); MAX_HOISTED_PAIRS];
    let hoisted_pairs = if !Q4 && pairs <= MAX_HOISTED_PAIRS {
        for (p, slot) in xpairs[..pairs].iter_mut().enumerate() {
            let b = 4 * quads + 2 * p;
            // SAFETY: blocks b and b+1 exist (4·quads + 2·pairs ≤ nb).
            slot.write(unsafe { (act.pair(b), act.dx2(b)) });
        }
        // SAFETY: slots 0..pairs were written just above.
        unsafe { assume_init(&xpairs, pairs) }
    } else {
        &[]
    };
    let mut r = r0;
    while r + 4 <= r1 {
        let g = Group::<PACKED> { wq, wd, stride, nb, r };
        // SAFETY: rows r..r+4 lie in [r0, r1), which check_matvec_any_layout
        // bounded (a packed group in the same bytes as its rows).
        let sums = unsafe {
            let acc4 = group_quads::<Q4, PACKED>(g, act, quads, hoisted_quads);
            // Packed Q8_0 streams without software prefetch (on non-Intel
            // CPUs, where it is the layout): the hardware prefetchers
            // follow its one ascending stream alone, and SmolLM2-135M
            // decode on the Zen 4 ran faster so, 1 thread 152–166 →
            // 185–194 tok/s (62% → 78–80% of the peak probe), 2 threads
            // 226–235 → 236–253 (PERF.md). Q4_0 (quads) needs it: 297–299
            // tok/s without, 348–364 with.
            let prefetch = Q4 || !PACKED;
            let mut acc =
                group_pairs::<Q4, PACKED>(g, act, 4 * quads, pairs, hoisted_pairs, _mm256_setzero_ps(), prefetch);
            if nb % 2 == 1 {
                acc = group_last_block::<Q4, PACKED>(g, act, nb - 1, acc);
            }
            group_total::<Q4>(acc4, acc)
        };
        // SAFETY: y holds r1 − r0 rows.
        unsafe { _mm_storeu_ps(y.add(r - r0), sums) };
        r += 4;
    }
    while r < r1 {
        // SAFETY: row r < r1 is row-major (after the last whole group, or an
        // unpacked matrix) and bounded by check_matvec_any_layout; y holds
        // r1 − r0 rows.
        unsafe {
            *y.add(r - r0) = tail_row::<Q4>(wq.add(r * stride), wd.add(r * nb), act, nb, quads, pairs);
        }
        r += 1;
    }
}

// ---------------------------------------------------------------------------
// matmul_q8, matmul_q4: the matvec's groups, each weight block shared by a
// tile of tokens

/// Tokens per tile: four rows × four tokens of int32 dots, the tokens'
/// float accumulators and four rows' weights fit the 32 registers.
const TOKENS: usize = 4;

/// Four-row groups run one tile after another: the tile's activations are
/// prepared once for them all, and their weights stay in cache between
/// tiles.
const CHUNK_GROUPS: usize = 8;

/// A tile's activation quads per token, prepared once per chunk when a
/// row has at most this many (K ≤ 4096).
const TILE_QUADS: usize = 32;

/// A row's four blocks b..b+4 as vpdpbusd's unsigned operands, in the lane
/// order of an `XQuad`'s halves. Q4: the low and high nibbles of the
/// packed bytes (one 64-byte load). Q8_0 (the matmul's): the blocks' first
/// and second halves (two 64-byte loads, regrouped by 128-bit lane), each
/// weight plus 128 (an xor), which `XQuad`'s −128·Σx takes back out.
/// Shared by a tile's tokens.
///
/// # Safety
///
/// Blocks b..b+4 of row j of the group exist (b is a multiple of 4, so
/// each 64-byte piece is one `Group::at` chunk when packed).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn quad_weights<const Q4: bool, const PACKED: bool>(g: Group<PACKED>, j: usize, b: usize) -> (__m512i, __m512i) {
    if Q4 {
        // SAFETY: the quad's 64 bytes (the caller's contract).
        let packed = unsafe { _mm512_loadu_si512(g.at(j, b * Q4_BLOCK_BYTES).cast()) };
        let mask = _mm512_set1_epi8(0x0F);
        return (
            _mm512_and_si512(packed, mask),
            _mm512_and_si512(_mm512_srli_epi16(packed, 4), mask),
        );
    }
    // SAFETY: the quad's 128 bytes, 64 at a time (the caller's contract).
    let (first, second) = unsafe {
        (
            _mm512_loadu_si512(g.at(j, b * QK).cast()),
            _mm512_loadu_si512(g.at(j, b * QK + 2 * QK).cast()),
        )
    };
    let plus_128 = _mm512_set1_epi8(-128);
    (
        _mm512_xor_si512(_mm512_shuffle_i64x2(first, second, 0b10_00_10_00), plus_128),
        _mm512_xor_si512(_mm512_shuffle_i64x2(first, second, 0b11_01_11_01), plus_128),
    )
}

/// One row's int32 partial sums of a quad, lane group L for block b+L.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn quad_dot(w: (__m512i, __m512i), x: &XQuad) -> __m512i {
    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(x.bias, w.0, x.lo), w.1, x.hi)
}

/// `group_quads` for T tokens: each quad of weights is loaded and split
/// once, then each token's lanes take `group_quads`'s steps.
///
/// # Safety
///
/// As `group_quads`, for every token in `act`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn group_quads_tile<const Q4: bool, const PACKED: bool, const T: usize>(
    g: Group<PACKED>,
    act: &[Act; T],
    quads: usize,
    hoisted: &[XQuad],
) -> [__m512; T] {
    let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
    let mut acc4 = [_mm512_setzero_ps(); T];
    for qd in 0..quads {
        let b = 4 * qd;
        prefetch::row_group::<PACKED>(g.wq, g.wd, g.stride, g.nb, g.r, b, 4, bb);
        // SAFETY: blocks b..b+4 of every token's activation and of the
        // group's rows exist (b + 4 ≤ 4·quads ≤ nb), with their scales.
        unsafe {
            // Spelled out, not `map`: a closure here was not inlined.
            let w = [
                quad_weights::<Q4, PACKED>(g, 0, b),
                quad_weights::<Q4, PACKED>(g, 1, b),
                quad_weights::<Q4, PACKED>(g, 2, b),
                quad_weights::<Q4, PACKED>(g, 3, b),
            ];
            let dw = g.dw_quad(b);
            for t in 0..T {
                let xb = match hoisted.get(t * quads + qd) {
                    Some(&xb) => xb,
                    None => x_quad::<Q4>(act[t].q.add(b * QK), act[t].d.add(b)),
                };
                let sumi = hsum4_lanes(
                    quad_dot(w[0], &xb),
                    quad_dot(w[1], &xb),
                    quad_dot(w[2], &xb),
                    quad_dot(w[3], &xb),
                );
                acc4[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sumi), dw), xb.dx, acc4[t]);
            }
        }
    }
    acc4
}

/// Q8_0's quads for T tokens, added as the matvec adds its pairs: the
/// matvec runs Q8_0 two blocks at a time (its sign transfer per row and
/// token costs no more than the quad's regrouping there, and streams
/// row-major matrices faster), so each quad's int32 sums, lane groups
/// [b, b+1] and [b+2, b+3], take two of `group_pairs`'s float steps in
/// block order. The integer work is the quad path's: the weights loaded,
/// regrouped and biased once per tile, one four-row reduction per four
/// blocks.
///
/// # Safety
///
/// As `group_quads`, for every token in `act`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn group_quads_q8_tile<const PACKED: bool, const T: usize>(
    g: Group<PACKED>,
    act: &[Act; T],
    quads: usize,
    hoisted: &[XQuad],
) -> [__m256; T] {
    let mut acc = [_mm256_setzero_ps(); T];
    for qd in 0..quads {
        let b = 4 * qd;
        prefetch::row_group::<PACKED>(g.wq, g.wd, g.stride, g.nb, g.r, b, 4, QK);
        // SAFETY: blocks b..b+4 of every token's activation and of the
        // group's rows exist (b + 4 ≤ 4·quads ≤ nb), with their scales.
        unsafe {
            let w = [
                quad_weights::<false, PACKED>(g, 0, b),
                quad_weights::<false, PACKED>(g, 1, b),
                quad_weights::<false, PACKED>(g, 2, b),
                quad_weights::<false, PACKED>(g, 3, b),
            ];
            let (dw01, dw23) = (g.dw4x2(b), g.dw4x2(b + 2));
            for t in 0..T {
                let xb = match hoisted.get(t * quads + qd) {
                    Some(&xb) => xb,
                    None => x_quad::<false>(act[t].q.add(b * QK), act[t].d.add(b)),
                };
                let sumi = hsum4_lanes(
                    quad_dot(w[0], &xb),
                    quad_dot(w[1], &xb),
                    quad_dot(w[2], &xb),
                    quad_dot(w[3], &xb),
                );
                let (s01, s23) = (_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
                let dx23 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xb.dx), 1));
                let a = _mm256_fmadd_ps(
                    _mm256_mul_ps(_mm256_cvtepi32_ps(s01), dw01),
                    _mm512_castps512_ps256(xb.dx),
                    acc[t],
                );
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s23), dw23), dx23, a);
            }
        }
    }
    acc
}

/// One group (rows r..r+4) for tokens t0..t0+T, in `matvec`'s order, its
/// results stored at `out` of y[0..T]. Returns T.
///
/// # Safety
///
/// As `matmul`; tokens t0..t0+T exist, y holds at least T of them, and the
/// group's rows lie in [r0, r1) (`out` = r − r0).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn group_tile<const Q4: bool, const PACKED: bool, const T: usize>(
    y: &mut [&mut [f32]],
    g: Group<PACKED>,
    x: &QActs,
    t0: usize,
    quads: usize,
    pairs: usize,
    hoisted: &[XQuad],
    out: usize,
) -> usize {
    let (cols, xnb) = (x.cols, x.cols / QK);
    // Token t's activation at t·cols, as `QActs::token` slices it. A loop,
    // not `from_fn`, which was not inlined.
    let mut act = [Act {
        q: x.q.as_ptr(),
        d: x.d.as_ptr(),
    }; T];
    for (t, a) in act.iter_mut().enumerate() {
        a.q = x.q.as_ptr().wrapping_add((t0 + t) * cols);
        a.d = x.d.as_ptr().wrapping_add((t0 + t) * xnb);
    }
    let nb = g.nb;
    // SAFETY: every token's activation holds nb blocks and the group's rows
    // are in bounds (the caller's contract); y[t] holds out + 4 values.
    unsafe {
        let (acc4, mut acc) = if Q4 {
            let acc4 = group_quads_tile::<true, PACKED, T>(g, &act, quads, hoisted);
            (acc4, [_mm256_setzero_ps(); T])
        } else {
            let acc = group_quads_q8_tile::<PACKED, T>(g, &act, quads, hoisted);
            ([_mm512_setzero_ps(); T], acc)
        };
        // At most one pair after the quads: the matvec's own steps.
        for t in 0..T {
            acc[t] = group_pairs::<Q4, PACKED>(g, act[t], 4 * quads, pairs, &[], acc[t], true);
        }
        for t in 0..T {
            if nb % 2 == 1 {
                acc[t] = group_last_block::<Q4, PACKED>(g, act[t], nb - 1, acc[t]);
            }
            _mm_storeu_ps(y[t].as_mut_ptr().add(out), group_total::<Q4>(acc4[t], acc[t]));
        }
    }
    T
}

/// The matmul: `matvec`'s four-row groups from r0, `CHUNK_GROUPS` at a
/// time; for each chunk the tokens go `TOKENS` at a time (then a tile of
/// the leftover count), each tile's activations prepared once for the
/// chunk, and each weight block is loaded once per tile rather than once
/// per token. The rows after the last whole group are `matvec`'s own tail,
/// token by token. Every (row, token) keeps the matvec's accumulators and
/// float steps, so the chunking changes no bit.
///
/// # Safety
///
/// The CPU has AVX-512 F/BW/VNNI, AVX2 and FMA; `scaffold::check_matmul_operands`
/// accepted these arguments (with `check_matvec_any_layout`).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn matmul<const Q4: bool, const PACKED: bool>(
    y: &mut [&mut [f32]],
    wq: *const u8,
    wd: *const f32,
    x: &QActs,
    nb: usize,
    stride: usize,
    r0: usize,
    r1: usize,
) {
    let quads = nb / 4;
    let pairs = (nb - 4 * quads) / 2;
    let n = x.n;
    let (cols, xnb) = (x.cols, x.cols / QK);
    let mut xquads = [std::mem::MaybeUninit::<XQuad>::uninit(); TOKENS * TILE_QUADS];
    let groups_end = r0 + (r1 - r0) / 4 * 4;
    let mut r = r0;
    while r < groups_end {
        let chunk_end = groups_end.min(r + 4 * CHUNK_GROUPS);
        let mut t = 0;
        while t < n {
            let tn = TOKENS.min(n - t);
            let act = |tt: usize| Act {
                q: x.q.as_ptr().wrapping_add((t + tt) * cols),
                d: x.d.as_ptr().wrapping_add((t + tt) * xnb),
            };
            // Loops in this function, not closures over the preparation:
            // those were not inlined (as in `matvec`).
            let mut hoisted: &[XQuad] = &[];
            if quads <= TILE_QUADS {
                for tt in 0..tn {
                    let a = act(tt);
                    for qd in 0..quads {
                        // SAFETY: blocks 4·qd..4·qd+4 of token t + tt exist.
                        let xq = unsafe { x_quad::<Q4>(a.q.add(4 * qd * QK), a.d.add(4 * qd)) };
                        xquads[tt * quads + qd].write(xq);
                    }
                }
                // SAFETY: slots 0..tn·quads were written just above.
                hoisted = unsafe { assume_init(&xquads, tn * quads) };
            }
            let mut gr = r;
            while gr < chunk_end {
                let g = Group::<PACKED> {
                    wq,
                    wd,
                    stride,
                    nb,
                    r: gr,
                };
                let ys = &mut y[t..];
                // SAFETY: rows gr..gr+4 lie in [r0, r1), bounded for every
                // token.
                unsafe {
                    match tn {
                        1 => group_tile::<Q4, PACKED, 1>(ys, g, x, t, quads, pairs, hoisted, gr - r0),
                        2 => group_tile::<Q4, PACKED, 2>(ys, g, x, t, quads, pairs, hoisted, gr - r0),
                        3 => group_tile::<Q4, PACKED, 3>(ys, g, x, t, quads, pairs, hoisted, gr - r0),
                        _ => group_tile::<Q4, PACKED, TOKENS>(ys, g, x, t, quads, pairs, hoisted, gr - r0),
                    }
                };
                gr += 4;
            }
            t += tn;
        }
        r = chunk_end;
    }
    if r < r1 {
        for (t, yt) in y.iter_mut().enumerate() {
            // SAFETY: rows r..r1 were bounded for this token (a packed
            // matrix's range ends between groups, so these are row-major);
            // yt holds r1 − r0 rows.
            unsafe { matvec::<Q4, PACKED>(yt.as_mut_ptr().add(r - r0), wq, wd, &x.token(t), nb, stride, r, r1) };
        }
    }
}

// ---------------------------------------------------------------------------
// matmul_lanes: sixteen tokens in a vector's int32 lanes
//
// For whole groups of sixteen tokens the matmul turns the tile around. The
// tokens' activations are transposed once per call so that one 64-byte load
// holds the same four quants of all sixteen (`LaneActs`), and each row's
// four weights are broadcast to every lane by the load itself. A row's block
// sums then come out a lane per token with no horizontal add and no
// regrouping: eight vpdpbusd a block, unsigned weights by signed
// activations, each lane starting from −128·Σx (Q8_0) or −8·Σx (Q4_0) of
// its token's block, so the int32 sums are the matvec's.
//
// Each four-row group's weights are first copied to the stack once for all
// the lane groups (`group_weights`): Q8_0's plus 128 (an xor), Q4_0's
// nibbles one a byte. Q4_0 then runs Q8_0's loop, and the hot loop
// broadcasts from one small contiguous buffer, packed matrix or not.
//
// Each lane takes the matvec's float step into the matvec's own
// accumulator for that block (the quad lanes L0–L3, then even and odd),
// and the accumulators are added in the matvec's order, so every output
// keeps the matvec's bits.
//
// Token counts past the last sixteen, and rows too wide for the stack
// buffer, go through `matmul`'s tiles.

/// Tokens a lane group holds: one per int32 lane.
const LANES: usize = 16;

/// A lane group's activations, transposed so that one load gives the
/// same four quants (4c..4c+4) of each of its tokens, lane t for token t:
/// `x[b][c]` for block b, `bias[b]` the tokens' −128·Σx (Q8_0) or −8·Σx
/// (Q4_0) of block b, `dx[b]` their scales of block b.
struct LaneActs<'a> {
    x: &'a [[__m512i; 8]],
    bias: &'a [__m512i],
    dx: &'a [__m512],
}

/// Vectors of `LaneActs` the stack holds for one matmul call: 96 KiB,
/// one lane group up to K = 4864.
const LANE_STACK: usize = 98304 / std::mem::size_of::<__m512i>();

/// Lane groups a pass over the rows takes at most: 128 tokens,
/// `--batch`'s largest.
const PASS_GROUPS: usize = 128 / LANES;

/// Vectors one lane group's `LaneActs` take for `nb` blocks.
const fn lane_vectors(nb: usize) -> usize {
    10 * nb
}

/// Blocks a row has at most when one lane group fits `LANE_STACK`.
const MAX_LANE_BLOCKS: usize = LANE_STACK / lane_vectors(1);

/// The group's weights block by block as vpdpbusd's unsigned operand,
/// block b of row j at 4b + j: Q8_0's plus 128, Q4_0's nibbles one a
/// byte, in quant order.
///
/// # Safety
///
/// The CPU has the tier's features, the group lies in the matrix and
/// `out` holds 4·nb blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn group_weights<const Q4: bool, const PACKED: bool>(g: Group<PACKED>, out: &mut [[u8; QK]]) {
    let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
    let (flip, low4) = (_mm256_set1_epi8(-128), _mm_set1_epi8(0x0F));
    for b in 0..g.nb {
        prefetch::row_group::<PACKED>(g.wq, g.wd, g.stride, g.nb, g.r, b, 1, bb);
        for j in 0..4 {
            let dst = out[4 * b + j].as_mut_ptr();
            // SAFETY: block b of row r+j lies in one packed chunk (bb
            // divides PACK_CHUNK) and in bounds (the caller's contract);
            // dst holds QK bytes.
            unsafe {
                let src = g.at(j, b * bb);
                if Q4 {
                    // Low nibbles are quants 0–15, high ones 16–31.
                    let packed = _mm_loadu_si128(src.cast());
                    let (lo, hi) = (
                        _mm_and_si128(packed, low4),
                        _mm_and_si128(_mm_srli_epi16(packed, 4), low4),
                    );
                    _mm256_storeu_si256(dst.cast(), _mm256_set_m128i(hi, lo));
                } else {
                    _mm256_storeu_si256(dst.cast(), _mm256_xor_si256(_mm256_loadu_si256(src.cast()), flip));
                }
            }
        }
    }
}

/// Transposes tokens t0..t0+LANES of `x` into `slots` (`lane_vectors`
/// long) and returns the view.
///
/// # Safety
///
/// The CPU has the tier's features and x holds tokens t0..t0+LANES.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn lane_acts<'a, const Q4: bool>(
    x: &QActs,
    t0: usize,
    slots: &'a mut [std::mem::MaybeUninit<__m512i>],
) -> LaneActs<'a> {
    let nb = x.cols / QK;
    let tokens: [QAct; LANES] = std::array::from_fn(|t| x.token(t0 + t));
    let (xs, rest) = slots.split_at_mut(8 * nb);
    let (bias, dx) = rest.split_at_mut(nb);
    // SAFETY: a LANES-long i32 array is one vector.
    let lanes = |v: [i32; LANES]| unsafe { _mm512_loadu_si512(v.as_ptr().cast()) };
    let centre = if Q4 { 8 } else { 128 };
    for b in 0..nb {
        for c in 0..8 {
            xs[b * 8 + c].write(lanes(std::array::from_fn(|t| {
                let q = &tokens[t].q[b * QK + 4 * c..b * QK + 4 * c + 4];
                i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8])
            })));
        }
        bias[b].write(lanes(std::array::from_fn(|t| {
            -centre
                * tokens[t].q[b * QK..(b + 1) * QK]
                    .iter()
                    .map(|&v| i32::from(v))
                    .sum::<i32>()
        })));
        // The scales' bits, read back as floats through `LaneActs`.
        dx[b].write(lanes(std::array::from_fn(|t| tokens[t].d[b].to_bits() as i32)));
    }
    // SAFETY: every slot of the three parts was written above;
    // MaybeUninit<T> has T's layout, and __m512 __m512i's.
    unsafe {
        LaneActs {
            x: std::slice::from_raw_parts(xs.as_ptr().cast::<[__m512i; 8]>(), nb),
            bias: std::slice::from_raw_parts(bias.as_ptr().cast::<__m512i>(), nb),
            dx: std::slice::from_raw_parts(dx.as_ptr().cast::<__m512>(), nb),
        }
    }
}

/// The matmul for whole lane groups (see above), `matmul`'s tiles for the
/// rest; the rows after the last whole group are the matvec's, per token.
///
/// # Safety
///
/// As `matmul`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn matmul_lanes<const Q4: bool, const PACKED: bool>(
    y: &mut [&mut [f32]],
    wq: *const u8,
    wd: *const f32,
    x: &QActs,
    nb: usize,
    stride: usize,
    r0: usize,
    r1: usize,
) {
    let fit = (LANE_STACK / lane_vectors(nb)).min(PASS_GROUPS);
    let groups = x.n / LANES;
    let rows4 = r0 + (r1 - r0) / 4 * 4;
    if groups == 0 || rows4 == r0 || fit == 0 {
        // SAFETY: the caller's contract is matmul's.
        return unsafe { matmul::<Q4, PACKED>(y, wq, wd, x, nb, stride, r0, r1) };
    }
    let mut stack = [std::mem::MaybeUninit::<__m512i>::uninit(); LANE_STACK];
    let mut weights = [[0u8; QK]; 4 * MAX_LANE_BLOCKS];
    let mut first = 0;
    while first < groups {
        let pass = fit.min(groups - first);
        let mut acts: [Option<LaneActs>; PASS_GROUPS] = Default::default();
        for (g, slots) in stack.chunks_exact_mut(lane_vectors(nb)).take(pass).enumerate() {
            // SAFETY: the tier's features (the caller's contract); the
            // pass's tokens exist.
            acts[g] = Some(unsafe { lane_acts::<Q4>(x, (first + g) * LANES, slots) });
        }
        let ys = &mut y[first * LANES..(first + pass) * LANES];
        let mut r = r0;
        while r < rows4 {
            let g = Group::<PACKED> { wq, wd, stride, nb, r };
            let w = &mut weights[..4 * nb];
            // SAFETY: the group's rows lie in [r0, r1) (as below); nb ≤
            // MAX_LANE_BLOCKS, since one lane group fits the stack.
            unsafe { group_weights::<Q4, PACKED>(g, w) };
            for (a, yg) in acts.iter().flatten().zip(ys.chunks_exact_mut(LANES)) {
                // SAFETY: rows r..r+4 lie in [r0, r1), bounded for every
                // token by the caller's contract; yg holds sixteen tokens.
                unsafe { lane_group_rows::<Q4, PACKED>(yg, g, a, w, r - r0) };
            }
            r += 4;
        }
        first += pass;
    }
    super::x86::lane_tails(
        y,
        x,
        (groups * LANES, rows4, r0, r1),
        // SAFETY: rows rows4..r1 were bounded for this token (a packed
        // matrix's range ends between groups, so these are row-major), and
        // yt holds their outputs.
        |yt, xt| unsafe { matvec::<Q4, PACKED>(yt.as_mut_ptr(), wq, wd, xt, nb, stride, rows4, r1) },
        // SAFETY: the remaining tokens, all rows, as the caller's contract.
        |ys, rest| unsafe { matmul::<Q4, PACKED>(ys, wq, wd, rest, nb, stride, r0, r1) },
    );
}

/// Rows r..r+4 (the group) for one lane group's sixteen tokens, written
/// at `out` in each token's output. Per block and row an int32 lane per
/// token, then the matvec's float steps: fma(sumi·dw, dx, acc) into the
/// quad lane b mod 4 (Q4_0, blocks before the last whole quad), or else
/// into the even or odd sum of the blocks after the quads, and the result
/// ((L0 + L2) + (L1 + L3)) + (even + odd) (Q4_0) or even + odd (Q8_0).
///
/// # Safety
///
/// As `matmul`, the group's rows in bounds, y holding sixteen tokens with
/// out + 4 outputs each.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn lane_group_rows<const Q4: bool, const PACKED: bool>(
    y: &mut [&mut [f32]],
    g: Group<PACKED>,
    a: &LaneActs,
    w: &[[u8; QK]],
    out: usize,
) {
    let nb = g.nb;
    // Block b for the four rows: int32 lane sums, then fma(sumi·dw, dx,
    // acc) into each row's accumulator in `$acc`. A macro, not a closure
    // or a function: as either it was not inlined, and Q8_0 lost a fifth.
    macro_rules! step {
        ($b:expr, $acc:expr) => {{
            let b = $b;
            let rows = &w[4 * b..4 * b + 4];
            let quads = |j: usize, i: usize| {
                let q = &rows[j][4 * i..4 * i + 4];
                _mm512_set1_epi32(i32::from_le_bytes([q[0], q[1], q[2], q[3]]))
            };
            let xs = &a.x[b];
            // Two chains a row, added at the end: vpdpbusd's latency.
            let mut sumi = [a.bias[b]; 4];
            let mut more = [_mm512_setzero_si512(); 4];
            for c in (0..8).step_by(2) {
                for j in 0..4 {
                    sumi[j] = _mm512_dpbusd_epi32(sumi[j], quads(j, c), xs[c]);
                    more[j] = _mm512_dpbusd_epi32(more[j], quads(j, c + 1), xs[c + 1]);
                }
            }
            for j in 0..4 {
                sumi[j] = _mm512_add_epi32(sumi[j], more[j]);
            }
            let dx = a.dx[b];
            for (j, f) in $acc.iter_mut().enumerate() {
                // SAFETY: row r+j's scale of block b exists.
                let dw = _mm512_set1_ps(unsafe { g.dw(j, b) });
                *f = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sumi[j]), dw), dx, *f);
            }
        }};
    }
    let zero = [_mm512_setzero_ps(); 4];
    let quads = if Q4 { nb / 4 } else { 0 };
    let (mut l0, mut l1, mut l2, mut l3) = (zero, zero, zero, zero);
    for qd in 0..quads {
        step!(4 * qd, l0);
        step!(4 * qd + 1, l1);
        step!(4 * qd + 2, l2);
        step!(4 * qd + 3, l3);
    }
    let (mut even, mut odd) = (zero, zero);
    let mut b = 4 * quads;
    while b + 2 <= nb {
        step!(b, even);
        step!(b + 1, odd);
        b += 2;
    }
    if b < nb {
        step!(b, even);
    }
    let mut rows = [[0.0f32; LANES]; 4];
    for (j, row) in rows.iter_mut().enumerate() {
        let sums = _mm512_add_ps(even[j], odd[j]);
        let total = if Q4 {
            let (l02, l13) = (_mm512_add_ps(l0[j], l2[j]), _mm512_add_ps(l1[j], l3[j]));
            _mm512_add_ps(_mm512_add_ps(l02, l13), sums)
        } else {
            sums
        };
        // SAFETY: row holds sixteen floats.
        unsafe { _mm512_storeu_ps(row.as_mut_ptr(), total) };
    }
    for (t, yt) in y.iter_mut().enumerate() {
        for (j, row) in rows.iter().enumerate() {
            yt[out + j] = row[t];
        }
    }
}

// ---------------------------------------------------------------------------
// quantize_q8

quantize_by_blocks!();

/// One block (two registers), bit-identical to `quant::quantize_block_q8`
/// for every input (NaN and infinities included): amax and id are computed
/// in the same scalar operations, then q = trunc(x·id + copysign(0.5, x))
/// with a separate multiply and add (no FMA), NaN → 0, clamped to ±127.
/// Bitwise float ops go through the integer domain (no AVX512DQ needed).
///
/// # Safety
///
/// The CPU has AVX-512F/BW; `q` and `x` are valid for QK elements.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn quantize_block(q: *mut i8, x: *const f32) -> f32 {
    // SAFETY: x holds QK = 32 floats (the caller's contract).
    let v = unsafe { [_mm512_loadu_ps(x), _mm512_loadu_ps(x.add(16))] };
    // maxps returns its second operand when either is NaN, so a NaN |x| is
    // skipped, as f32::max skips it in the scalar fold; m holds no NaN, so
    // the reduction's order cannot matter.
    let m = _mm512_max_ps(
        _mm512_abs_ps(v[1]),
        _mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_setzero_ps()),
    );
    let amax = _mm512_reduce_max_ps(m);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };

    let idv = _mm512_set1_ps(id);
    let sign = _mm512_set1_epi32(i32::MIN);
    let half = _mm512_castps_si512(_mm512_set1_ps(0.5));
    let (lo, hi) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
    for (i, &vi) in v.iter().enumerate() {
        let signed_half = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(vi), sign), half);
        let r = _mm512_add_ps(_mm512_mul_ps(vi, idv), _mm512_castsi512_ps(signed_half));
        // The scalar `as i8` maps NaN to 0; cvttps would give INT_MIN.
        let r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(r, r), r);
        let qi = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo), hi));
        // In range already, so the truncating narrow is exact.
        // SAFETY: q holds QK = 32 bytes (the caller's contract), i < 2.
        unsafe { _mm_storeu_si128(q.add(16 * i).cast(), _mm512_cvtepi32_epi8(qi)) };
    }
    d
}
