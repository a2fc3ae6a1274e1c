//! NEON tier on ARMv7 (`kernels::neon` when the target is arm; the AArch64
//! NEON tier is `neon_a64.rs`): Cortex-A7, A8, A9, A15 and other ARMv7-A
//! cores with Advanced SIMD. Implements all twelve kernels and
//! the matmuls of prompt processing.
//!
//! Build: ARMv7's NEON intrinsics and `#[target_feature(enable = "neon")]`
//! are unstable, so this tier needs the whole crate built with
//! `RUSTFLAGS="-C target-feature=+neon"` (without it the assembler rejects
//! the q-register code below: "instruction requires: NEON"). Because LLVM
//! may then use NEON anywhere in the crate, `main` included, the guard on
//! this target runs from an `.init_array` constructor before Rust's runtime
//! starts (`guard::early`); every kernel here references it so that the
//! linker keeps it in every binary that can reach them.
//!
//! Code: every vector loop is `asm!` with q/d registers (not plain Rust left
//! to the vectoriser: LLVM does not vectorise float code for ARMv7 NEON,
//! whose arithmetic is not IEEE-exact, so that would silently stay scalar).
//! Loops use q0–q3 and q8–q15 (d0–d7, d16–d31), the caller-saved NEON
//! registers, declared as clobbers.
//!
//! ARMv7 NEON float arithmetic always flushes subnormal inputs and results
//! to zero and rounds to nearest, whatever FPSCR says; the scalar kernels'
//! VFP arithmetic keeps subnormals. So:
//! * the integer path (matvec sums, quantize_q8) is exact, and the matvec's
//!   float part (sumi · dw · dx accumulated per row) is done in VFP scalar
//!   code in the scalar kernel's order: matvec is bit-identical to scalar;
//! * the matmul (prompt processing) tiles rows in pairs and tokens in fours
//!   (`matmul`, `sums2`): each weight block of the pair is loaded, and for
//!   Q4_0 unpacked, once for up to four tokens. Four rows cannot share a
//!   block between tokens in the twelve q registers this code may use (their
//!   weights alone take eight); two rows' weights (four), a token's
//!   activation block (two), one scratch, the int32 partials of two tokens ×
//!   two rows (four) and Q4's 0x88 constant fill them. Only the integer
//!   sums are computed differently, and they are exact; NEON converts them
//!   to f32, which is exact too (|sumi| ≤ 32·127² < 2²⁴, so no rounding and
//!   no subnormal), and the float part is the matvec's: VFP `sumi · dw · dx`
//!   added per row and token in block order. A row's value does not depend
//!   on the rows beside it (the matvec's four-row groups and its tail add
//!   the same terms in the same order), so every output is bit-identical to
//!   the matvec for its token (batch invariance), and an odd last row is
//!   the matvec's own tail;
//! * quantize_q8 is bit-identical: amax is an integer max over |x|'s bits,
//!   and a block whose amax is below 2⁻¹¹⁸ (where flushing x·id could
//!   change a quant) takes the scalar reference's path;
//! * add, axpy_f32 and rope do the scalar kernel's operations in its order,
//!   so they are bit-identical except where a value is subnormal (< 1.2e-38),
//!   which NEON returns as 0;
//! * exp (softmax, silu_mul) meets DESIGN.md §5's 1e-6 wherever e^x is a normal
//!   float (x ≥ −87.33); below that its result is flushed to 0, an absolute
//!   error under 1.2e-38.

use std::arch::asm;

use crate::core::quant::{self, Q4_BLOCK_BYTES, QK};
use crate::core::tensor::{QAct, QActs};

pub const TIER: &str = "neon";
/// HWCAP_NEON. No VFPv4: nothing here uses vfma, so Cortex-A8/A9 qualify.
pub const REQUIRED_FEATURES: &[&str] = &["neon"];

/// Keeps the `.init_array` NEON check linked into every binary that can
/// reach a kernel of this module (an rlib object nothing references would be
/// dropped by the linker, and its constructor with it). Costs one address.
#[inline(always)]
fn keep_guard() {
    std::hint::black_box(&crate::guard::early::NEON_CHECK);
}

// ---------------------------------------------------------------------------
// Integer path: matvec_q8, matvec_q4

matvec_entry_points!(prologue = keep_guard());
tiled_matmul_entry_points!(matmul);

/// Blocks whose int32 sums one call of the asm loops computes.
const CHUNK: usize = 16;

/// Rows four at a time, then a row-at-a-time tail. For each run of up to
/// CHUNK blocks an asm loop computes the int32 block sums (for four rows it
/// loads each activation block once), then VFP code adds `sumi · dw · dx`
/// per row and block exactly as the scalar kernel does: bit-identical.
///
/// # Safety
/// NEON; `check_matvec` has accepted these arguments.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
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
    // SAFETY: the contract above (# Safety) bounds every pointer this
    // body reads or writes, and the CPU has the function's features.
    unsafe {
        let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
        let (xq, xd) = (x.q.as_ptr(), x.d.as_ptr());
        let mut sumi = [0i32; 4 * CHUNK];
        let mut r = r0;
        while r + 4 <= r1 {
            let mut acc = [0.0f32; 4];
            // The scale streams, stepped a block at a time (post-incremented
            // VFP loads; indexing each from its base cost an add per load).
            let (mut pdw, mut pdx) = ([wd; 4], xd);
            for (j, p) in pdw.iter_mut().enumerate() {
                *p = wd.add((r + j) * nb);
            }
            let mut b0 = 0;
            while b0 < nb {
                let n = CHUNK.min(nb - b0);
                let rows: [*const u8; 4] = std::array::from_fn(|j| wq.add((r + j) * stride + b0 * bb));
                sums4::<Q4>(xq.add(b0 * QK), rows, n, sumi.as_mut_ptr());
                let mut ps = sumi.as_ptr();
                for _ in 0..n {
                    let dx = *pdx;
                    pdx = pdx.add(1);
                    for (j, a) in acc.iter_mut().enumerate() {
                        *a += *ps.add(j) as f32 * *pdw[j] * dx;
                        pdw[j] = pdw[j].add(1);
                    }
                    ps = ps.add(4);
                }
                b0 += n;
            }
            std::ptr::copy_nonoverlapping(acc.as_ptr(), y.add(r - r0), 4);
            r += 4;
        }
        while r < r1 {
            let mut sum = 0.0f32;
            let mut b0 = 0;
            while b0 < nb {
                let n = CHUNK.min(nb - b0);
                sums1::<Q4>(xq.add(b0 * QK), wq.add(r * stride + b0 * bb), n, sumi.as_mut_ptr());
                for (b, &s) in sumi[..n].iter().enumerate() {
                    sum += s as f32 * *wd.add(r * nb + b0 + b) * *xd.add(b0 + b);
                }
                b0 += n;
            }
            *y.add(r - r0) = sum;
            r += 1;
        }
    }
}

// The block dot, as asm text: activation block in q0/q1 (d0–d3), weight
// block in q2/q3 (d4–d7), four int32 partials into `$acc`, q8/q9 scratch.
// vmull.s8 widens eight products to int16 and vmlal.s8 adds elements
// i + 16 into the same lanes (|w·x + w'·x'| ≤ 2·127² < 2¹⁵, the quants
// being clamped to ±127), then vpaddl/vpadal fold the int16 lanes into int32.
macro_rules! block_dot {
    ($acc:literal) => {
        concat!(
            "vmull.s8 q8, d4, d0\n",
            "vmlal.s8 q8, d6, d2\n",
            "vmull.s8 q9, d5, d1\n",
            "vmlal.s8 q9, d7, d3\n",
            "vpaddl.s16 ",
            $acc,
            ", q8\n",
            "vpadal.s16 ",
            $acc,
            ", q9\n",
        )
    };
}

// One weight block into q2/q3 from the pointer operand `$w` (advanced).
// Q4: low nibbles are elements 0–15, high nibbles 16–31, minus 8 (q14 holds
// 0x0F bytes, q15 holds 8s).
macro_rules! load_w_q8 {
    ($w:literal) => {
        concat!("vld1.8 {{d4-d7}}, [{", $w, "}]!\n")
    };
}
macro_rules! load_w_q4 {
    ($w:literal) => {
        concat!(
            "vld1.8 {{d4-d5}}, [{",
            $w,
            "}]!\n",
            "vshr.u8 q3, q2, #4\n",
            "vand q2, q2, q14\n",
            "vsub.i8 q2, q2, q15\n",
            "vsub.i8 q3, q3, q15\n",
        )
    };
}

/// The int32 sums loop: per block, the activation block into q0/q1, then
/// `$step` (the rows' loads and block dots, storing their sums at `out`);
/// `n` ≥ 1 blocks. q14/q15 hold Q4's 0x0F and 8.
macro_rules! sums_loop {
    ($step:expr) => {
        concat!(
            "vmov.i8 q14, #15\n",
            "vmov.i8 q15, #8\n",
            "2:\n",
            "vld1.8 {{d0-d3}}, [{x}]!\n",
            $step,
            "subs {n}, {n}, #1\n",
            "bne 2b\n",
        )
    };
}

/// One asm statement of template `$body!(load)` per weight format, `$q4`
/// choosing Q4's load (`load_w_q4`) or Q8's, with the same operands.
macro_rules! per_format {
    ($q4:expr, $body:ident, $($operands:tt)*) => {
        if $q4 {
            asm!($body!(load_w_q4), $($operands)*)
        } else {
            asm!($body!(load_w_q8), $($operands)*)
        }
    };
}

/// The int32 sums of `n` ≥ 1 consecutive blocks of four rows with the
/// activation: out[4b + j] = sumi(row j, block b).
///
/// # Safety
/// NEON; x valid for 32·n bytes, each row for n blocks, out for 4·n.
unsafe fn sums4<const Q4: bool>(x: *const i8, w: [*const u8; 4], n: usize, out: *mut i32) {
    macro_rules! body {
        ($load:ident) => {
            sums_loop!(concat!(
                $load!("w0"),
                block_dot!("q10"),
                $load!("w1"),
                block_dot!("q11"),
                $load!("w2"),
                block_dot!("q12"),
                $load!("w3"),
                block_dot!("q13"),
                // [Σq10, Σq11, Σq12, Σq13] into d20:d21.
                "vpadd.i32 d20, d20, d21\n",
                "vpadd.i32 d22, d22, d23\n",
                "vpadd.i32 d24, d24, d25\n",
                "vpadd.i32 d26, d26, d27\n",
                "vpadd.i32 d20, d20, d22\n",
                "vpadd.i32 d21, d24, d26\n",
                "vst1.32 {{d20-d21}}, [{out}]!\n",
            ))
        };
    }
    // SAFETY: reads n blocks at x and at each row, writes 4·n int32 at out
    // (the caller's bounds); touches only declared registers.
    unsafe {
        per_format!(
            Q4,
            body,
            x = inout(reg) x => _,
            w0 = inout(reg) w[0] => _,
            w1 = inout(reg) w[1] => _,
            w2 = inout(reg) w[2] => _,
            w3 = inout(reg) w[3] => _,
            out = inout(reg) out => _,
            n = inout(reg) n => _,
            out("q0") _, out("q1") _, out("q2") _, out("q3") _,
            out("q8") _, out("q9") _, out("q10") _, out("q11") _,
            out("q12") _, out("q13") _, out("q14") _, out("q15") _,
            options(nostack)
        )
    }
}

/// As `sums4` for one row: out[b] = sumi(block b).
///
/// # Safety
/// NEON; x valid for 32·n bytes, w for n blocks, out for n.
unsafe fn sums1<const Q4: bool>(x: *const i8, w: *const u8, n: usize, out: *mut i32) {
    macro_rules! body {
        ($load:ident) => {
            sums_loop!(concat!(
                $load!("w"),
                block_dot!("q10"),
                "vpadd.i32 d20, d20, d21\n",
                "vpadd.i32 d20, d20, d20\n",
                "vst1.32 {{d20[0]}}, [{out}]!\n",
            ))
        };
    }
    // SAFETY: reads n blocks at x and w, writes n int32 at out (the
    // caller's bounds); touches only declared registers.
    unsafe {
        per_format!(
            Q4,
            body,
            x = inout(reg) x => _,
            w = inout(reg) w => _,
            out = inout(reg) out => _,
            n = inout(reg) n => _,
            out("q0") _, out("q1") _, out("q2") _, out("q3") _,
            out("q8") _, out("q9") _, out("q10") _,
            out("q14") _, out("q15") _,
            options(nostack)
        )
    }
}

/// Tokens per tile of the matmul: a row pair's weights (four q registers),
/// one token's activation block and the four int32 partials of two tokens ×
/// two rows fill the twelve q registers; tokens beyond the pair reuse them.
/// Eight (sixteen VFP accumulators) measured 10% more instructions in
/// `matmul_q8` than four under qemu's icount plugin.
const TOKENS: usize = 4;

/// The matmul: rows in pairs from r0, each pair's tokens in tiles of
/// TOKENS (then one tile of the remaining three, two or one); a last odd
/// row is the matvec's tail, per token. For each run of up to CHUNK blocks
/// `sums2::<Q4, T>` computes the int32 block sums of the pair for the
/// tile's T tokens, loading (and unpacking) each weight block once for all
/// T; then VFP code adds `sumi · dw · dx` per row, token and block, in
/// block order, with the matvec's operations: bit-identical to `matvec` per
/// token.
///
/// # Safety
/// NEON; `scaffold::check_matmul_operands` has accepted these arguments and
/// returned `nb`.
#[allow(clippy::too_many_arguments)]
unsafe fn matmul<const Q4: bool>(
    y: &mut [&mut [f32]],
    wq: *const u8,
    wd: *const f32,
    x: &QActs,
    nb: usize,
    stride: usize,
    r0: usize,
    r1: usize,
) {
    keep_guard();
    let n = x.n;
    // The tiles' block sums, zeroed once per call, not per tile.
    let mut sums = [0.0f32; 2 * TOKENS * CHUNK];
    let mut r = r0;
    while r + 2 <= r1 {
        let mut t = 0;
        while t < n {
            let ys = &mut y[t..];
            // SAFETY: rows r, r + 1 < r1 and tokens t.. < n were bounded by
            // check_matmul_operands (the contract above); each y[t] holds
            // r1 − r0 floats.
            t += unsafe {
                match n - t {
                    1 => pair_tile::<Q4, 1>(ys, &mut sums, wq, wd, x, t, nb, stride, r, r - r0),
                    2 => pair_tile::<Q4, 2>(ys, &mut sums, wq, wd, x, t, nb, stride, r, r - r0),
                    3 => pair_tile::<Q4, 3>(ys, &mut sums, wq, wd, x, t, nb, stride, r, r - r0),
                    _ => pair_tile::<Q4, TOKENS>(ys, &mut sums, wq, wd, x, t, nb, stride, r, r - r0),
                }
            };
        }
        r += 2;
    }
    if r < r1 {
        for (t, yt) in y.iter_mut().enumerate() {
            // SAFETY: row r < r1 was bounded for every token by
            // check_matmul_operands; yt holds r1 − r0 floats.
            unsafe { matvec::<Q4>(yt.as_mut_ptr().add(r - r0), wq, wd, &x.token(t), nb, stride, r, r1) };
        }
    }
}

/// Rows r, r + 1 for tokens t0..t0+T of `x` (the first T of `y`), written
/// at `out` in each token's output. Returns T.
///
/// # Safety
/// NEON; rows r, r + 1 hold nb blocks and their scales, tokens t0..t0+T
/// of x hold nb blocks each, and each y[t] holds out + 2 floats.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn pair_tile<const Q4: bool, const T: usize>(
    y: &mut [&mut [f32]],
    sums: &mut [f32; 2 * TOKENS * CHUNK],
    wq: *const u8,
    wd: *const f32,
    x: &QActs,
    t0: usize,
    nb: usize,
    stride: usize,
    r: usize,
    out: usize,
) -> usize {
    let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
    let (cols, xnb) = (x.cols, x.cols / QK);
    let (xq, xd) = (x.q.as_ptr(), x.d.as_ptr());
    let mut acc = [[0.0f32; 2]; T];
    // SAFETY: the contract above bounds every row, block, scale and token
    // read below, and the T outputs written.
    unsafe {
        // The scale streams, each stepped one block at a time (a loop the
        // compiler turns into post-incremented loads).
        let mut pdx = [xd; T];
        for (t, p) in pdx.iter_mut().enumerate() {
            *p = xd.add((t0 + t) * xnb);
        }
        let (mut pdw0, mut pdw1) = (wd.add(r * nb), wd.add((r + 1) * nb));
        let mut b0 = 0;
        while b0 < nb {
            let n = CHUNK.min(nb - b0);
            let rows = [wq.add(r * stride + b0 * bb), wq.add((r + 1) * stride + b0 * bb)];
            sums2::<Q4, T>(xq.add(t0 * cols + b0 * QK), cols, rows, n, sums.as_mut_ptr());
            let mut ps = sums.as_ptr();
            for _ in 0..n {
                let (dw0, dw1) = (*pdw0, *pdw1);
                (pdw0, pdw1) = (pdw0.add(1), pdw1.add(1));
                for (t, a) in acc.iter_mut().enumerate() {
                    let dx = *pdx[t];
                    pdx[t] = pdx[t].add(1);
                    a[0] += *ps.add(2 * t) * dw0 * dx;
                    a[1] += *ps.add(2 * t + 1) * dw1 * dx;
                }
                ps = ps.add(2 * T);
            }
            b0 += n;
        }
        for (t, a) in acc.iter().enumerate() {
            std::ptr::copy_nonoverlapping(a.as_ptr(), y[t].as_mut_ptr().add(out), 2);
        }
    }
    T
}

// The block dot of a pair kernel: activation block in q0/q1 (d0–d3), the
// weight block in the four d registers named, the int32 partials into
// `$acc`, q14 scratch. As `block_dot` with one scratch register (the pair
// kernel's other eleven are taken).
macro_rules! pair_dot {
    ($acc:literal, $w0:literal, $w1:literal, $w2:literal, $w3:literal) => {
        concat!(
            "vmull.s8 q14, ",
            $w0,
            ", d0\n",
            "vmlal.s8 q14, ",
            $w2,
            ", d2\n",
            "vpaddl.s16 ",
            $acc,
            ", q14\n",
            "vmull.s8 q14, ",
            $w1,
            ", d1\n",
            "vmlal.s8 q14, ",
            $w3,
            ", d3\n",
            "vpadal.s16 ",
            $acc,
            ", q14\n",
        )
    };
}

// The pair kernel's weight loads: row 0's block into q2/q3, row 1's into
// q8/q9. Q4: q15 holds 0x88 bytes; n ^ 8 read as a signed nibble is
// n − 8, so the arithmetic shifts of p ^ 0x88 unpack both nibbles.
macro_rules! pair_load_q8 {
    () => {
        "vld1.8 {{d4-d7}}, [{w0}]!\nvld1.8 {{d16-d19}}, [{w1}]!\n"
    };
}
macro_rules! pair_load_q4 {
    () => {
        concat!(
            "vld1.8 {{d4-d5}}, [{w0}]!\n",
            "vld1.8 {{d16-d17}}, [{w1}]!\n",
            "veor q2, q2, q15\n",
            "veor q8, q8, q15\n",
            "vshr.s8 q3, q2, #4\n",
            "vshr.s8 q9, q8, #4\n",
            "vshl.i8 q2, q2, #4\n",
            "vshl.i8 q8, q8, #4\n",
            "vshr.s8 q2, q2, #4\n",
            "vshr.s8 q8, q8, #4\n",
        )
    };
}

// One token's block (the next, by the token stride) against both rows,
// partials into `$a` (row 0) and `$b` (row 1).
macro_rules! pair_token {
    ($a:literal, $b:literal) => {
        concat!(
            "vld1.8 {{d0-d3}}, [{xt}], {xs}\n",
            pair_dot!($a, "d4", "d5", "d6", "d7"),
            pair_dot!($b, "d16", "d17", "d18", "d19"),
        )
    };
}

// Two tokens: [t0 r0, t0 r1, t1 r0, t1 r1] stored at `out`.
macro_rules! pair_two_tokens {
    () => {
        concat!(
            pair_token!("q10", "q11"),
            pair_token!("q12", "q13"),
            "vpadd.i32 d20, d20, d21\n",
            "vpadd.i32 d22, d22, d23\n",
            "vpadd.i32 d24, d24, d25\n",
            "vpadd.i32 d26, d26, d27\n",
            "vpadd.i32 d20, d20, d22\n",
            "vpadd.i32 d21, d24, d26\n",
            "vcvt.f32.s32 q10, q10\n",
            "vst1.32 {{d20-d21}}, [{out}]!\n",
        )
    };
}

// One token: [r0, r1] stored at `out`.
macro_rules! pair_one_token {
    () => {
        concat!(
            pair_token!("q10", "q11"),
            "vpadd.i32 d20, d20, d21\n",
            "vpadd.i32 d22, d22, d23\n",
            "vpadd.i32 d20, d20, d22\n",
            "vcvt.f32.s32 d20, d20\n",
            "vst1.32 {{d20}}, [{out}]!\n",
        )
    };
}

// The pair kernel's block loop: per block the two rows' weights, then
// `$tokens` (which steps {xt} by T token strides), then {xt} back to the
// first token's next block; `n` ≥ 1 blocks.
macro_rules! pair_loop {
    ($load:ident, $tokens:expr) => {
        concat!(
            "vmov.i8 q15, #0x88\n",
            "2:\n",
            $load!(),
            $tokens,
            "sub {xt}, {xt}, {back}\n",
            "subs {n}, {n}, #1\n",
            "bne 2b\n",
        )
    };
}

/// The int32 sums of `n` ≥ 1 consecutive blocks of two rows with T ≤ 4
/// tokens' activations (`x`, then every `xs` bytes):
/// out[2T·b + 2t + j] = sumi(row j, token t, block b). Each weight block is
/// loaded (Q4: and unpacked) once for the T tokens.
///
/// # Safety
/// NEON; x valid for n blocks at each of T tokens, each row for n blocks,
/// out for 2T·n int32.
unsafe fn sums2<const Q4: bool, const T: usize>(x: *const i8, xs: usize, w: [*const u8; 2], n: usize, out: *mut f32) {
    // One asm block per weight format, the operands written once.
    macro_rules! pair_asm {
        ($load:ident, $tokens:expr) => {
            asm!(
                pair_loop!($load, $tokens),
                xt = inout(reg) x => _,
                xs = in(reg) xs,
                back = in(reg) T * xs - QK,
                w0 = inout(reg) w[0] => _,
                w1 = inout(reg) w[1] => _,
                out = inout(reg) out => _,
                n = inout(reg) n => _,
                out("q0") _, out("q1") _, out("q2") _, out("q3") _,
                out("q8") _, out("q9") _, out("q10") _, out("q11") _,
                out("q12") _, out("q13") _, out("q14") _, out("q15") _,
                options(nostack)
            )
        };
    }
    macro_rules! run {
        ($tokens:expr) => {
            // SAFETY: reads n blocks at each row and at each of the T
            // tokens, writes 2T·n int32 at out (the caller's bounds);
            // touches only declared registers.
            unsafe {
                if Q4 {
                    pair_asm!(pair_load_q4, $tokens)
                } else {
                    pair_asm!(pair_load_q8, $tokens)
                }
            }
        };
    }
    match T {
        1 => run!(pair_one_token!()),
        2 => run!(pair_two_tokens!()),
        3 => run!(concat!(pair_two_tokens!(), pair_one_token!())),
        _ => run!(concat!(pair_two_tokens!(), pair_two_tokens!())),
    }
}

// ---------------------------------------------------------------------------
// quantize_q8

pub fn quantize_q8(q: &mut [i8], d: &mut [f32], x: &[f32]) {
    keep_guard();
    // As the scalar kernel's zip: whole blocks that all three slices hold.
    let blocks = (x.len() / QK).min(q.len() / QK).min(d.len());
    for b in 0..blocks {
        let (xb, qb) = (&x[b * QK..(b + 1) * QK], &mut q[b * QK..(b + 1) * QK]);
        // SAFETY: NEON verified by the early guard; xb holds QK floats.
        let amax = f32::from_bits(unsafe { abs_max_bits(xb.as_ptr()) });
        // Below 2⁻¹¹⁸, |x·id| for a subnormal x could reach 0.5, so NEON's
        // flushing of x could change its quant: use the reference there.
        if amax < f32::MIN_POSITIVE * 256.0 {
            d[b] = quant::quantize_block_q8(xb, qb);
            continue;
        }
        d[b] = amax / 127.0;
        let id = 127.0 / amax;
        // SAFETY: as above; both slices are exactly QK long.
        unsafe { quantize_block(qb.as_mut_ptr(), xb.as_ptr(), id) };
    }
}

/// The bits of max |x| over one block, NaN skipped: the scalar kernel's
/// `fold(0.0, max(m, |x|))`. For non-negative floats the unsigned order of
/// their bits is their numeric order, subnormals and infinity included, so
/// an integer max is exact where NEON's float max would flush subnormals.
///
/// # Safety
/// NEON; `x` valid for QK floats.
unsafe fn abs_max_bits(x: *const f32) -> u32 {
    let bits: u32;
    // SAFETY: reads 32 floats at x; touches only declared registers.
    unsafe {
        asm!(
            "vmov.i32 q12, #0",
            "mov {i}, #2",
            "2:",
            "vld1.32 {{d16-d19}}, [{x}]!",
            "vld1.32 {{d20-d23}}, [{x}]!",
            // All-ones where x == x, i.e. not NaN.
            "vceq.f32 q0, q8, q8",
            "vceq.f32 q1, q9, q9",
            "vceq.f32 q2, q10, q10",
            "vceq.f32 q3, q11, q11",
            "vbic.i32 q8, #0x80000000",
            "vbic.i32 q9, #0x80000000",
            "vbic.i32 q10, #0x80000000",
            "vbic.i32 q11, #0x80000000",
            "vand q8, q8, q0",
            "vand q9, q9, q1",
            "vand q10, q10, q2",
            "vand q11, q11, q3",
            "vmax.u32 q8, q8, q9",
            "vmax.u32 q10, q10, q11",
            "vmax.u32 q12, q12, q8",
            "vmax.u32 q12, q12, q10",
            "subs {i}, {i}, #1",
            "bne 2b",
            "vpmax.u32 d24, d24, d25",
            "vpmax.u32 d24, d24, d24",
            "vmov.32 {bits}, d24[0]",
            x = inout(reg) x => _,
            i = out(reg) _,
            bits = out(reg) bits,
            out("q0") _, out("q1") _, out("q2") _, out("q3") _,
            out("q8") _, out("q9") _, out("q10") _, out("q11") _, out("q12") _,
            options(readonly, nostack)
        )
    };
    bits
}

/// q = clamp(trunc(x·id + copysign(0.5, x)), ±127), the scalar kernel's
/// operations: a separate multiply and add (both exact-rounded on normal
/// values, and the caller's amax bound keeps flushing from mattering);
/// vcvt truncates, saturates and maps NaN to 0 as `as` does, and the clamp
/// in integers equals the scalar clamp in floats.
///
/// # Safety
/// NEON; `q` and `x` valid for QK elements.
unsafe fn quantize_block(q: *mut i8, x: *const f32, id: f32) {
    // SAFETY: reads 32 floats at x, writes 32 bytes at q; touches only
    // declared registers.
    unsafe {
        asm!(
            "vdup.32 q0, {id}",
            "vmov.i32 q1, #0x80000000",
            "vmov.f32 q2, #0.5",
            "vmov.i32 q3, #127",
            "vneg.s32 q15, q3",
            "mov {i}, #4",
            "2:",
            "vld1.32 {{d16-d19}}, [{x}]!",
            // copysign(0.5, x)
            "vand q10, q8, q1",
            "vand q11, q9, q1",
            "vorr q10, q10, q2",
            "vorr q11, q11, q2",
            "vmul.f32 q8, q8, q0",
            "vmul.f32 q9, q9, q0",
            "vadd.f32 q8, q8, q10",
            "vadd.f32 q9, q9, q11",
            "vcvt.s32.f32 q8, q8",
            "vcvt.s32.f32 q9, q9",
            "vmin.s32 q8, q8, q3",
            "vmin.s32 q9, q9, q3",
            "vmax.s32 q8, q8, q15",
            "vmax.s32 q9, q9, q15",
            // In range already, so the saturating narrows only narrow.
            "vqmovn.s32 d20, q8",
            "vqmovn.s32 d21, q9",
            "vqmovn.s16 d20, q10",
            "vst1.8 {{d20}}, [{q}]!",
            "subs {i}, {i}, #1",
            "bne 2b",
            id = in(reg) id.to_bits(),
            x = inout(reg) x => _,
            q = inout(reg) q => _,
            i = out(reg) _,
            out("q0") _, out("q1") _, out("q2") _, out("q3") _,
            out("q8") _, out("q9") _, out("q10") _, out("q11") _, out("q15") _,
            options(nostack)
        )
    };
}

// ---------------------------------------------------------------------------
// exp, for softmax and silu

/// The constants of the exp below, loaded into d0–d7 so that the by-scalar
/// forms (vmla.f32 q, q, dN[i]) can use them without a register each.
static EXP_CONSTS: [f32; 16] = [
    EXP_HI,
    EXP_LO, // d0
    std::f32::consts::LOG2_E,
    0.5, // d1
    LN2_HI,
    LN2_LO, // d2
    EXP_POLY[0],
    EXP_POLY[1], // d3
    EXP_POLY[2],
    EXP_POLY[3], // d4
    EXP_POLY[4],
    EXP_POLY[5], // d5
    1.0,
    0.0, // d6
    0.0,
    0.0, // d7
];

use super::exp_poly::{EXP_HI, EXP_LO, EXP_POLY, LN2_HI, LN2_LO};

/// Loads EXP_CONSTS into d0–d7 (clobbers the `{c}` pointer operand).
macro_rules! load_exp_consts {
    () => {
        "vld1.32 {{d0-d3}}, [{c}]!\nvld1.32 {{d4-d7}}, [{c}]\n"
    };
}

/// q8 ← e^q8 for four lanes, Cephes expf without FMA (ARMv7 NEON's vmla
/// rounds the product; the polynomial was designed for that): clamp to
/// [EXP_LO, EXP_HI]; n = ⌊x·log2e + 0.5⌋ (vcvt truncates, then −1 where that
/// rounded up); r = x − n·LN2_HI − n·LN2_LO; e^r = 1 + r + r²·P(r); then
/// ·2^⌊n/2⌋·2^(n−⌊n/2⌋) so that each factor stays a normal float.
/// Needs EXP_CONSTS in d0–d7; uses q9–q13.
macro_rules! exp_q8 {
    () => {
        concat!(
            "vdup.32 q9, d0[0]\n",
            "vmin.f32 q8, q8, q9\n",
            "vdup.32 q9, d0[1]\n",
            "vmax.f32 q8, q8, q9\n",
            "vdup.32 q10, d1[1]\n",
            "vmla.f32 q10, q8, d1[0]\n",
            "vcvt.s32.f32 q11, q10\n",
            "vcvt.f32.s32 q12, q11\n",
            "vcgt.f32 q13, q12, q10\n",
            "vadd.i32 q11, q11, q13\n",
            "vcvt.f32.s32 q12, q11\n",
            "vmls.f32 q8, q12, d2[0]\n",
            "vmls.f32 q8, q12, d2[1]\n",
            "vdup.32 q9, d3[1]\n",
            "vmla.f32 q9, q8, d3[0]\n",
            "vdup.32 q10, d4[0]\n",
            "vmla.f32 q10, q9, q8\n",
            "vdup.32 q9, d4[1]\n",
            "vmla.f32 q9, q10, q8\n",
            "vdup.32 q10, d5[0]\n",
            "vmla.f32 q10, q9, q8\n",
            "vdup.32 q9, d5[1]\n",
            "vmla.f32 q9, q10, q8\n",
            "vmul.f32 q9, q9, q8\n",
            "vmul.f32 q9, q9, q8\n",
            "vadd.f32 q9, q9, q8\n",
            "vdup.32 q10, d6[0]\n",
            "vadd.f32 q9, q9, q10\n",
            "vshr.s32 q10, q11, #1\n",
            "vsub.i32 q11, q11, q10\n",
            "vmov.i32 q12, #127\n",
            "vadd.i32 q10, q10, q12\n",
            "vadd.i32 q11, q11, q12\n",
            "vshl.i32 q10, q10, #23\n",
            "vshl.i32 q11, q11, #23\n",
            "vmul.f32 q9, q9, q10\n",
            "vmul.f32 q8, q9, q11\n",
        )
    };
}

/// x[i] ← e^(x[i] − shift) for `n4` ≥ 1 groups of four; returns the four
/// lane sums of the results.
///
/// # Safety
/// NEON; `x` valid for 4·n4 floats.
unsafe fn exp_shift_sum(x: *mut f32, n4: usize, shift: f32) -> [f32; 4] {
    let mut sums = [0.0f32; 4];
    // SAFETY: reads and writes 4·n4 floats at x and writes `sums`; touches
    // only declared registers.
    unsafe {
        asm!(
            load_exp_consts!(),
            "vdup.32 q15, {shift}",
            "vmov.i32 q14, #0",
            "2:",
            "vld1.32 {{d16-d17}}, [{x}]",
            "vsub.f32 q8, q8, q15",
            exp_q8!(),
            "vst1.32 {{d16-d17}}, [{x}]!",
            "vadd.f32 q14, q14, q8",
            "subs {n}, {n}, #1",
            "bne 2b",
            "vst1.32 {{d28-d29}}, [{s}]",
            c = inout(reg) EXP_CONSTS.as_ptr() => _,
            shift = in(reg) shift.to_bits(),
            x = inout(reg) x => _,
            n = inout(reg) n4 => _,
            s = in(reg) sums.as_mut_ptr(),
            out("q0") _, out("q1") _, out("q2") _, out("q3") _,
            out("q8") _, out("q9") _, out("q10") _, out("q11") _,
            out("q12") _, out("q13") _, out("q14") _, out("q15") _,
            options(nostack)
        )
    };
    sums
}

/// e^x of each element, in place: the polynomial the float kernels use,
/// exposed so the tests can hold it to DESIGN.md §5's 1e-6.
#[doc(hidden)]
pub fn exp_in_place(v: &mut [f32]) {
    keep_guard();
    for c in v.chunks_mut(4) {
        let mut buf = [0.0f32; 4];
        buf[..c.len()].copy_from_slice(c);
        // SAFETY: NEON verified by the early guard; buf holds four floats.
        unsafe { exp_shift_sum(buf.as_mut_ptr(), 1, 0.0) };
        c.copy_from_slice(&buf[..c.len()]);
    }
}

// ---------------------------------------------------------------------------
// Float kernels

/// Σ a[i]·b[i] over n elements: four accumulators for 16 elements a step,
/// then one for groups of four, then the rest in VFP.
///
/// # Safety
/// NEON; `a` and `b` valid for n reads.
unsafe fn dot(a: *const f32, b: *const f32, n: usize) -> f32 {
    let (n16, n4) = (n / 16, n % 16 / 4);
    if n16 + n4 == 0 {
        // SAFETY: the contract: a and b hold n floats.
        let (a, b) = unsafe { (std::slice::from_raw_parts(a, n), std::slice::from_raw_parts(b, n)) };
        return crate::kernels::scalar::dot_f32(a, b);
    }
    let mut lanes = [0.0f32; 4];
    // SAFETY: reads 16·n16 + 4·n4 floats at a and b, writes `lanes`;
    // touches only declared registers.
    unsafe {
        asm!(
            "vmov.i32 q8, #0",
            "vmov.i32 q9, #0",
            "vmov.i32 q10, #0",
            "vmov.i32 q11, #0",
            "cmp {n16}, #0",
            "beq 3f",
            "2:",
            "vld1.32 {{d0-d3}}, [{a}]!",
            "vld1.32 {{d4-d7}}, [{b}]!",
            "vmla.f32 q8, q0, q2",
            "vmla.f32 q9, q1, q3",
            "vld1.32 {{d0-d3}}, [{a}]!",
            "vld1.32 {{d4-d7}}, [{b}]!",
            "vmla.f32 q10, q0, q2",
            "vmla.f32 q11, q1, q3",
            "subs {n16}, {n16}, #1",
            "bne 2b",
            "3:",
            "cmp {n4}, #0",
            "beq 5f",
            "4:",
            "vld1.32 {{d0-d1}}, [{a}]!",
            "vld1.32 {{d4-d5}}, [{b}]!",
            "vmla.f32 q8, q0, q2",
            "subs {n4}, {n4}, #1",
            "bne 4b",
            "5:",
            "vadd.f32 q8, q8, q9",
            "vadd.f32 q10, q10, q11",
            "vadd.f32 q8, q8, q10",
            "vst1.32 {{d16-d17}}, [{out}]",
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            n16 = inout(reg) n16 => _,
            n4 = inout(reg) n4 => _,
            out = in(reg) lanes.as_mut_ptr(),
            out("q0") _, out("q1") _, out("q2") _, out("q3") _,
            out("q8") _, out("q9") _, out("q10") _, out("q11") _,
            options(nostack)
        )
    };
    let mut sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for i in n - n % 4..n {
        // SAFETY: i < n, inside the contract's n floats.
        sum += unsafe { *a.add(i) * *b.add(i) };
    }
    sum
}

pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    keep_guard();
    let n = a.len().min(b.len());
    // SAFETY: NEON verified by the early guard; both slices hold n elements.
    unsafe { dot(a.as_ptr(), b.as_ptr(), n) }
}

/// o = x / sqrt(mean(x²) + eps) · w
pub fn rmsnorm(o: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
    keep_guard();
    // SAFETY: NEON verified by the early guard; x holds x.len() elements.
    let ss = unsafe { dot(x.as_ptr(), x.as_ptr(), x.len()) } / x.len() as f32;
    let scale = 1.0 / (ss + eps).sqrt();
    let n = o.len().min(x.len()).min(w.len());
    let n4 = n / 4;
    if n4 > 0 {
        // SAFETY: as above; all three slices hold n ≥ 4·n4 elements.
        unsafe { scale_mul(o.as_mut_ptr(), x.as_ptr(), w.as_ptr(), scale, n4) }
    }
    for i in 4 * n4..n {
        o[i] = w[i] * (scale * x[i]);
    }
}

/// o[i] = w[i] · (scale · x[i]), the scalar kernel's order, for `n4` ≥ 1
/// groups of four.
///
/// # Safety
/// NEON; pointers valid for 4·n4 elements.
unsafe fn scale_mul(o: *mut f32, x: *const f32, w: *const f32, scale: f32, n4: usize) {
    // SAFETY: reads 4·n4 floats at x and w, writes as many at o; touches
    // only declared registers.
    unsafe {
        asm!(
            "vdup.32 q0, {s}",
            "2:",
            "vld1.32 {{d16-d17}}, [{x}]!",
            "vld1.32 {{d18-d19}}, [{w}]!",
            "vmul.f32 q8, q8, q0",
            "vmul.f32 q8, q9, q8",
            "vst1.32 {{d16-d17}}, [{o}]!",
            "subs {n}, {n}, #1",
            "bne 2b",
            s = in(reg) scale.to_bits(),
            x = inout(reg) x => _,
            w = inout(reg) w => _,
            o = inout(reg) o => _,
            n = inout(reg) n4 => _,
            out("q0") _, out("q8") _, out("q9") _,
            options(nostack)
        )
    };
}

/// In-place softmax, shifted by the maximum for stability.
pub fn softmax(x: &mut [f32]) {
    keep_guard();
    if x.is_empty() {
        return;
    }
    let n = x.len();
    let n4 = n / 4;
    // The maximum in VFP: a NaN is skipped as in the scalar kernel, and the
    // pass is cheap next to the exps.
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0.0f32;
    if n4 > 0 {
        // SAFETY: NEON verified by the early guard; x holds n ≥ 4·n4 floats.
        let lanes = unsafe { exp_shift_sum(x.as_mut_ptr(), n4, max) };
        sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    }
    let tail = &mut x[4 * n4..];
    if !tail.is_empty() {
        // Padding lanes are computed but neither stored nor summed.
        let mut buf = [0.0f32; 4];
        buf[..tail.len()].copy_from_slice(tail);
        // SAFETY: as above; buf holds four floats.
        unsafe { exp_shift_sum(buf.as_mut_ptr(), 1, max) };
        for (t, &v) in tail.iter_mut().zip(&buf) {
            *t = v;
            sum += v;
        }
    }
    // Divide, as the scalar kernel does (ARMv7 NEON has no vector divide;
    // VFP's is exact).
    for v in x.iter_mut() {
        *v /= sum;
    }
}

rope_by_heads!();

/// One head's `pairs` pairs: four a step in NEON (`rotate4`), the rest in
/// VFP with the scalar kernel's expressions.
///
/// # Safety
/// NEON; `v` valid for 2·pairs floats, cos/sin for `pairs`.
unsafe fn rotate(v: *mut f32, cos: *const f32, sin: *const f32, pairs: usize) {
    keep_guard();
    let p4 = pairs / 4;
    if p4 > 0 {
        // SAFETY: the contract: v holds 2·pairs ≥ 8·p4 floats, cos/sin
        // hold pairs ≥ 4·p4.
        unsafe { rotate4(v, cos, sin, p4) }
    }
    for i in 4 * p4..pairs {
        // SAFETY: i < pairs: pair i and its angle are inside the contract.
        unsafe {
            let (a, b) = (*v.add(2 * i), *v.add(2 * i + 1));
            let (c, s) = (*cos.add(i), *sin.add(i));
            *v.add(2 * i) = a * c - b * s;
            *v.add(2 * i + 1) = a * s + b * c;
        }
    }
}

/// Four pairs a step: vld2 splits them into a = q8 and b = q9, then
/// a·c − b·s and a·s + b·c (the scalar kernel's expressions, rounded
/// identically) go to q12/q13, which vst2 interleaves back.
///
/// # Safety
/// NEON; `v` valid for 8·p4 floats, cos/sin for 4·p4, p4 ≥ 1.
unsafe fn rotate4(v: *mut f32, cos: *const f32, sin: *const f32, p4: usize) {
    // SAFETY: reads and writes 8·p4 floats at v, reads 4·p4 at cos and sin;
    // touches only declared registers.
    unsafe {
        asm!(
            "2:",
            "vld2.32 {{d16-d19}}, [{v}]",
            "vld1.32 {{d20-d21}}, [{c}]!",
            "vld1.32 {{d22-d23}}, [{s}]!",
            "vmul.f32 q12, q8, q10",
            "vmul.f32 q13, q9, q11",
            "vsub.f32 q12, q12, q13",
            "vmul.f32 q13, q8, q11",
            "vmul.f32 q14, q9, q10",
            "vadd.f32 q13, q13, q14",
            "vst2.32 {{d24-d27}}, [{v}]!",
            "subs {n}, {n}, #1",
            "bne 2b",
            v = inout(reg) v => _,
            c = inout(reg) cos => _,
            s = inout(reg) sin => _,
            n = inout(reg) p4 => _,
            out("q8") _, out("q9") _, out("q10") _, out("q11") _,
            out("q12") _, out("q13") _, out("q14") _,
            options(nostack)
        )
    };
}

/// g = silu(g) · u, with silu(v) = v / (1 + e^(−v)).
pub fn silu_mul(g: &mut [f32], u: &[f32]) {
    keep_guard();
    let n = g.len().min(u.len());
    let n4 = n / 4;
    if n4 > 0 {
        // SAFETY: NEON verified by the early guard; both slices hold
        // n ≥ 4·n4 elements.
        unsafe { silu_mul_neon(g.as_mut_ptr(), u.as_ptr(), n4) }
    }
    if n > 4 * n4 {
        let (mut gb, mut ub) = ([0.0f32; 4], [0.0f32; 4]);
        let m = n - 4 * n4;
        gb[..m].copy_from_slice(&g[4 * n4..n]);
        ub[..m].copy_from_slice(&u[4 * n4..n]);
        // SAFETY: as above; the buffers hold four floats.
        unsafe { silu_mul_neon(gb.as_mut_ptr(), ub.as_ptr(), 1) }
        g[4 * n4..n].copy_from_slice(&gb[..m]);
    }
}

/// `n4` ≥ 1 groups of four: e = e^(−g), then g · (1/(1 + e)) · u, the
/// reciprocal by vrecpe refined with two Newton steps (vrecps) to about an
/// ulp: ARMv7 NEON has no vector divide.
///
/// # Safety
/// NEON; pointers valid for 4·n4 elements.
unsafe fn silu_mul_neon(g: *mut f32, u: *const f32, n4: usize) {
    // SAFETY: reads and writes 4·n4 floats at g, reads as many at u;
    // touches only declared registers.
    unsafe {
        asm!(
            load_exp_consts!(),
            "2:",
            "vld1.32 {{d28-d29}}, [{g}]",
            "vneg.f32 q8, q14",
            exp_q8!(),
            "vdup.32 q9, d6[0]",
            "vadd.f32 q8, q8, q9",
            "vrecpe.f32 q9, q8",
            "vrecps.f32 q10, q8, q9",
            "vmul.f32 q9, q9, q10",
            "vrecps.f32 q10, q8, q9",
            "vmul.f32 q9, q9, q10",
            "vld1.32 {{d30-d31}}, [{u}]!",
            "vmul.f32 q14, q14, q9",
            "vmul.f32 q14, q14, q15",
            "vst1.32 {{d28-d29}}, [{g}]!",
            "subs {n}, {n}, #1",
            "bne 2b",
            c = inout(reg) EXP_CONSTS.as_ptr() => _,
            g = inout(reg) g => _,
            u = inout(reg) u => _,
            n = inout(reg) n4 => _,
            out("q0") _, out("q1") _, out("q2") _, out("q3") _,
            out("q8") _, out("q9") _, out("q10") _, out("q11") _,
            out("q12") _, out("q13") _, out("q14") _, out("q15") _,
            options(nostack)
        )
    };
}

/// y += x
pub fn add(y: &mut [f32], x: &[f32]) {
    keep_guard();
    let n = y.len().min(x.len());
    let n8 = n / 8;
    if n8 > 0 {
        // SAFETY: NEON verified by the early guard; both slices hold
        // n ≥ 8·n8 elements.
        unsafe { axpy(y.as_mut_ptr(), None, x.as_ptr(), n8) }
    }
    for i in 8 * n8..n {
        y[i] += x[i];
    }
}

/// y += a · x
pub fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    keep_guard();
    let n = y.len().min(x.len());
    let n8 = n / 8;
    if n8 > 0 {
        // SAFETY: NEON verified by the early guard; both slices hold
        // n ≥ 8·n8 elements.
        unsafe { axpy(y.as_mut_ptr(), Some(a), x.as_ptr(), n8) }
    }
    for i in 8 * n8..n {
        y[i] += a * x[i];
    }
}

/// y += a·x (or y += x without a) for `n8` ≥ 1 groups of eight; multiply
/// then add, as the scalar kernels.
///
/// # Safety
/// NEON; pointers valid for 8·n8 elements.
unsafe fn axpy(y: *mut f32, a: Option<f32>, x: *const f32, n8: usize) {
    macro_rules! run {
        ($scale:literal) => {
            // SAFETY: reads 8·n8 floats at x and y, writes them at y;
            // touches only declared registers.
            unsafe { asm!(
                "vdup.32 q0, {a}",
                "2:",
                "vld1.32 {{d16-d19}}, [{y}]",
                "vld1.32 {{d20-d23}}, [{x}]!",
                $scale,
                "vadd.f32 q8, q8, q10",
                "vadd.f32 q9, q9, q11",
                "vst1.32 {{d16-d19}}, [{y}]!",
                "subs {n}, {n}, #1",
                "bne 2b",
                a = in(reg) a.unwrap_or(1.0).to_bits(),
                y = inout(reg) y => _,
                x = inout(reg) x => _,
                n = inout(reg) n8 => _,
                out("q0") _, out("q8") _, out("q9") _, out("q10") _, out("q11") _,
                options(nostack)
            ) }
        };
    }
    if a.is_some() {
        run!("vmul.f32 q10, q10, q0\nvmul.f32 q11, q11, q0");
    } else {
        run!("");
    }
}

attention_by_rows!();
