//! What the x86 tiers' matvecs share around their block dot product: the
//! four-row driver (`matvec_by_row_groups!`), the gather of four rows'
//! scales, and the two ways a tier applies the scales to a block's int32
//! sums (exactly as the scalar kernel, or with FMA).
//!
//! A tier's integer path is then a few routines on registers (how it loads
//! an activation block and a weight block, its block dot, its horizontal
//! sums) and one line naming its scale step; `avxvnni.rs` is the smallest
//! example. The block dot takes and returns registers only and the scale
//! step is separate, so a kernel over several activation rows can reuse
//! both and keep the matvec's per-block sums and their order.
//!
//! Declared in `kernels/mod.rs` before the tiers, with `#[macro_use]`.

#[cfg(target_arch = "x86")]
use std::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// The scales of rows r..r+4 for block b, row r in lane 0.
///
/// # Safety
///
/// `wd[(r + j)·nb + b]` is readable for j < 4.
#[target_feature(enable = "sse2")]
#[inline]
pub(crate) unsafe fn row_scales(wd: *const f32, r: usize, nb: usize, b: usize) -> __m128 {
    // SAFETY: the caller guarantees the four scales are readable.
    unsafe {
        _mm_set_ps(
            *wd.add((r + 3) * nb + b),
            *wd.add((r + 2) * nb + b),
            *wd.add((r + 1) * nb + b),
            *wd.add(r * nb + b),
        )
    }
}

#[cfg(feature = "isa-avx2")]
/// The scales of rows r..r+4 for blocks b and b+1 (`row_scales` of each):
/// one 8-byte load a row, since a row's scales are contiguous.
///
/// # Safety
///
/// `wd[(r + j)·nb + b]` and the next are readable for j < 4.
#[target_feature(enable = "sse2")]
#[inline]
pub(crate) unsafe fn row_scales2(wd: *const f32, r: usize, nb: usize, b: usize) -> [__m128; 2] {
    // SAFETY: the caller guarantees the eight scales are readable.
    let row = |j: usize| unsafe { _mm_castpd_ps(_mm_load_sd(wd.add((r + j) * nb + b).cast())) };
    // [r0 b, r1 b, r0 b+1, r1 b+1] and the same for rows 2 and 3.
    let (t01, t23) = (_mm_unpacklo_ps(row(0), row(1)), _mm_unpacklo_ps(row(2), row(3)));
    [_mm_movelh_ps(t01, t23), _mm_movehl_ps(t23, t01)]
}

/// acc + (sumi·dw)·dx for four rows: the scalar kernel's operations in its
/// order, so the sse2/sse41 matvecs are bit-identical to it.
#[target_feature(enable = "sse2")]
#[inline]
pub(crate) fn scale_exact4(acc: __m128, sumi: __m128i, dw: __m128, dx: f32) -> __m128 {
    _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(sumi), dw), _mm_set1_ps(dx)))
}

/// `scale_exact4` for one row.
#[inline(always)]
pub(crate) fn scale_exact1(sum: f32, sumi: i32, dw: f32, dx: f32) -> f32 {
    sum + sumi as f32 * dw * dx
}

#[cfg(feature = "isa-avx2")]
/// fma(sumi·dw, dx, acc) for four rows: one rounding fewer than the scalar
/// kernel (DESIGN.md §7 allows it).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) fn scale_fma4(acc: __m128, sumi: __m128i, dw: __m128, dx: f32) -> __m128 {
    _mm_fmadd_ps(_mm_mul_ps(_mm_cvtepi32_ps(sumi), dw), _mm_set1_ps(dx), acc)
}

#[cfg(feature = "isa-avx2")]
/// `scale_fma4` for one row, rounded the same way.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) fn scale_fma1(sum: f32, sumi: i32, dw: f32, dx: f32) -> f32 {
    (sumi as f32 * dw).mul_add(dx, sum)
}

/// `group_dot` as `hsum4` of the four rows' `block_dot`s, for a tier with
/// no cheaper sum of a row group's blocks: its group weights are `load_w`'s
/// and it needs no activation block sums.
macro_rules! group_dot_by_block_dots {
    ($features:literal, $w:ty, $x:ty) => {
        const Q4_NIBBLE_GROUPS: bool = false;

        /// # Safety
        ///
        /// As `load_w`.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn load_group_w<const Q4: bool>(p: *const u8) -> $w {
            // SAFETY: the caller's contract is load_w's.
            unsafe { load_w::<Q4>(p) }
        }

        #[target_feature(enable = $features)]
        #[inline]
        fn group_dot<const Q4: bool>(w: [$w; 4], x: &$x, _xsum: i32) -> __m128i {
            hsum4(
                block_dot(w[0], x),
                block_dot(w[1], x),
                block_dot(w[2], x),
                block_dot(w[3], x),
            )
        }
    };
}

/// What a token-lane matmul leaves to its tier's other kernels (rows
/// r0..r1, `rows4` the end of its whole four-row groups, `whole` of its
/// whole lane groups' tokens): rows rows4..r1 of the first `whole` tokens
/// go to `matvec_rows` (the token's outputs from row rows4 on, and its
/// activation), the tokens from `whole` on to `tiles` over all the rows.
#[cfg(feature = "isa-sse41")]
pub(crate) fn lane_tails(
    y: &mut [&mut [f32]],
    x: &crate::core::tensor::QActs,
    (whole, rows4, r0, r1): (usize, usize, usize, usize),
    mut matvec_rows: impl FnMut(&mut [f32], &crate::core::tensor::QAct),
    tiles: impl FnOnce(&mut [&mut [f32]], &crate::core::tensor::QActs),
) {
    if rows4 < r1 {
        for (t, yt) in y[..whole].iter_mut().enumerate() {
            matvec_rows(&mut yt[rows4 - r0..], &x.token(t));
        }
    }
    if whole < x.n {
        let nbx = x.cols / crate::core::quant::QK;
        let rest = crate::core::tensor::QActs {
            q: &x.q[whole * x.cols..],
            d: &x.d[whole * nbx..],
            cols: x.cols,
            n: x.n - whole,
        };
        tiles(&mut y[whole..], &rest);
    }
}

/// `matmul_lanes`, the driver `tiled_matmul_entry_points!(matmul_lanes)`
/// calls, for the 256-bit tiers (avx2, avxvnni): one int32 lane per token,
/// so a block's sums for a row and eight tokens come out of the multiplies
/// lane by lane, with no horizontal adds (avx2.rs, "Token lanes", says
/// how). The tier names in scope, besides `matvec_by_row_groups!`'s
/// `matvec` and `matmul_by_row_groups!`'s `matmul_rows`, whether its Q8_0
/// weights are staged unsigned (`const UNSIGNED_Q8: bool`: then
/// `avx2::stage_group` stages them and `avx2::lane_acts` gives each lane
/// −128·Σx, else they are read in place and `lane_acts` gives |x|) and one
/// row's block sums for a lane group, given its four weights at quad c
/// broadcast to every lane (`w(c)`) and the group's activations
/// (`avx2::LaneActs`) of block b:
///
/// * `fn lane_row_q8(w, a: &LaneActs, b) -> __m256i`: Σ w·x over the
///   eight quads (Q8_0 weights as they are, read from the matrix, or
///   staged plus 128);
/// * `fn lane_row_q4(w, a: &LaneActs, b) -> __m256i`: Σ (q − 8)·x over
///   the block's staged nibbles q.
///
/// Integer sums are exact in any order, so every tier's lanes hold the
/// matvec's block sums, and the float steps are the matvec's.
#[cfg(feature = "isa-avx2")]
macro_rules! matmul_by_token_lanes {
    ($features:literal) => {
        /// The matmul's driver (see above).
        ///
        /// # Safety
        ///
        /// As `matmul_rows`.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
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
            use super::avx2::{
                lane_acts, lane_vectors, stage_group, GroupWeights, LaneActs, LANES, LANE_STACK, MAX_LANE_BLOCKS,
                PASS_GROUPS,
            };
            use std::mem::MaybeUninit;
            let per_group = lane_vectors::<Q4, UNSIGNED_Q8>(nb);
            let fit = (LANE_STACK / per_group).min(PASS_GROUPS);
            let groups = x.n / LANES;
            let rows4 = r0 + (r1 - r0) / 4 * 4;
            if groups == 0 || rows4 == r0 || fit == 0 {
                // SAFETY: the caller's contract is matmul_rows's.
                return unsafe { matmul_rows::<Q4>(y, wq, wd, x, nb, stride, r0, r1) };
            }
            let mut stack = [MaybeUninit::<__m256i>::uninit(); LANE_STACK];
            let mut staged = [MaybeUninit::<[u8; crate::core::quant::QK]>::uninit(); 4 * MAX_LANE_BLOCKS];
            let mut first = 0;
            while first < groups {
                let pass = fit.min(groups - first);
                let mut acts: [Option<LaneActs>; PASS_GROUPS] = Default::default();
                for (g, slots) in stack.chunks_exact_mut(per_group).take(pass).enumerate() {
                    // SAFETY: AVX2 (the caller's contract); the pass's tokens
                    // exist.
                    acts[g] = Some(unsafe { lane_acts::<Q4, UNSIGNED_Q8>(x, (first + g) * LANES, slots) });
                }
                let ys = &mut y[first * LANES..(first + pass) * LANES];
                let mut r = r0;
                while r < rows4 {
                    let w = if Q4 || UNSIGNED_Q8 {
                        // SAFETY: rows r..r+4 lie in [r0, r1), bounded for
                        // every token by the caller's contract; nb ≤
                        // MAX_LANE_BLOCKS, since one lane group fits the stack.
                        let blocks = unsafe { stage_group::<Q4>(wq, wd, stride, nb, r, &mut staged) };
                        GroupWeights::staged(blocks)
                    } else {
                        GroupWeights::in_matrix(wq, stride, r)
                    };
                    for (a, yg) in acts.iter().flatten().zip(ys.chunks_exact_mut(LANES)) {
                        // SAFETY: rows r..r+4 and their scales are in bounds
                        // (as above); yg holds eight tokens.
                        unsafe { lane_group_rows::<Q4>(yg, w, wd, a, nb, r, r - r0) };
                    }
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

        /// Rows r..r+4 for one lane group's eight tokens, written at `out` in
        /// each token's output: per block, each row's lane sums from the tier's
        /// `lane_row_q8`/`lane_row_q4`, its four weights of quad c (staged or
        /// in the matrix, `w`) broadcast to every lane by the load
        /// (vpbroadcastd), then the matvec's scale step per lane.
        ///
        /// # Safety
        ///
        /// The CPU has the tier's features; blocks 0..nb of rows r..r+4 (in
        /// `w`) and their scales are in bounds; y holds eight tokens with
        /// out + 4 outputs each.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn lane_group_rows<const Q4: bool>(
            y: &mut [&mut [f32]],
            w: super::avx2::GroupWeights,
            wd: *const f32,
            a: &super::avx2::LaneActs,
            nb: usize,
            r: usize,
            out: usize,
        ) {
            // One block's four rows of int32 lane sums.
            let block = |b: usize| {
                w.prefetch(wd, nb, r, b);
                let mut sums = [_mm256_setzero_si256(); 4];
                for (j, s) in sums.iter_mut().enumerate() {
                    let row = w.block(j, b);
                    // SAFETY: the block's 32 bytes are in bounds (the
                    // caller's contract), c < 8.
                    let quads = |c: usize| unsafe { _mm256_set1_epi32(row.add(4 * c).cast::<i32>().read_unaligned()) };
                    *s = if Q4 {
                        lane_row_q4(quads, a, b)
                    } else {
                        lane_row_q8(quads, a, b)
                    };
                }
                sums
            };
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut scale = |b: usize, sumi: [__m256i; 4]| {
                let dx = a.dx[b];
                for (j, f) in acc.iter_mut().enumerate() {
                    // SAFETY: row r+j's scale of block b is in bounds.
                    let dw = unsafe { _mm256_set1_ps(*wd.add((r + j) * nb + b)) };
                    *f = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sumi[j]), dw), dx, *f);
                }
            };
            // Q4_0 blocks go in pairs, for the scheduler's sake (6% faster in
            // cache); Q8_0's eight sums would spill (17% slower).
            let mut b = 0;
            while Q4 && b + 2 <= nb {
                let (s0, s1) = (block(b), block(b + 1));
                scale(b, s0);
                scale(b + 1, s1);
                b += 2;
            }
            for b in b..nb {
                scale(b, block(b));
            }
            let mut lanes = [[0.0f32; super::avx2::LANES]; 4];
            for (j, f) in acc.iter().enumerate() {
                // SAFETY: lanes[j] holds eight floats.
                unsafe { _mm256_storeu_ps(lanes[j].as_mut_ptr(), *f) };
            }
            for (t, yt) in y.iter_mut().enumerate() {
                for (j, row) in lanes.iter().enumerate() {
                    yt[out + j] = row[t];
                }
            }
        }
    };
}

/// Activation blocks a stack buffer holds for `block_sums` (K up to 8192
/// in a matvec); more go to the heap.
pub(crate) const STACK_BLOCK_SUMS: usize = 256;

/// Σ of each of the first `blocks` QK-quant blocks of `q`: what a tier
/// whose Q4_0 group dot multiplies the unsigned nibbles q subtracts,
/// 8·Σx, to get Σ(q − 8)·x. Kept in `stack` when it fits, else in `heap`.
pub(crate) fn block_sums<'a>(
    q: &[i8],
    blocks: usize,
    stack: &'a mut [i32; STACK_BLOCK_SUMS],
    heap: &'a mut Vec<i32>,
) -> &'a [i32] {
    use crate::core::quant::QK;
    let sums = if blocks <= STACK_BLOCK_SUMS {
        &mut stack[..blocks]
    } else {
        heap.resize(blocks, 0);
        &mut heap[..]
    };
    for (s, block) in sums.iter_mut().zip(q.chunks_exact(QK)) {
        *s = block.iter().map(|&v| i32::from(v)).sum();
    }
    sums
}

/// The `unsafe fn matvec<const Q4: bool>(y, wq, wd, x, nb, stride, r0, r1)`
/// that `matvec_entry_points!` calls, for a tier that names in scope:
///
/// * `unsafe fn load_x(p: *const i8) -> X`: one activation block (QK
///   bytes at p) prepared once for the four rows that share it;
/// * `unsafe fn load_w::<Q4>(p: *const u8) -> W`: one weight block as 32
///   int8 (Q4: nibbles unpacked and re-centred);
/// * `fn block_dot(w: W, x: &X) -> V`: int32 partial sums of one block;
/// * `fn group_dot::<Q4>([G; 4], &X, xsum: i32) -> __m128i`: four rows'
///   block sums, of weights loaded by `unsafe fn load_group_w::<Q4>(p) ->
///   G` (`group_dot_by_block_dots!`: `hsum4` of four `block_dot`s of
///   `load_w`'s blocks). A tier may sum a Q4 block more cheaply, its sums
///   being the same integers: with `const Q4_NIBBLE_GROUPS: bool = true`
///   its Q4 group weights are the unsigned nibbles q and `xsum` is the
///   activation block's Σx (`block_sums`), so Σ(q − 8)·x = Σq·x − 8·Σx;
/// * `fn hsum1(V) -> i32`: one row's block sum;
/// * `scale4`/`scale1`: the scale step, `scale_exact*` or `scale_fma*`.
///
/// Rows go four at a time, each activation block loaded once for all four,
/// then one at a time. Each row adds its blocks' scaled sums in block order
/// with the same operations in the group and in the tail, so a row's result
/// does not depend on how [r0, r1) splits into groups.
///
/// A tier with `Q4_NIBBLE_GROUPS` (whose activation block sums the driver
/// computes) may name `q4_pairs: f`, its Q4_0 step over two blocks at once:
/// `unsafe fn f(w: [__m256i; 4], x: *const i8, xsums: [i32; 2]) -> __m256i`
/// takes the four rows' 32 packed bytes of blocks b and b+1 (contiguous in
/// a row), the activation's 64 quants there and their block sums Σx, and
/// returns the rows' block sums Σ(q − 8)·x, block b in the low half. The
/// scale steps then run block after block as ever.
macro_rules! matvec_by_row_groups {
    ($features:literal $(, q4_pairs: $pair_dot:ident)?) => {
        /// # Safety
        ///
        /// The CPU has the tier's features and `check_matvec` has accepted
        /// these arguments (every row, block and scale read is in bounds).
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
        unsafe fn matvec<const Q4: bool>(
            y: *mut f32,
            wq: *const u8,
            wd: *const f32,
            x: &crate::core::tensor::QAct,
            nb: usize,
            stride: usize,
            r0: usize,
            r1: usize,
        ) {
            use crate::core::quant::{Q4_BLOCK_BYTES, QK};
            let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
            let (xq, xd) = (x.q.as_ptr(), x.d.as_ptr());
            let (mut stack, mut heap) = ([0; super::x86::STACK_BLOCK_SUMS], Vec::new());
            let nibbles = Q4 && Q4_NIBBLE_GROUPS;
            let xsums = super::x86::block_sums(x.q, if nibbles { nb } else { 0 }, &mut stack, &mut heap);
            let mut r = r0;
            while r + 4 <= r1 {
                let mut acc = _mm_setzero_ps();
                #[allow(unused_mut)]
                let mut b = 0;
                $(
                    while Q4 && b + 2 <= nb {
                        super::prefetch::row_group::<false>(wq, wd, stride, nb, r, b, 2, bb);
                        // SAFETY: check_matvec bounded rows r..r+4, their
                        // blocks b and b+1 (the 32 bytes from block b's) and
                        // scales, and activation blocks b and b+1.
                        let (sumi, dw, dx) = unsafe {
                            let w = |j: usize| _mm256_loadu_si256(wq.add((r + j) * stride + b * bb).cast());
                            let sumi = $pair_dot([w(0), w(1), w(2), w(3)], xq.add(b * QK), [xsums[b], xsums[b + 1]]);
                            (sumi, super::x86::row_scales2(wd, r, nb, b), [*xd.add(b), *xd.add(b + 1)])
                        };
                        acc = scale4(acc, _mm256_castsi256_si128(sumi), dw[0], dx[0]);
                        acc = scale4(acc, _mm256_extracti128_si256::<1>(sumi), dw[1], dx[1]);
                        b += 2;
                    }
                )?
                for b in b..nb {
                    super::prefetch::row_group::<false>(wq, wd, stride, nb, r, b, 1, bb);
                    let xsum = if nibbles { xsums[b] } else { 0 };
                    // SAFETY: check_matvec bounded rows r..r+4 (r + 4 ≤ r1),
                    // their block b and its scales, and activation block b.
                    let (sumi, dw, dx) = unsafe {
                        let xb = load_x(xq.add(b * QK));
                        let w = |j: usize| load_group_w::<Q4>(wq.add((r + j) * stride + b * bb));
                        let sumi = group_dot::<Q4>([w(0), w(1), w(2), w(3)], &xb, xsum);
                        (sumi, super::x86::row_scales(wd, r, nb, b), *xd.add(b))
                    };
                    acc = scale4(acc, sumi, dw, dx);
                }
                // SAFETY: y holds r1 − r0 rows (check_matvec).
                unsafe { _mm_storeu_ps(y.add(r - r0), acc) };
                r += 4;
            }
            while r < r1 {
                let mut sum = 0.0f32;
                for b in 0..nb {
                    // SAFETY: as above, for row r < r1.
                    let (sumi, dw, dx) = unsafe {
                        let v = block_dot(load_w::<Q4>(wq.add(r * stride + b * bb)), &load_x(xq.add(b * QK)));
                        (hsum1(v), *wd.add(r * nb + b), *xd.add(b))
                    };
                    sum = scale1(sum, sumi, dw, dx);
                }
                // SAFETY: as above.
                unsafe { *y.add(r - r0) = sum };
                r += 1;
            }
        }
    };
}

/// The kernels built on the tier's `exp_ps`: `softmax`, `silu_mul`, and
/// `exp_in_place` for the tests, the same passes at any vector width.
/// Invoked as `exp_kernels! { "features", vector type, lanes; set1 setzero
/// loadu storeu add sub mul div max xor }` with the tier's intrinsic for
/// each of those operations; `exp_ps`, `hsum_ps` and `hmax_ps` (safe,
/// registers only) are the tier's, in scope.
///
/// * softmax: max, then e^(x − max) stored and summed, then each divided
///   by the sum (the scalar kernel divides; 1/sum would round differently).
///   A partial last vector goes through a buffer: its padding lanes are
///   computed but neither stored nor summed.
/// * silu_mul: g = g / (1 + e^(−g)) · u, the last partial vector likewise.
macro_rules! exp_kernels {
    (
        $features:literal, $v:ty, $lanes:literal;
        $set1:ident $setzero:ident $loadu:ident $storeu:ident $add:ident $sub:ident
        $mul:ident $div:ident $max:ident $xor:ident
    ) => {
        /// e^x of each element, in place: the polynomial the float kernels
        /// use, exposed so the tests can hold it to DESIGN.md §5's 1e-6.
        #[doc(hidden)]
        pub fn exp_in_place(v: &mut [f32]) {
            for c in v.chunks_mut($lanes) {
                let mut buf = [0.0f32; $lanes];
                buf[..c.len()].copy_from_slice(c);
                // SAFETY: the tier's features are verified by the guard
                // (`guard`); buf holds one vector.
                unsafe { exp_vector(buf.as_mut_ptr()) };
                c.copy_from_slice(&buf[..c.len()]);
            }
        }

        /// # Safety
        ///
        /// The CPU has the tier's features; `p` is valid for one vector.
        #[target_feature(enable = $features)]
        unsafe fn exp_vector(p: *mut f32) {
            // SAFETY: one vector at p (the contract).
            unsafe { $storeu(p, exp_ps($loadu(p))) }
        }

        /// In-place softmax, shifted by the maximum for stability.
        pub fn softmax(x: &mut [f32]) {
            if x.is_empty() {
                return;
            }
            // SAFETY: the tier's features are verified by the guard
            // (`guard`); pointer and length are x's.
            unsafe { softmax_in_place(x.as_mut_ptr(), x.len()) }
        }

        /// # Safety
        ///
        /// The CPU has the tier's features; `x` is valid for n ≥ 1 elements.
        #[target_feature(enable = $features)]
        unsafe fn softmax_in_place(x: *mut f32, n: usize) {
            // SAFETY: every access below is x[j] for j < n (the contract).
            unsafe {
                let mut m = $set1(f32::NEG_INFINITY);
                let mut i = 0;
                while i + $lanes <= n {
                    m = $max($loadu(x.add(i)), m);
                    i += $lanes;
                }
                let mut max = hmax_ps(m);
                for j in i..n {
                    max = max.max(*x.add(j));
                }

                let mv = $set1(max);
                let mut acc = $setzero();
                let mut i = 0;
                while i + $lanes <= n {
                    let e = exp_ps($sub($loadu(x.add(i)), mv));
                    $storeu(x.add(i), e);
                    acc = $add(acc, e);
                    i += $lanes;
                }
                let mut sum = hsum_ps(acc);
                if i < n {
                    let mut buf = [0.0f32; $lanes];
                    for (j, v) in buf.iter_mut().enumerate().take(n - i) {
                        *v = *x.add(i + j) - max;
                    }
                    $storeu(buf.as_mut_ptr(), exp_ps($loadu(buf.as_ptr())));
                    for (j, &v) in buf.iter().enumerate().take(n - i) {
                        *x.add(i + j) = v;
                        sum += v;
                    }
                }

                let sv = $set1(sum);
                let mut i = 0;
                while i + $lanes <= n {
                    $storeu(x.add(i), $div($loadu(x.add(i)), sv));
                    i += $lanes;
                }
                for j in i..n {
                    *x.add(j) /= sum;
                }
            }
        }

        /// g = silu(g) · u, with silu(v) = v / (1 + e^(−v)).
        pub fn silu_mul(g: &mut [f32], u: &[f32]) {
            let n = g.len().min(u.len());
            // SAFETY: the tier's features are verified by the guard
            // (`guard`); both slices hold n elements.
            unsafe { silu_mul_in_place(g.as_mut_ptr(), u.as_ptr(), n) }
        }

        /// # Safety
        ///
        /// The CPU has the tier's features; `g` and `u` are valid for n
        /// elements.
        #[target_feature(enable = $features)]
        unsafe fn silu_mul_in_place(g: *mut f32, u: *const f32, n: usize) {
            let one = $set1(1.0);
            let silu = |gv: $v, uv: $v| {
                let e = exp_ps($xor(gv, $set1(-0.0)));
                $mul($div(gv, $add(one, e)), uv)
            };
            // SAFETY: every access below is g[j] or u[j] for j < n (the
            // contract).
            unsafe {
                let mut i = 0;
                while i + $lanes <= n {
                    $storeu(g.add(i), silu($loadu(g.add(i)), $loadu(u.add(i))));
                    i += $lanes;
                }
                if i < n {
                    let (mut gb, mut ub) = ([0.0f32; $lanes], [0.0f32; $lanes]);
                    for j in 0..n - i {
                        gb[j] = *g.add(i + j);
                        ub[j] = *u.add(i + j);
                    }
                    $storeu(gb.as_mut_ptr(), silu($loadu(gb.as_ptr()), $loadu(ub.as_ptr())));
                    for (j, &v) in gb.iter().enumerate().take(n - i) {
                        *g.add(i + j) = v;
                    }
                }
            }
        }
    };
}

/// `matmul_rows`, the driver `tiled_matmul_entry_points!(matmul_rows)` calls, for a tier with
/// `matvec_by_row_groups!`'s routines in scope (and that macro's `matvec`).
///
/// Rows go in the matvec's groups of four from r0; within a group, tokens
/// go `TOKENS` at a time, then a tile of the leftover count. Each weight
/// block of the group is loaded (Q4: unpacked) once per tile and dotted
/// with every token of it; each (row, token) then gets the matvec's exact
/// per-block steps (`hsum4`, `scale4` in block order, one accumulator per
/// token), so every output is bit-identical to the matvec's. The rows after
/// the last whole group are the matvec's own row loop, per token.
macro_rules! matmul_by_row_groups {
    ($features:literal) => {
        /// Tokens per tile: four accumulators, four rows' weight blocks and
        /// a token's activation fit the sixteen vector registers from avx2
        /// up; sse2 (two registers a weight block, four an activation)
        /// spills a few, and still measured faster than tiles of two.
        const TOKENS: usize = 4;

        /// # Safety
        ///
        /// The CPU has the tier's features and `scaffold::check_matmul_operands`
        /// accepted these arguments for every token in `xs`.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
        unsafe fn matmul_rows<const Q4: bool>(
            y: &mut [&mut [f32]],
            wq: *const u8,
            wd: *const f32,
            x: &crate::core::tensor::QActs,
            nb: usize,
            stride: usize,
            r0: usize,
            r1: usize,
        ) {
            let n = x.n;
            let (mut stack, mut heap) = ([0; super::x86::STACK_BLOCK_SUMS], Vec::new());
            let blocks = if Q4 && Q4_NIBBLE_GROUPS { n * nb } else { 0 };
            let xsums = super::x86::block_sums(x.q, blocks, &mut stack, &mut heap);
            let mut r = r0;
            while r + 4 <= r1 {
                let mut t = 0;
                while t < n {
                    let ys = &mut y[t..];
                    // SAFETY: rows r..r+4 lie in [r0, r1), which
                    // check_matvec bounded for every token.
                    t += unsafe {
                        match n - t {
                            1 => group_tile::<Q4, 1>(ys, wq, wd, x, xsums, t, nb, stride, r, r - r0),
                            2 => group_tile::<Q4, 2>(ys, wq, wd, x, xsums, t, nb, stride, r, r - r0),
                            3 => group_tile::<Q4, 3>(ys, wq, wd, x, xsums, t, nb, stride, r, r - r0),
                            _ => group_tile::<Q4, TOKENS>(ys, wq, wd, x, xsums, t, nb, stride, r, r - r0),
                        }
                    };
                }
                r += 4;
            }
            if r < r1 {
                for (t, yt) in y.iter_mut().enumerate() {
                    // SAFETY: rows r..r1 are within what check_matvec
                    // accepted for this token; yt holds r1 − r0 rows.
                    unsafe {
                        matvec::<Q4>(
                            yt.as_mut_ptr().add(r - r0),
                            wq,
                            wd,
                            &x.token(t),
                            nb,
                            stride,
                            r,
                            r1,
                        )
                    };
                }
            }
        }

        /// Rows r..r+4 for tokens t0..t0+T of `x` (the first T of `y`),
        /// written at `out` in each token's output; `xsums` is empty or
        /// holds every token's `block_sums` (token t's block b at
        /// t·nb + b). Returns T.
        ///
        /// # Safety
        ///
        /// As `matmul_rows`; y and x hold at least T tokens from t0, rows
        /// r..r+4 are in bounds and each y[t] holds out + 4 values.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn group_tile<const Q4: bool, const T: usize>(
            y: &mut [&mut [f32]],
            wq: *const u8,
            wd: *const f32,
            x: &crate::core::tensor::QActs,
            xsums: &[i32],
            t0: usize,
            nb: usize,
            stride: usize,
            r: usize,
            out: usize,
        ) -> usize {
            use crate::core::quant::{Q4_BLOCK_BYTES, QK};
            let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
            // Token t's activation at t·cols, as `QActs::token` slices it.
            let (cols, xnb) = (x.cols, x.cols / QK);
            // Loops, not `from_fn` or closures, which were not inlined.
            let (mut xq, mut xd) = ([x.q.as_ptr(); T], [x.d.as_ptr(); T]);
            for t in 0..T {
                xq[t] = x.q.as_ptr().wrapping_add((t0 + t) * cols);
                xd[t] = x.d.as_ptr().wrapping_add((t0 + t) * xnb);
            }
            let mut acc = [_mm_setzero_ps(); T];
            for b in 0..nb {
                super::prefetch::row_group::<false>(wq, wd, stride, nb, r, b, 1, bb);
                // SAFETY: rows r..r+4, their block b and its scales, and
                // each token's activation block b are in bounds (the
                // caller's contract).
                unsafe {
                    let w0 = load_group_w::<Q4>(wq.add(r * stride + b * bb));
                    let w1 = load_group_w::<Q4>(wq.add((r + 1) * stride + b * bb));
                    let w2 = load_group_w::<Q4>(wq.add((r + 2) * stride + b * bb));
                    let w3 = load_group_w::<Q4>(wq.add((r + 3) * stride + b * bb));
                    let dw = super::x86::row_scales(wd, r, nb, b);
                    for t in 0..T {
                        let xb = load_x(xq[t].add(b * QK));
                        let xsum = if Q4 && Q4_NIBBLE_GROUPS {
                            xsums[(t0 + t) * xnb + b]
                        } else {
                            0
                        };
                        let sumi = group_dot::<Q4>([w0, w1, w2, w3], &xb, xsum);
                        acc[t] = scale4(acc[t], sumi, dw, *xd[t].add(b));
                    }
                }
            }
            for t in 0..T {
                // SAFETY: y[t] holds out + 4 values (the caller's contract).
                unsafe { _mm_storeu_ps(y[t].as_mut_ptr().add(out), acc[t]) };
            }
            T
        }
    };
}

// ---------------------------------------------------------------------------
// matmul_widened: the 128-bit tiers' matmul on int16 operands
//
// Without a dot-product instruction, the tiles (`matmul_by_row_groups!`)
// pay per row, token and block what makes int8 quants multipliable: SSE2
// widens the weights to int16 (unpack and shift) for pmaddwd; SSE4.1 moves
// x's sign onto the weights (psignb, since pmaddubsw's unsigned operand is
// |x|), then widens pmaddubsw's pair sums with pmaddwd, as they cannot be
// added in int16 (2·127² a pair). On Zen 4 psignb, pabsb, pmaddubsw and
// pmaddwd all share the two multiply pipes (PERF.md), so SSE4.1's tile is
// bound by them.
//
// Widened to int16 once, the same products are four pmaddwd a row, token
// and block and nothing else on those pipes: the adds, the shuffles of the
// horizontal sums (sse2's `hsum4`, not phaddd, which takes two cycles on
// them) go to the others. The widening is done where it is shared: a
// four-row group's weights once per segment of blocks for all of a pass's
// tokens (`WideBlock`, on the stack), the pass's activations once per
// segment for all row groups (`WideX`). The int32 block sums are the
// tiles' integers (integer sums are exact in any order); each token then
// takes the matvec's float step acc + (sumi·dw)·dx in block order, its
// running sums parked in its outputs between segments (f32 out and in
// again: the same bits), so every output keeps the matvec's bits.

/// Tokens from which a tier takes `matmul_widened`: below four, staging a
/// group's weights costs about what the tokens' pass over them does, and
/// the tiles stay.
const WIDE_MIN_TOKENS: usize = 4;

/// Whether a matmul of `tokens` tokens over rows r0..r1 takes
/// `matmul_widened` (at least `WIDE_MIN_TOKENS`, and a whole four-row
/// group to stage) rather than the tiles.
pub(crate) fn takes_widened(tokens: usize, r0: usize, r1: usize) -> bool {
    tokens >= WIDE_MIN_TOKENS && r1 - r0 >= 4
}

/// Blocks of a four-row group a segment stages at most: 32, 8.5 KiB, which
/// stay in L1 with the token being run.
pub(crate) const WIDE_BLOCKS: usize = 32;

/// Widened activation blocks the stack holds (64 KiB): a segment's blocks
/// for every token of the pass, so 25 blocks a segment at 32 tokens.
pub(crate) const WIDE_SLOTS: usize = 65536 / std::mem::size_of::<WideX>();

/// Tokens a pass takes at most (`--batch`'s largest), so that a segment
/// still holds several blocks.
pub(crate) const WIDE_TOKENS: usize = 128;

/// One block of a four-row group, widened: `w[j][k]` holds row j's quants
/// 8k..8k+8 as int16 (Q4_0's re-centred); `dw` the four rows' scales.
#[derive(Clone, Copy)]
pub(crate) struct WideBlock {
    pub(crate) w: [[__m128i; 4]; 4],
    pub(crate) dw: __m128,
}

/// One token's activation block, widened: `x[k]` holds its quants
/// 8k..8k+8 as int16, `dx` its scale in every lane.
#[derive(Clone, Copy)]
pub(crate) struct WideX {
    pub(crate) x: [__m128i; 4],
    pub(crate) dx: __m128,
}

/// `matmul_widened` (see above), for a tier with in scope
/// `matvec_by_row_groups!`'s `matvec` and:
///
/// * `unsafe fn widen_w<const Q4: bool>(p: *const u8) -> [__m128i; 4]`: the
///   weight block at p as int16, eight quants a vector in order (Q4_0's
///   re-centred);
/// * `unsafe fn widen_x(p: *const i8) -> [__m128i; 4]`: the activation
///   block at p likewise.
macro_rules! matmul_widened {
    ($features:literal) => {
        /// # Safety
        ///
        /// As `matmul_rows`.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $features)]
        unsafe fn matmul_widened<const Q4: bool>(
            y: &mut [&mut [f32]],
            wq: *const u8,
            wd: *const f32,
            x: &crate::core::tensor::QActs,
            nb: usize,
            stride: usize,
            r0: usize,
            r1: usize,
        ) {
            use super::x86::{WideBlock, WideX, WIDE_BLOCKS, WIDE_SLOTS, WIDE_TOKENS};
            use crate::core::quant::{Q4_BLOCK_BYTES, QK};
            use std::mem::MaybeUninit;
            let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
            let mut staged = [MaybeUninit::<WideBlock>::uninit(); WIDE_BLOCKS];
            let mut slots = [MaybeUninit::<WideX>::uninit(); WIDE_SLOTS];
            let rows4 = r0 + (r1 - r0) / 4 * 4;
            let mut t0 = 0;
            while t0 < x.n {
                let pass = WIDE_TOKENS.min(x.n - t0);
                let seg_max = (WIDE_SLOTS / pass).min(WIDE_BLOCKS);
                let mut b0 = 0;
                while b0 < nb {
                    let seg = seg_max.min(nb - b0);
                    // The pass's activations for blocks b0..b0+seg, token-major.
                    for t in 0..pass {
                        let xt = x.token(t0 + t);
                        for (i, slot) in slots[t * seg..(t + 1) * seg].iter_mut().enumerate() {
                            let q = xt.q[(b0 + i) * QK..(b0 + i + 1) * QK].as_ptr();
                            slot.write(WideX {
                                // SAFETY: q is a block of QK quants.
                                x: unsafe { widen_x(q) },
                                dx: _mm_set1_ps(xt.d[b0 + i]),
                            });
                        }
                    }
                    // SAFETY: the loop above wrote the first pass·seg slots,
                    // and MaybeUninit<T> has T's layout.
                    let xs = unsafe { std::slice::from_raw_parts(slots.as_ptr().cast::<WideX>(), pass * seg) };
                    let mut r = r0;
                    while r < rows4 {
                        for (i, block) in staged[..seg].iter_mut().enumerate() {
                            let b = b0 + i;
                            super::prefetch::row_group::<false>(wq, wd, stride, nb, r, b, 1, bb);
                            // SAFETY: block b of rows r..r+4 and their scales
                            // are in bounds (the caller's contract).
                            block.write(unsafe {
                                let row = |j: usize| widen_w::<Q4>(wq.add((r + j) * stride + b * bb));
                                WideBlock {
                                    w: [row(0), row(1), row(2), row(3)],
                                    dw: super::x86::row_scales(wd, r, nb, b),
                                }
                            });
                        }
                        // SAFETY: the loop above wrote the first seg blocks.
                        let blocks = unsafe { std::slice::from_raw_parts(staged.as_ptr().cast::<WideBlock>(), seg) };
                        for t in 0..pass {
                            let out = &mut y[t0 + t][r - r0..r - r0 + 4];
                            let mut acc = if b0 == 0 {
                                _mm_setzero_ps()
                            } else {
                                // SAFETY: out holds four floats.
                                unsafe { _mm_loadu_ps(out.as_ptr()) }
                            };
                            for (block, xb) in blocks.iter().zip(&xs[t * seg..(t + 1) * seg]) {
                                let row = |w: &[__m128i; 4]| {
                                    _mm_add_epi32(
                                        _mm_add_epi32(_mm_madd_epi16(w[0], xb.x[0]), _mm_madd_epi16(w[1], xb.x[1])),
                                        _mm_add_epi32(_mm_madd_epi16(w[2], xb.x[2]), _mm_madd_epi16(w[3], xb.x[3])),
                                    )
                                };
                                let [w0, w1, w2, w3] = &block.w;
                                let sumi = super::sse2::hsum4(row(w0), row(w1), row(w2), row(w3));
                                acc = _mm_add_ps(
                                    acc,
                                    _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(sumi), block.dw), xb.dx),
                                );
                            }
                            // SAFETY: as the load above.
                            unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
                        }
                        r += 4;
                    }
                    b0 += seg;
                }
                t0 += pass;
            }
            if rows4 < r1 {
                for (t, yt) in y.iter_mut().enumerate() {
                    // SAFETY: rows rows4..r1 are within what the caller's
                    // contract bounded for this token; yt holds r1 − r0
                    // outputs.
                    unsafe {
                        matvec::<Q4>(
                            yt.as_mut_ptr().add(rows4 - r0),
                            wq,
                            wd,
                            &x.token(t),
                            nb,
                            stride,
                            rows4,
                            r1,
                        )
                    };
                }
            }
        }
    };
}
