//! SVE tier (AArch64 only): A64FX, Graviton3, Neoverse V1/N2/V2 and later.
//! Implements the two matvecs and the two matmuls; everything else is the
//! NEON tier's (bound, not re-implemented: the float kernels are load-bound
//! at the model's sizes).
//!
//! This tier deliberately does not use the neon_dotprod module: SVE does
//! not imply FEAT_DotProd (qemu's a64fx model has SVE without it), and
//! SVE's own `sdot z.s, z.b, z.b` is part of base SVE. So the guard checks
//! asimd and sve only.
//!
//! SVE has no stable intrinsics: each matvec call runs `asm!` blocks (one
//! for its whole four- or eight-row groups, one for a last group of fewer
//! rows) inside functions compiled with `#[target_feature(enable = "sve")]`;
//! the z registers are declared as clobbers through their overlapping v
//! registers, the p registers by name.
//!
//! Integer dot (DESIGN.md §5). Which code runs depends on the vector length
//! (`cntb`), chosen per call:
//! * VL = 128, Q8_0 at VL = 256, or any length that is not a power of two
//!   (the *narrow* steps): four rows, one block per step in 128-bit registers, as the
//!   dotprod tier does, with SVE's `sdot` on the z registers instead of
//!   FEAT_DotProd's, and NEON's `addp` (base AArch64) to add each row's four
//!   lanes: three `addp` for four rows; two blocks per loop iteration. Q4
//!   unpacks with & 0x0F and >> 4 only: the − 8 of every nibble is one
//!   shared −8·Σx per block (an `sdot` of the activation with −8), added
//!   once to the four rows' sums.
//! * VL = 256·G with G = 1 (Q4_0 only), 2, 4, 8 (the *wide* steps): eight rows, G blocks
//!   per step, one predicated load of each row's 32·G bytes and one `sdot`;
//!   three rounds of `uzp1`/`uzp2` + add for the eight rows together leave
//!   row j's block b0 + k in lane j·G + k (a block is eight lanes at every
//!   length). Q4 loads each row's packed bytes zero-extended into
//!   halfwords, copies each into both bytes (`trn1`), shifts the odd ones
//!   by 4, & 0x0F − 8, against an activation permuted once per step (`tbl`)
//!   to pair byte 2i with element i and 2i + 1 with element 16 + i. Whole Q4
//!   groups at VL 256 and 512 instead take 2G blocks per step: a row's VL
//!   packed bytes unpacked where they lie (& 0x0F: elements 0–15 of each
//!   block, >> 4: 16–31, each block four lanes), the activation's halves
//!   gathered to match (`compact`, `splice`), two `uzp` rounds.
//!
//! In both, the int32 sums are never reset: each block's (or step's) sums
//! are the difference between two reductions of the running sums, exact in
//! wrapping int32 since each is below 2^31, which saves resetting the
//! accumulators every block. Each term is then converted, multiplied by the
//! row's scale and the activation's (gathered: `ld1w` with vector offsets,
//! predicated on the blocks < nb) as the scalar kernel does, `sumi · dw ·
//! dx` with no FMA, and added to the row's float sum in block order: in the
//! wide steps rounds of `uzp1`/`uzp2` of the terms with themselves bring
//! block k's lanes down to lanes j, added for k = 0, 1, …. Lanes past the
//! last block add +0.0, which changes no sum (a sum of +0.0 and other
//! terms is never −0.0). So every result is bit-identical to the scalar
//! kernel's at every vector length.
//!
//! A last group of fewer rows repeats its last row in the spare slots and
//! stores only its own rows (predicated `st1w`), so there is no separate
//! tail code to drift.
//!
//! Cost, in guest instructions per decoded token under qemu (`ml gen --dim
//! 256 --hidden 512 --vocab 4096 --layers 4`, Q8_0 / Q4_0; the whole token,
//! not only the matvecs): neon-dotprod 1.61 M / 1.80 M; this tier at VL 128
//! 1.21 M / 1.31 M, 256 1.21 M / 1.08 M, 512 0.92 M / 0.74 M, 2048 0.67 M /
//! 0.49 M (before: 3.70 M / 4.72 M at 128, 2.03 M / 2.14 M at 512). Per row
//! and block of Q8_0 the matvec costs about 6.5 instructions at VL 128,
//! against the dotprod tier's 10; at 128 bits the narrow steps are the
//! dotprod tier's algorithm, cheaper by the running sums (no reset), the
//! gathered scales and two blocks per iteration.
//!
//! Matmul (prompt processing, `matmul_q8`/`matmul_q4`): tiles of four rows
//! × several tokens, a weight block loaded (and for Q4_0 unpacked, with the
//! − 8 applied to the nibbles once per tile) for all the tile's tokens.
//! Which tile runs depends on the vector length, chosen per call:
//! * VL = 128 (the *narrow tile*, `Tile`): four rows × up to four tokens,
//!   one block per step in 128-bit registers, each token's step the narrow
//!   matvec's (`sdot` on z, three `addp`, the term); the four rows' int32
//!   sums are shared by the tile's tokens and never reset, so each token's
//!   block sums are again the difference of two consecutive reductions.
//!   Per row, block and token about 5 instructions (Q8_0), against the
//!   matvec's 6.5. It is also the fallback at every length when the
//!   outputs do not lie at equal strides (the model cuts them with
//!   `chunks_exact_mut`, so they always do there).
//! * VL ≥ 256 (the *segment tile*, `Seg`): four rows × 2·VL/128 tokens,
//!   one token per 128-bit segment of two token vectors. A row's block is
//!   loaded once, replicated to every segment (`ld1rqb`, two vectors:
//!   elements 0–15 and 16–31), each token's block halves gathered into its
//!   segment (`ld1w` with offsets), so eight `sdot`s serve VL/128 tokens;
//!   a segment-local reduction (`trn1`/`trn2` + add at .s, then at .d:
//!   nine instructions) leaves token t's four rows' sums in lanes 4t + j,
//!   and the terms are computed lane by lane for all of them: the row
//!   scales gathered once per block, the tokens' once per vector, the
//!   outputs scattered (`st1w` with offsets: the outputs' equal stride).
//!   Lanes past the tile's tokens are predicated off in every load and
//!   store. Base SVE has no segment-wise `addp` (that is SVE2), hence the
//!   `trn` rounds, which never cross a segment.
//!
//! Both compute each token's exact int32 block sums (the same products as
//! the matvec, summed in int32 where no partial sum can overflow; the
//! running sums' differences exact in wrapping int32), then per row and
//! block the scalar kernel's `sum += sumi · dw · dx` in its order and with
//! no FMA (`scvtf`, `fmul` by the row's scale, `fmul` by the token's, `fadd`
//! to a float sum that starts at +0.0), blocks in order: so y[t][r] is the
//! matvec's bits for token t (and the scalar kernel's) at every vector
//! length, however the rows and tokens fall into tiles (batch invariance,
//! `tests/it/batch.rs`). One token takes the matvec itself.
//!
//! Cost, in guest instructions per prompt token under qemu (the harness's
//! figure: `ml run` with a 40-token prompt less an 8-token one, / 32, the
//! whole token; Q8_0 / Q4_0), on the golden models (`ml gen` defaults:
//! dim 64, hidden 128) and, in brackets, on `--dim 256 --hidden 512 --vocab
//! 4096 --layers 4`; before, the matvec once per token:
//!
//! | VL | before | after |
//! |---|---|---|
//! | 128 | 57.8 k / 65.2 k (656 k / 895 k) | 52.5 k / 54.7 k (564 k / 637 k) |
//! | 256 | 57.8 k / 59.7 k (656 k / 733 k) | 50.2 k / 51.7 k (504 k / 555 k) |
//! | 512 | 50.5 k / 59.4 k (459 k / 498 k) | 44.4 k / 45.2 k (342 k / 367 k) |
//! | 2048 | 51.9 k / 56.6 k (286 k / 327 k) | 40.1 k / 40.3 k (221 k / 227 k) |
//!
//! against neon-dotprod's 60.2 k / 63.7 k (734 k / 827 k) on cortex-a76.
//! The matmul itself, before → after, on the golden models: 18.7 k → 13.8
//! k / 26.2 k → 16.1 k at VL 128, 18.7 k → 11.4 k / 20.7 k → 13.0 k at
//! 256, 11.3 k → 5.7 k / 20.4 k → 6.5 k at 512, 12.8 k → 1.4 k / 17.6 k →
//! 1.6 k at 2048 (neon-dotprod's 21.3 k / 24.7 k). Decoding is unchanged
//! (one token is the matvec). At VL 128 the segment tile would be one
//! token per vector (8.3 instructions per row, block and token against the
//! narrow tile's 5), and at 256 the narrow tile costs 5–12 % more than the
//! segment tile, so the switch is at 256.

use std::arch::asm;

use crate::core::quant::{Q4_BLOCK_BYTES, QK};
use crate::core::tensor::QAct;

// The fallback chain, skipping neon_dotprod (see above): the rest is NEON's.
pub use super::neon::{add, attn_mix, attn_scores, axpy_f32, dot_f32, quantize_q8, rmsnorm, rope, silu_mul, softmax};

pub const TIER: &str = "sve";
/// HWCAP_ASIMD (the NEON tier's kernels are bound here) and HWCAP_SVE.
/// Not asimddp: see the module comment.
pub const REQUIRED_FEATURES: &[&str] = &["asimd", "sve"];

matvec_entry_points!();
tiled_matmul_entry_points!(matmul);

/// The vector length in bytes (16 to 256).
///
/// # Safety
/// A call from code not compiled for SVE must know the CPU has SVE (this
/// build's guard has checked it).
#[target_feature(enable = "sve")]
pub fn vector_bytes() -> usize {
    let n: usize;
    // SAFETY: cntb only reads the vector length, and this function's
    // feature is SVE.
    unsafe { asm!("cntb {n}", n = out(reg) n, options(pure, nomem, nostack, preserves_flags)) };
    n
}

// ---------------------------------------------------------------------------
// Narrow (128-bit) steps. Registers: v0–v1 the activation block, v2–v9 the
// weights, v16–v19 the four rows' int32 sums (never reset: running over the
// whole call, in wrapping int32), v20/v21 their last two reductions, v22 the
// block's term, v25 the rows' scale offsets (v30 the same + 1: the next
// block), v26 their scales, v28/v31 the activation's scales, v29 the four
// rows' float sums; p1 = four lanes, p2 the `rows` stored. Q4: v23 the
// running −8·Σx, v24 = −8, v27 = 0x0F.

/// Row `$acc`'s running sum += its block (elements 0–15 in `$lo`, 16–31 in
/// `$hi`) · the activation's (v0, v1).
macro_rules! narrow_sdot {
    ($acc:literal, $lo:literal, $hi:literal) => {
        concat!(
            "sdot ",
            $acc,
            ".s, ",
            $lo,
            ".b, z0.b\n",
            "sdot ",
            $acc,
            ".s, ",
            $hi,
            ".b, z1.b\n",
        )
    };
}

/// The four rows' running sums reduced into `$dst` (lane j: row j).
macro_rules! narrow_reduce {
    ($dst:literal) => {
        concat!(
            "addp v22.4s, v18.4s, v19.4s\n",
            "addp ",
            $dst,
            ".4s, v16.4s, v17.4s\n",
            "addp ",
            $dst,
            ".4s, ",
            $dst,
            ".4s, v22.4s\n",
        )
    };
}

/// One Q8 block: the four rows' running sums, reduced into `$dst`.
macro_rules! q8_block {
    ($dst:literal) => {
        concat!(
            "ldp q0, q1, [{x}], #32\n",
            "ldp q2, q3, [{w0}], #32\n",
            "ldp q4, q5, [{w1}], #32\n",
            "ldp q6, q7, [{w2}], #32\n",
            "ldp q8, q9, [{w3}], #32\n",
            narrow_sdot!("z16", "z2", "z3"),
            narrow_sdot!("z17", "z4", "z5"),
            narrow_sdot!("z18", "z6", "z7"),
            narrow_sdot!("z19", "z8", "z9"),
            narrow_reduce!($dst),
        )
    };
}

/// One Q4 block, as `q8_block`: nibbles without the −8, and the shared
/// Σ(n − 8)·x = Σ n·x − 8·Σx correction (v23) added to all four rows.
macro_rules! q4_block {
    ($dst:literal) => {
        concat!(
            "ldp q0, q1, [{x}], #32\n",
            "ldr q2, [{w0}], #16\n",
            "ldr q4, [{w1}], #16\n",
            "ldr q6, [{w2}], #16\n",
            "ldr q8, [{w3}], #16\n",
            "and v3.16b, v2.16b, v27.16b\n",
            "ushr v2.16b, v2.16b, #4\n",
            "and v5.16b, v4.16b, v27.16b\n",
            "ushr v4.16b, v4.16b, #4\n",
            "and v7.16b, v6.16b, v27.16b\n",
            "ushr v6.16b, v6.16b, #4\n",
            "and v9.16b, v8.16b, v27.16b\n",
            "ushr v8.16b, v8.16b, #4\n",
            narrow_sdot!("z16", "z3", "z2"),
            narrow_sdot!("z17", "z5", "z4"),
            narrow_sdot!("z18", "z7", "z6"),
            narrow_sdot!("z19", "z9", "z8"),
            "sdot z23.s, z0.b, z24.b\n",
            "sdot z23.s, z1.b, z24.b\n",
            narrow_reduce!($dst),
            "addp v22.4s, v23.4s, v23.4s\n",
            "addp v22.4s, v22.4s, v22.4s\n",
            "add ",
            $dst,
            ".4s, ",
            $dst,
            ".4s, v22.4s\n",
        )
    };
}

/// A block's terms: its int32 sums are `$cur − $prev` (two reductions of
/// the running sums; exact in wrapping int32, since each is below 2^31),
/// then per row the scalar kernel's `sum += sumi · dw · dx` (no FMA); the
/// scales at `$offs` from sw, dx in `$dx`.
macro_rules! narrow_term {
    ($cur:literal, $prev:literal, $offs:literal, $dx:literal) => {
        concat!(
            "sub v22.4s, ",
            $cur,
            ".4s, ",
            $prev,
            ".4s\n",
            "scvtf v22.4s, v22.4s\n",
            "ld1w {{z26.s}}, p1/z, [{sw}, ",
            $offs,
            ".s, uxtw #2]\n",
            "fmul v22.4s, v22.4s, v26.4s\n",
            "fmul v22.4s, v22.4s, ",
            $dx,
            ".s[0]\n",
            "fadd v29.4s, v29.4s, v22.4s\n",
        )
    };
}

/// The whole call: groups of four rows; per group, an odd first block on
/// its own, then blocks two at a time (the reductions alternate between
/// v20 and v21, so the previous one is never copied); the group's rows
/// stored, and the row pointers moved on to the next group (`adv`,
/// `swadv`: four rows on, less the row just read). `$block` is `q8_block`
/// or `q4_block`, `$init` the format's constants.
macro_rules! narrow_asm {
    ($block:ident, $init:expr, $m:ident, $w:ident, $sw:ident, $y:ident, $rows:ident, $groups:ident, $adv:ident, $swadv:ident, $offs:ident, $($extra:tt)*) => {
        asm!(
            "ptrue p1.s, vl4",
            "whilelt p2.s, xzr, {rows}",
            "mov z30.d, z25.d",
            "add z30.s, z30.s, #1",
            "movi v16.2d, #0",
            "movi v17.2d, #0",
            "movi v18.2d, #0",
            "movi v19.2d, #0",
            "movi v21.2d, #0",
            $init,
            "3:",
            "movi v29.2d, #0",
            "mov {x}, {xbase}",
            "mov {sx}, {sxbase}",
            "tbz {nb}, #0, 4f",
            $block!("v20"),
            "ldr s28, [{sx}], #4",
            narrow_term!("v20", "v21", "z25", "v28"),
            "mov v21.16b, v20.16b",
            "add {sw}, {sw}, #4",
            "4:",
            "lsr {n}, {nb}, #1",
            "cbz {n}, 5f",
            "2:",
            $block!("v20"),
            "ldp s28, s31, [{sx}], #8",
            narrow_term!("v20", "v21", "z25", "v28"),
            $block!("v21"),
            narrow_term!("v21", "v20", "z30", "v31"),
            "add {sw}, {sw}, #8",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            "5:",
            "st1w {{z29.s}}, p2, [{y}]",
            "add {y}, {y}, #16",
            "add {w0}, {w0}, {adv}",
            "add {w1}, {w1}, {adv}",
            "add {w2}, {w2}, {adv}",
            "add {w3}, {w3}, {adv}",
            "add {sw}, {sw}, {swadv}",
            "subs {groups}, {groups}, #1",
            "b.ne 3b",
            x = out(reg) _,
            xbase = in(reg) $m.xq,
            w0 = inout(reg) $w[0] => _,
            w1 = inout(reg) $w[1] => _,
            w2 = inout(reg) $w[2] => _,
            w3 = inout(reg) $w[3] => _,
            sx = out(reg) _,
            sxbase = in(reg) $m.xd,
            sw = inout(reg) $sw => _,
            n = out(reg) _,
            nb = in(reg) $m.nb,
            rows = in(reg) $rows,
            y = inout(reg) $y => _,
            groups = inout(reg) $groups => _,
            adv = in(reg) $adv,
            swadv = in(reg) $swadv,
            in("v25") $offs,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
            out("v21") _, out("v22") _, out("v26") _, out("v28") _, out("v29") _,
            out("v30") _, out("v31") _,
            out("p1") _, out("p2") _,
            $($extra)*
            options(nostack)
        )
    };
}

// ---------------------------------------------------------------------------
// Wide steps (VL = 256·G bits). Registers: z0 the step's activation bytes,
// z1–z8 the eight rows' weights (then scratch), z16–z23 the rows' int32 sums
// (cumulative, as in the narrow steps), z11 the previous reduction, z12 the
// step's terms, lane j·G + k for row j and block b0 + k; z13 = b0 + k,
// z14 = j·nb + b0 + k (each lane's scale index), z15 = nb; z24/z25 the
// weight and activation scales; z28 the rows' float sums (lane j); z9/z10
// Q4's permutation and shifts; p0 all true, p1 the step's bytes, p2 Q4's
// packed bytes, p3 the step's blocks, p4 the group's rows.
//
// The macros below are keyed by the number of blocks a row has in one
// vector of int32 (G, or 2G in the pair steps): 1, 2, 4 or 8.

/// Lane i's row, j = i / G, in z27 (which holds i).
macro_rules! lane_row {
    (1) => {
        ""
    };
    (2) => {
        "lsr z27.s, z27.s, #1\n"
    };
    (4) => {
        "lsr z27.s, z27.s, #2\n"
    };
    (8) => {
        "lsr z27.s, z27.s, #3\n"
    };
}

/// Lane i's block, k = i % G, in z26 (which holds i).
macro_rules! lane_block {
    (1) => {
        "mov z26.s, #0\n"
    };
    (2) => {
        "and z26.s, z26.s, #1\n"
    };
    (4) => {
        "and z26.s, z26.s, #3\n"
    };
    (8) => {
        "and z26.s, z26.s, #7\n"
    };
}

/// The first two rounds of uzp1/uzp2 + add over the eight rows' sums
/// z16–z23 (each round adds neighbouring lanes): rows 0–3 in z2, rows 4–7
/// in z6.
macro_rules! reduce8_two_rounds {
    () => {
        concat!(
            "uzp1 z1.s, z16.s, z17.s\n",
            "uzp2 z2.s, z16.s, z17.s\n",
            "add z1.s, z1.s, z2.s\n",
            "uzp1 z3.s, z18.s, z19.s\n",
            "uzp2 z4.s, z18.s, z19.s\n",
            "add z3.s, z3.s, z4.s\n",
            "uzp1 z5.s, z20.s, z21.s\n",
            "uzp2 z6.s, z20.s, z21.s\n",
            "add z5.s, z5.s, z6.s\n",
            "uzp1 z7.s, z22.s, z23.s\n",
            "uzp2 z8.s, z22.s, z23.s\n",
            "add z7.s, z7.s, z8.s\n",
            "uzp1 z2.s, z1.s, z3.s\n",
            "uzp2 z4.s, z1.s, z3.s\n",
            "add z2.s, z2.s, z4.s\n",
            "uzp1 z6.s, z5.s, z7.s\n",
            "uzp2 z8.s, z5.s, z7.s\n",
            "add z6.s, z6.s, z8.s\n",
        )
    };
}

/// Three rounds: lane j·G + k of z1 ← row j's int32 sum over blocks b0 + k
/// (a block is eight lanes).
macro_rules! reduce8 {
    () => {
        concat!(
            reduce8_two_rounds!(),
            "uzp1 z1.s, z2.s, z6.s\n",
            "uzp2 z3.s, z2.s, z6.s\n",
            "add z1.s, z1.s, z3.s\n",
        )
    };
}

/// `$op $d.s, $a.s, $b.s`.
macro_rules! op_s {
    ($op:literal, $d:literal, $a:literal, $b:literal) => {
        concat!($op, " ", $d, ".s, ", $a, ".s, ", $b, ".s\n")
    };
}

/// `$dst` (lane j: row j) += the terms in `$src` (lane j·G + k: row j,
/// block b0 + k), block after block: the lanes of block k are brought down
/// to lanes j by rounds of uzp1/uzp2 of the terms with themselves, then
/// added in k order. Scratch z1–z8.
macro_rules! acc_blocks {
    (1, $src:literal, $dst:literal) => {
        op_s!("fadd", $dst, $dst, $src)
    };
    (2, $src:literal, $dst:literal) => {
        concat!(
            op_s!("uzp1", "z1", $src, $src),
            op_s!("uzp2", "z2", $src, $src),
            op_s!("fadd", $dst, $dst, "z1"),
            op_s!("fadd", $dst, $dst, "z2"),
        )
    };
    (4, $src:literal, $dst:literal) => {
        concat!(
            op_s!("uzp1", "z1", $src, $src), // k = 0, 2
            op_s!("uzp2", "z2", $src, $src), // k = 1, 3
            "uzp1 z3.s, z1.s, z1.s\n",       // 0
            "uzp2 z4.s, z1.s, z1.s\n",       // 2
            "uzp1 z5.s, z2.s, z2.s\n",       // 1
            "uzp2 z6.s, z2.s, z2.s\n",       // 3
            op_s!("fadd", $dst, $dst, "z3"),
            op_s!("fadd", $dst, $dst, "z5"),
            op_s!("fadd", $dst, $dst, "z4"),
            op_s!("fadd", $dst, $dst, "z6"),
        )
    };
    (8, $src:literal, $dst:literal) => {
        concat!(
            op_s!("uzp1", "z1", $src, $src), // k = 0, 2, 4, 6
            op_s!("uzp2", "z2", $src, $src), // k = 1, 3, 5, 7
            "uzp1 z3.s, z1.s, z1.s\n",       // 0, 4
            "uzp2 z4.s, z1.s, z1.s\n",       // 2, 6
            "uzp1 z5.s, z2.s, z2.s\n",       // 1, 5
            "uzp2 z6.s, z2.s, z2.s\n",       // 3, 7
            "uzp1 z1.s, z3.s, z3.s\n",       // 0
            "uzp2 z2.s, z3.s, z3.s\n",       // 4
            "uzp1 z3.s, z4.s, z4.s\n",       // 2
            "uzp2 z4.s, z4.s, z4.s\n",       // 6
            "uzp1 z7.s, z5.s, z5.s\n",       // 1
            "uzp2 z8.s, z5.s, z5.s\n",       // 5
            "uzp1 z5.s, z6.s, z6.s\n",       // 3
            "uzp2 z6.s, z6.s, z6.s\n",       // 7
            op_s!("fadd", $dst, $dst, "z1"),
            op_s!("fadd", $dst, $dst, "z7"),
            op_s!("fadd", $dst, $dst, "z3"),
            op_s!("fadd", $dst, $dst, "z5"),
            op_s!("fadd", $dst, $dst, "z2"),
            op_s!("fadd", $dst, $dst, "z8"),
            op_s!("fadd", $dst, $dst, "z4"),
            op_s!("fadd", $dst, $dst, "z6"),
        )
    };
}

/// Once per call: the lane indices at block 0 (z26 = k, z27 = j·nb + k,
/// `$clamp` optionally clamping j to the group's last row first: the
/// groups copy them to z13/z14), nb in z15, and zeroed int32 sums (never
/// reset, as in the narrow steps). `$g` blocks per row and vector.
macro_rules! wide_setup {
    ($g:tt, $clamp:expr) => {
        concat!(
            "ptrue p0.b\n",
            "index z26.s, #0, #1\n",
            "mov z27.d, z26.d\n",
            lane_row!($g),
            lane_block!($g),
            $clamp,
            "mov z15.s, {nb:w}\n",
            "mul z27.s, p0/m, z27.s, z15.s\n",
            "add z27.s, z27.s, z26.s\n",
            "mov z16.s, #0\n",
            "mov z17.s, #0\n",
            "mov z18.s, #0\n",
            "mov z19.s, #0\n",
            "mov z20.s, #0\n",
            "mov z21.s, #0\n",
            "mov z22.s, #0\n",
            "mov z23.s, #0\n",
            "mov z11.s, #0\n",
        )
    };
}

/// Per group: lane indices back to block 0, float sums zeroed.
macro_rules! wide_group {
    () => {
        concat!(
            "3:\n",
            "mov z13.d, z26.d\n",
            "mov z14.d, z27.d\n",
            "mov z28.s, #0\n",
            "mov {off}, #0\n",
        )
    };
}

/// A step's terms in `$t` (int32 sums on entry): converted, multiplied by
/// the row's scale (at `$sw`) and the activation's, gathered for the
/// step's blocks only (p3: blocks < nb): the scalar kernel's `sumi · dw ·
/// dx`, no FMA.
macro_rules! wide_terms {
    ($t:literal, $sw:literal) => {
        concat!(
            "scvtf ",
            $t,
            ".s, p0/m, ",
            $t,
            ".s\n",
            "ld1w {{z24.s}}, p3/z, [{",
            $sw,
            "}, z14.s, uxtw #2]\n",
            "fmul ",
            $t,
            ".s, ",
            $t,
            ".s, z24.s\n",
            "fmul ",
            $t,
            ".s, ",
            $t,
            ".s, z25.s\n",
        )
    };
}

/// The step's blocks (p3) and their activation scales (z25); then, after
/// the step, the lane indices moved on by `$g` blocks.
macro_rules! step_blocks {
    () => {
        concat!(
            "cmphi p3.s, p0/z, z15.s, z13.s\n",
            "ld1w {{z25.s}}, p3/z, [{sx}, z13.s, uxtw #2]\n",
        )
    };
    ($g:tt) => {
        concat!("add z13.s, z13.s, #", $g, "\n", "add z14.s, z14.s, #", $g, "\n")
    };
}

/// After a group: the eight row pointers and the scales moved on to the
/// next group, and the loop over groups.
macro_rules! next_group {
    ($($more:literal)?) => {
        concat!(
            "add {w0}, {w0}, {adv}\n",
            "add {w1}, {w1}, {adv}\n",
            "add {w2}, {w2}, {adv}\n",
            "add {w3}, {w3}, {adv}\n",
            "add {w4}, {w4}, {adv}\n",
            "add {w5}, {w5}, {adv}\n",
            "add {w6}, {w6}, {adv}\n",
            "add {w7}, {w7}, {adv}\n",
            "add {sw}, {sw}, {swadv}\n",
            $($more,)?
            "subs {groups}, {groups}, #1\n",
            "b.ne 3b\n",
        )
    };
}

/// After the sdots: the step's block sums (difference of the cumulative
/// reductions), their terms, added per row in block order; the loop; then
/// the store of the group's rows (p4) and the next group.
macro_rules! wide_finish {
    ($g:tt) => {
        concat!(
            reduce8!(),
            "sub z12.s, z1.s, z11.s\n",
            "mov z11.d, z1.d\n",
            step_blocks!(),
            wide_terms!("z12", "sw"),
            acc_blocks!($g, "z12", "z28"),
            step_blocks!($g),
            "incb {off}\n",
            "cmp {off}, {nbytes}\n",
            "b.lo 2b\n",
            "st1w {{z28.s}}, p4, [{y}]\n",
            "add {y}, {y}, #32\n",
            next_group!(),
        )
    };
}

/// The eight rows' sdots against the activation in z0.
macro_rules! sdot8 {
    () => {
        concat!(
            "sdot z16.s, z1.b, z0.b\n",
            "sdot z17.s, z2.b, z0.b\n",
            "sdot z18.s, z3.b, z0.b\n",
            "sdot z19.s, z4.b, z0.b\n",
            "sdot z20.s, z5.b, z0.b\n",
            "sdot z21.s, z6.b, z0.b\n",
            "sdot z22.s, z7.b, z0.b\n",
            "sdot z23.s, z8.b, z0.b\n",
        )
    };
}

/// `$row!(z, w)` for the eight rows: weights of row w_j into z_{j+1}.
macro_rules! rows8 {
    ($row:ident) => {
        concat!(
            $row!("z1", "w0"),
            $row!("z2", "w1"),
            $row!("z3", "w2"),
            $row!("z4", "w3"),
            $row!("z5", "w4"),
            $row!("z6", "w5"),
            $row!("z7", "w6"),
            $row!("z8", "w7"),
        )
    };
}

/// One Q8 row of a wide step: its 32·G bytes.
macro_rules! q8_row {
    ($z:literal, $w:literal) => {
        concat!("ld1b {{", $z, ".b}}, p1/z, [{", $w, "}, {off}]\n")
    };
}

/// One Q4 row of a wide step: its 16·G packed bytes, one per halfword
/// (zero-extended), each copied to both bytes of its halfword (trn1), the
/// odd byte shifted down by 4, & 0x0F − 8: byte 2i of a block is element i,
/// byte 2i + 1 element 16 + i, as the permuted activation has them.
macro_rules! q4_row {
    ($z:literal, $w:literal) => {
        concat!(
            "ld1b {{",
            $z,
            ".h}}, p2/z, [{",
            $w,
            "}, {offq}]\n",
            "trn1 ",
            $z,
            ".b, ",
            $z,
            ".b, ",
            $z,
            ".b\n",
            "lsr ",
            $z,
            ".b, p0/m, ",
            $z,
            ".b, z10.b\n",
            "and ",
            $z,
            ".b, ",
            $z,
            ".b, #15\n",
            "sub ",
            $z,
            ".b, ",
            $z,
            ".b, #8\n",
        )
    };
}

/// One asm call of eight-row groups with the operands and clobbers every
/// wide step shares, `$extra` the step's own (each declared once).
///
/// Every caller's contract (its SAFETY comment says which): per group it
/// reads the activation's nb blocks at x and each w[j]'s nb blocks, and the
/// scales of blocks < nb only (p3) of the group's rows; it writes the
/// group's rows at y and only the declared registers. `Matvec::wide` made
/// every pointer from the operands `check_matvec` accepted.
macro_rules! wide_call {
    ($m:ident, [$($template:expr),+ $(,)?], $($extra:tt)*) => {
        // SAFETY: the caller's contract above (loads are predicated: nothing
        // past nb blocks is read); the function's feature is SVE.
        unsafe {
            asm!(
                $($template,)+
                x = in(reg) $m.x,
                w0 = inout(reg) $m.w[0] => _,
                w1 = inout(reg) $m.w[1] => _,
                w2 = inout(reg) $m.w[2] => _,
                w3 = inout(reg) $m.w[3] => _,
                w4 = inout(reg) $m.w[4] => _,
                w5 = inout(reg) $m.w[5] => _,
                w6 = inout(reg) $m.w[6] => _,
                w7 = inout(reg) $m.w[7] => _,
                sx = in(reg) $m.sx,
                sw = inout(reg) $m.sw => _,
                y = inout(reg) $m.y => _,
                groups = inout(reg) $m.groups => _,
                adv = in(reg) $m.adv,
                swadv = in(reg) $m.swadv,
                nb = in(reg) $m.nb,
                nbytes = in(reg) $m.nb * QK,
                off = out(reg) _,
                out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
                out("v5") _, out("v6") _, out("v7") _, out("v8") _,
                out("v11") _, out("v12") _, out("v13") _, out("v14") _, out("v15") _,
                out("v16") _, out("v17") _, out("v18") _, out("v19") _,
                out("v20") _, out("v21") _, out("v22") _, out("v23") _,
                out("v24") _, out("v25") _, out("v26") _, out("v27") _, out("v28") _,
                out("p0") _, out("p1") _, out("p3") _, out("p4") _,
                $($extra)*
                options(nostack)
            )
        }
    };
}

/// The wide step of `$g` blocks per row and vector, for a group of `rows`
/// rows (the spare slots repeat the last; only `rows` are stored).
macro_rules! wide_asm {
    (q8, $m:ident, $g:tt) => {
        // Per group: 32·nb bytes at x and at each w[j].
        wide_call!(
            $m,
            [
                wide_setup!($g, concat!("mov z15.s, {last:w}\n", "umin z27.s, p0/m, z27.s, z15.s\n")),
                "whilelt p4.s, xzr, {rows}",
                wide_group!(),
                "2:",
                "whilelt p1.b, {off}, {nbytes}",
                "ld1b {{z0.b}}, p1/z, [{x}, {off}]",
                rows8!(q8_row),
                sdot8!(),
                wide_finish!($g),
            ],
            rows = in(reg) $m.rows,
            last = in(reg) $m.rows - 1,
        )
    };
    (q4, $m:ident, $g:tt) => {
        // Per group: 32·nb bytes at x and 16·nb at each w[j].
        wide_call!(
            $m,
            [
                wide_setup!($g, concat!("mov z15.s, {last:w}\n", "umin z27.s, p0/m, z27.s, z15.s\n")),
                "whilelt p4.s, xzr, {rows}",
                // z9: the activation permutation pairing byte 2i of a block
                // with element i and byte 2i + 1 with element 16 + i, i.e.
                // (l & ~31) + (l & 31) / 2 + 16·(l & 1) for lane l; z10: the
                // shift (0 or 4) that brings lane l's nibble down.
                "index z9.b, #0, #1",
                "mov z10.d, z9.d",
                "and z10.b, z10.b, #1",
                "lsl z10.b, z10.b, #2",
                "mov z24.d, z9.d",
                "and z24.b, z24.b, #0xe0",
                "and z9.b, z9.b, #0x1e",
                "lsr z9.b, z9.b, #1",
                "add z9.b, z9.b, z24.b",
                "mov z24.d, z10.d",
                "lsl z24.b, z24.b, #2",
                "add z9.b, z9.b, z24.b",
                wide_group!(),
                "mov {offq}, #0",
                "2:",
                "whilelt p1.b, {off}, {nbytes}",
                "whilelt p2.h, {offq}, {qbytes}",
                "ld1b {{z0.b}}, p1/z, [{x}, {off}]",
                "tbl z0.b, {{z0.b}}, z9.b",
                rows8!(q4_row),
                sdot8!(),
                "inch {offq}",
                wide_finish!($g),
            ],
            rows = in(reg) $m.rows,
            last = in(reg) $m.rows - 1,
            qbytes = in(reg) $m.nb * Q4_BLOCK_BYTES,
            offq = out(reg) _,
            out("v9") _, out("v10") _, out("p2") _,
        )
    };
}

// ---------------------------------------------------------------------------
// Wide Q4 over two vectors of activation per step (VL 256 and 512, whole
// groups of eight rows). A row's VL packed bytes (2G blocks) are unpacked
// where they lie: & 0x0F gives elements 0–15 of each block, >> 4 elements
// 16–31, each block in 16 bytes, i.e. four int32 lanes; the activation's
// halves are gathered to match (compact of its low or high 16-byte halves,
// then splice of the two vectors). So a row costs one load, four unpacking
// instructions and two sdots per 2G blocks, and the sums need two uzp rounds:
// z12 ← rows 0–3, z30 ← rows 4–7, lane j·2G + k for block b0 + k.
// Registers as in the wide steps, and: z9 the second activation vector,
// z29 the previous reduction of rows 4–7, z10 their float sums; p5 the
// second vector's bytes, p4 the low half of a vector, p6/p7 the low/high
// 16-byte halves of each 32 (as doublewords).

/// One row: packed bytes → two vectors of nibbles − 8, dotted with the
/// matching activation halves (z1: elements 0–15 of each block, z2: 16–31).
macro_rules! q4_pair_row {
    ($lo:literal, $hi:literal, $w:literal, $acc:literal) => {
        concat!(
            "ld1b {{",
            $lo,
            ".b}}, p2/z, [{",
            $w,
            "}, {offq}]\n",
            "lsr ",
            $hi,
            ".b, ",
            $lo,
            ".b, #4\n",
            "and ",
            $lo,
            ".b, ",
            $lo,
            ".b, #15\n",
            "sub ",
            $lo,
            ".b, ",
            $lo,
            ".b, #8\n",
            "sub ",
            $hi,
            ".b, ",
            $hi,
            ".b, #8\n",
            "sdot ",
            $acc,
            ".s, ",
            $lo,
            ".b, z1.b\n",
            "sdot ",
            $acc,
            ".s, ",
            $hi,
            ".b, z2.b\n",
        )
    };
}

/// The pair step of `$g` = 2G blocks per row and vector (2 or 4).
macro_rules! q4_pair_asm {
    ($m:ident, $g:tt) => {
        // Per group (eight whole rows): 32·nb bytes at x and 16·nb at each
        // w[j]; the scales of rows 4–7 at sw4, four rows on from sw.
        wide_call!(
            $m,
            [
                wide_setup!($g, ""),
                "mov z29.s, #0",
                "cnth {off}",
                "whilelt p4.b, xzr, {off}",
                "index z1.d, #0, #1",
                "and z1.d, z1.d, #2",
                "cmpeq p6.d, p0/z, z1.d, #0",
                "cmpne p7.d, p0/z, z1.d, #0",
                "3:",
                "mov z13.d, z26.d",
                "mov z14.d, z27.d",
                "mov z28.s, #0",
                "mov z10.s, #0",
                "mov {off}, #0",
                "cntb {off2}",
                "mov {offq}, #0",
                "2:",
                "whilelt p1.b, {off}, {nbytes}",
                "whilelt p5.b, {off2}, {nbytes}",
                "whilelt p2.b, {offq}, {qbytes}",
                "ld1b {{z0.b}}, p1/z, [{x}, {off}]",
                "ld1b {{z9.b}}, p5/z, [{x}, {off2}]",
                "compact z1.d, p6, z0.d",
                "compact z2.d, p7, z0.d",
                "compact z3.d, p6, z9.d",
                "compact z4.d, p7, z9.d",
                "splice z1.b, p4, z1.b, z3.b",
                "splice z2.b, p4, z2.b, z4.b",
                q4_pair_row!("z3", "z4", "w0", "z16"),
                q4_pair_row!("z5", "z6", "w1", "z17"),
                q4_pair_row!("z7", "z8", "w2", "z18"),
                q4_pair_row!("z0", "z9", "w3", "z19"),
                q4_pair_row!("z3", "z4", "w4", "z20"),
                q4_pair_row!("z5", "z6", "w5", "z21"),
                q4_pair_row!("z7", "z8", "w6", "z22"),
                q4_pair_row!("z0", "z9", "w7", "z23"),
                // Two uzp rounds (a block is four lanes): rows 0–3 in z2,
                // rows 4–7 in z6.
                reduce8_two_rounds!(),
                "sub z12.s, z2.s, z11.s",
                "mov z11.d, z2.d",
                "sub z30.s, z6.s, z29.s",
                "mov z29.d, z6.d",
                step_blocks!(),
                wide_terms!("z12", "sw"),
                wide_terms!("z30", "sw4"),
                acc_blocks!($g, "z12", "z28"),
                acc_blocks!($g, "z30", "z10"),
                step_blocks!($g),
                "incb {off}, all, mul #2",
                "incb {off2}, all, mul #2",
                "incb {offq}",
                "cmp {off}, {nbytes}",
                "b.lo 2b",
                // Rows 0–3 then 4–7 into lanes 0–7, stored.
                "ptrue p1.s, vl4",
                "splice z28.s, p1, z28.s, z10.s",
                "ptrue p1.s, vl8",
                "st1w {{z28.s}}, p1, [{y}]",
                "add {y}, {y}, #32",
                next_group!("add {sw4}, {sw4}, {swadv}\n"),
            ],
            sw4 = inout(reg) $m.sw.wrapping_add(4 * $m.nb) => _,
            qbytes = in(reg) $m.nb * Q4_BLOCK_BYTES,
            off2 = out(reg) _,
            offq = out(reg) _,
            out("v9") _, out("v10") _, out("v29") _, out("v30") _,
            out("p2") _, out("p5") _, out("p6") _, out("p7") _,
        )
    };
}

/// Picks the matvec for this CPU's vector length: the wide one (eight rows,
/// G = VL/256 blocks per step) when VL is a power of two of 256 bits or
/// more (512 or more for Q8_0), else the narrow one (four rows, one block
/// per step, 128-bit).
///
/// # Safety
/// SVE; `check_matvec` has accepted these arguments.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "sve")]
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
    if nb == 0 {
        for i in 0..r1 - r0 {
            // SAFETY: y holds r1 − r0 floats (check_matvec).
            unsafe { *y.add(i) = 0.0 };
        }
        return;
    }
    let m = Matvec {
        y,
        wq,
        wd,
        xq: x.q.as_ptr(),
        xd: x.d.as_ptr(),
        nb,
        stride,
        r0,
        r1,
    };
    // SAFETY: the operands passed check_matvec and nb ≥ 1; each step runs
    // only at the vector length it is written for.
    unsafe {
        match vector_bytes() {
            // Q8_0 at VL 256: the narrow steps take fewer instructions (per row
            // and block about 6, the wide ones about 7: three uzp rounds cost
            // more than three addp), so the wide Q8_0 steps start at 512.
            32 if Q4 => m.wide::<Q4, 1>(),
            64 => m.wide::<Q4, 2>(),
            128 => m.wide::<Q4, 4>(),
            256 => m.wide::<Q4, 8>(),
            _ => m.narrow::<Q4>(),
        }
    }
}

/// One matvec call's operands (as `matvec` received them).
struct Matvec {
    y: *mut f32,
    wq: *const u8,
    wd: *const f32,
    xq: *const i8,
    xd: *const f32,
    nb: usize,
    stride: usize,
    r0: usize,
    r1: usize,
}

impl Matvec {
    /// Row `r + j` of a group of `rows`, or the group's last row for the
    /// slots past it: the weights of that row.
    #[inline(always)]
    fn row(&self, r: usize, rows: usize, j: usize) -> *const u8 {
        self.wq.wrapping_add((r + j.min(rows - 1)) * self.stride)
    }

    /// Whole groups of `n` rows from r0 on, then one group of the rows left
    /// (its last row repeated in the spare slots, only its own rows stored).
    /// `run(r, rows, groups)` computes `groups` groups of `rows` rows from
    /// row r.
    #[inline(always)]
    fn groups(&self, n: usize, mut run: impl FnMut(usize, usize, usize)) {
        let full = (self.r1 - self.r0) / n;
        if full > 0 {
            run(self.r0, n, full);
        }
        let r = self.r0 + full * n;
        if r < self.r1 {
            run(r, self.r1 - r, 1);
        }
    }

    /// Four rows at a time, one block per step, in 128-bit registers (the
    /// whole vector at VL = 128; at other lengths the low 128 bits, which
    /// NEON's loads zero above).
    ///
    /// # Safety
    /// SVE; the operands passed `check_matvec`, nb ≥ 1.
    #[target_feature(enable = "sve")]
    unsafe fn narrow<const Q4: bool>(&self) {
        let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
        // After a group's row, its pointers are one row on: four rows on
        // from the group's start is this much further.
        let adv = 4 * self.stride - self.nb * bb;
        let swadv = 3 * self.nb * 4;
        self.groups(4, |r, rows, groups| {
            // Row j's scales are offs[j] floats from row r's.
            let offs: [u32; 4] = std::array::from_fn(|j| (j.min(rows - 1) * self.nb) as u32);
            // SAFETY: offs holds four u32.
            let offs = unsafe { std::arch::aarch64::vld1q_u32(offs.as_ptr()) };
            let w: [*const u8; 4] = std::array::from_fn(|j| self.row(r, rows, j));
            // SAFETY: rows r.. lie in [r0, r1), whose scales and outputs
            // check_matvec bounded.
            let (sw, y) = unsafe { (self.wd.add(r * self.nb), self.y.add(r - self.r0)) };
            if Q4 {
                // SAFETY: per group, reads nb blocks of 16 bytes from each
                // w_j, nb blocks of 32 bytes at x, nb scales at sx and at
                // sw + offs[j] (rows the caller's range holds); writes `rows`
                // floats at y, and only the declared registers; the
                // function's feature is SVE.
                unsafe {
                    narrow_asm!(
                        q4_block,
                        concat!("movi v27.16b, #0x0f\n", "movi v24.16b, #0xf8\n", "movi v23.2d, #0\n"),
                        self, w, sw, y, rows, groups, adv, swadv, offs,
                        out("v23") _, out("v24") _, out("v27") _,
                    )
                };
            } else {
                // SAFETY: as above, with 32-byte weight blocks.
                unsafe { narrow_asm!(q8_block, "", self, w, sw, y, rows, groups, adv, swadv, offs,) };
            }
        });
    }

    /// Eight rows at a time, G = VL/256 blocks per step (VL a power of two,
    /// 256 bits or more, so eight rows' G blocks fill one vector of int32).
    ///
    /// # Safety
    /// SVE with VL = 256·G bits; the operands passed `check_matvec`,
    /// nb ≥ 1.
    #[target_feature(enable = "sve")]
    unsafe fn wide<const Q4: bool, const G: usize>(&self) {
        self.groups(8, |r, rows, groups| {
            // Whole Q4 groups at VL 256 and 512 take two activation
            // vectors per step (`q4_pair_asm`); the rest one.
            let pair = Q4 && G <= 2 && rows == 8;
            let m = Wide {
                x: self.xq,
                w: std::array::from_fn(|j| self.row(r, rows, j)),
                sx: self.xd,
                // SAFETY: rows r.. lie in [r0, r1), whose scales and
                // outputs check_matvec bounded.
                sw: unsafe { self.wd.add(r * self.nb) },
                // SAFETY: as above.
                y: unsafe { self.y.add(r - self.r0) },
                groups,
                adv: 8 * self.stride,
                swadv: 8 * self.nb * 4,
                rows,
                nb: self.nb,
            };
            match (Q4, G) {
                (true, 1) if pair => q4_pair_asm!(m, 2),
                (true, 2) if pair => q4_pair_asm!(m, 4),
                (false, 1) => unreachable!("Q8_0 at VL 256 takes the narrow steps"),
                (false, 2) => wide_asm!(q8, m, 2),
                (false, 4) => wide_asm!(q8, m, 4),
                (false, _) => wide_asm!(q8, m, 8),
                (true, 1) => wide_asm!(q4, m, 1),
                (true, 2) => wide_asm!(q4, m, 2),
                (true, 4) => wide_asm!(q4, m, 4),
                (true, _) => wide_asm!(q4, m, 8),
            }
        });
    }
}

/// One wide asm call's operands: `groups` groups of `rows` rows, the first
/// group's row pointers; each next group is `adv` weight bytes and `swadv`
/// scale bytes on.
struct Wide {
    x: *const i8,
    w: [*const u8; 8],
    sx: *const f32,
    sw: *const f32,
    y: *mut f32,
    groups: usize,
    adv: usize,
    swadv: usize,
    rows: usize,
    nb: usize,
}

// ---------------------------------------------------------------------------
// The matmul's tile: four rows × T ≤ 4 tokens, one block per step, in
// 128-bit registers (the narrow steps' layout, at every vector length).
// Registers: v0–v1 the token's activation block, v2–v9 the four rows'
// weights (Q4 unpacked and re-centred in place: v2k elements 0–15, v2k+1
// 16–31), v16–v19 the four rows' int32 sums, running over the whole call
// and all the tile's tokens (never reset), v20/v21 their last two
// reductions, v22 the term, v25 the rows' scale offsets, v26 their scales
// at this block, v28 the token's activation scale, v10–v13 the tokens' float
// sums (lane j: row j); p1 = four lanes, p2 the `rows` stored. Q4: v24 = 8,
// v27 = 0x0F.

/// Token `$x`'s step of one block: its sdots into the running sums, their
/// reduction into `$cur`, the block's int32 sums `$cur − $prev` (exact in
/// wrapping int32, as in the matvec), and the scalar kernel's `sum +=
/// sumi · dw · dx` (no FMA) into `$acc`.
macro_rules! tile_token {
    ($x:expr, $sx:expr, $acc:literal, $cur:literal, $prev:literal) => {
        concat!(
            "ldp q0, q1, [{",
            $x,
            "}], #32\n",
            narrow_sdot!("z16", "z2", "z3"),
            narrow_sdot!("z17", "z4", "z5"),
            narrow_sdot!("z18", "z6", "z7"),
            narrow_sdot!("z19", "z8", "z9"),
            narrow_reduce!($cur),
            "sub v22.4s, ",
            $cur,
            ".4s, ",
            $prev,
            ".4s\n",
            "scvtf v22.4s, v22.4s\n",
            "ldr s28, [{",
            $sx,
            "}], #4\n",
            "fmul v22.4s, v22.4s, v26.4s\n",
            "fmul v22.4s, v22.4s, v28.s[0]\n",
            "fadd ",
            $acc,
            ".4s, ",
            $acc,
            ".4s, v22.4s\n",
        )
    };
}

/// The four rows' weights of one Q8 block.
macro_rules! tile_w_q8 {
    () => {
        concat!(
            "ldp q2, q3, [{w0}], #32\n",
            "ldp q4, q5, [{w1}], #32\n",
            "ldp q6, q7, [{w2}], #32\n",
            "ldp q8, q9, [{w3}], #32\n",
        )
    };
}

/// One row's Q4 block, unpacked as `aarch64::load_w` does: (n & 0x0F) − 8
/// into `$lo` (elements 0–15), (n >> 4) − 8 into `$hi` (16–31).
macro_rules! tile_unpack_q4 {
    ($lo:literal, $hi:literal, $w:literal) => {
        concat!(
            "ldr q",
            $lo,
            ", [{",
            $w,
            "}], #16\n",
            "ushr v",
            $hi,
            ".16b, v",
            $lo,
            ".16b, #4\n",
            "and v",
            $lo,
            ".16b, v",
            $lo,
            ".16b, v27.16b\n",
            "sub v",
            $lo,
            ".16b, v",
            $lo,
            ".16b, v24.16b\n",
            "sub v",
            $hi,
            ".16b, v",
            $hi,
            ".16b, v24.16b\n",
        )
    };
}

/// The four rows' weights of one Q4 block.
macro_rules! tile_w_q4 {
    () => {
        concat!(
            tile_unpack_q4!("2", "3", "w0"),
            tile_unpack_q4!("4", "5", "w1"),
            tile_unpack_q4!("6", "7", "w2"),
            tile_unpack_q4!("8", "9", "w3"),
        )
    };
}

/// A token's pointers after a group, whichever tile stored its outputs: the
/// output on four rows, the activation and its scales back to block 0.
macro_rules! next_token_pointers {
    ($x:expr, $sx:expr, $y:expr) => {
        concat!(
            "add {",
            $y,
            "}, {",
            $y,
            "}, #16\n",
            "sub {",
            $x,
            "}, {",
            $x,
            "}, {xback}\n",
            "sub {",
            $sx,
            "}, {",
            $sx,
            "}, {sxback}\n",
        )
    };
}

/// After a group, token `$x`'s rows stored (p2) and its pointers moved:
/// the output on four rows, the activation back to its block 0.
macro_rules! tile_token_end {
    ($x:expr, $sx:expr, $y:expr, $acc:literal) => {
        concat!(
            "st1w {{z",
            $acc,
            ".s}}, p2, [{",
            $y,
            "}]\n",
            next_token_pointers!($x, $sx, $y),
        )
    };
}

/// The whole tile call: `groups` groups of four rows (the last repeating
/// its last row in the spare slots, `rows` stored) for the T tokens listed
/// as (activation, scales, output, float sum) operand names; per group
/// the blocks in order, each block's weights (`$w`: `tile_w_q8` or
/// `tile_w_q4`) loaded once and then each token's step. The reductions
/// alternate between v20 and v21 (`$odd` copies v20 to v21 after a block
/// of an odd number of tokens, so every block starts from v21).
macro_rules! tile_asm {
    ($w:ident, $init:expr, $t:ident, $odd:expr,
     [$(($x:ident, $sx:ident, $y:ident, $acc:literal, $accn:literal, $cur:literal, $prev:literal)),+],
     [$($xv:expr, $sxv:expr, $yv:expr),+], $($extra:tt)*) => {
        asm!(
            "ptrue p1.s, vl4",
            "whilelt p2.s, xzr, {rows}",
            "movi v16.2d, #0",
            "movi v17.2d, #0",
            "movi v18.2d, #0",
            "movi v19.2d, #0",
            "movi v21.2d, #0",
            $init,
            "3:",
            $(concat!("movi ", $acc, ".2d, #0"),)+
            "mov {n}, {nb}",
            "2:",
            $w!(),
            "ld1w {{z26.s}}, p1/z, [{sw}, z25.s, uxtw #2]",
            "add {sw}, {sw}, #4",
            $(tile_token!(stringify!($x), stringify!($sx), $acc, $cur, $prev),)+
            $odd,
            "subs {n}, {n}, #1",
            "b.ne 2b",
            $(tile_token_end!(stringify!($x), stringify!($sx), stringify!($y), $accn),)+
            "add {w0}, {w0}, {adv}",
            "add {w1}, {w1}, {adv}",
            "add {w2}, {w2}, {adv}",
            "add {w3}, {w3}, {adv}",
            "add {sw}, {sw}, {swadv}",
            "subs {groups}, {groups}, #1",
            "b.ne 3b",
            w0 = inout(reg) $t.w[0] => _,
            w1 = inout(reg) $t.w[1] => _,
            w2 = inout(reg) $t.w[2] => _,
            w3 = inout(reg) $t.w[3] => _,
            sw = inout(reg) $t.sw => _,
            n = out(reg) _,
            nb = in(reg) $t.nb,
            rows = in(reg) $t.rows,
            groups = inout(reg) $t.groups => _,
            adv = in(reg) $t.adv,
            swadv = in(reg) $t.swadv,
            xback = in(reg) $t.nb * QK,
            sxback = in(reg) $t.nb * 4,
            $($x = inout(reg) $xv => _, $sx = inout(reg) $sxv => _, $y = inout(reg) $yv => _,)+
            in("v25") $t.offs,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
            out("v10") _, out("v11") _, out("v12") _, out("v13") _,
            out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
            out("v21") _, out("v22") _, out("v26") _, out("v28") _,
            out("p1") _, out("p2") _,
            $($extra)*
            options(nostack)
        )
    };
}

/// One tile call's operands: `groups` groups of four rows from the first
/// group's row pointers `w` and scales `sw` (each next group `adv` weight
/// bytes and `swadv` scale bytes on from where the last left them), `rows`
/// of the last group stored, row j's scales `offs[j]` floats from sw; the
/// tokens' activations, scales and outputs (at the first group's rows).
struct Tile {
    w: [*const u8; 4],
    sw: *const f32,
    offs: std::arch::aarch64::uint32x4_t,
    nb: usize,
    rows: usize,
    groups: usize,
    adv: usize,
    swadv: usize,
    x: [*const i8; 4],
    sx: [*const f32; 4],
    y: [*mut f32; 4],
}

/// `tile_asm!` for T tokens of `$t` (a `Tile`), in format `$q4`.
macro_rules! tile_call {
    ($t:ident, $q4:expr, $($rest:tt)*) => {
        if $q4 {
            tile_asm!(
                tile_w_q4,
                concat!("movi v27.16b, #0x0f\n", "movi v24.16b, #8\n"),
                $t,
                $($rest)*
                out("v24") _, out("v27") _,
            )
        } else {
            tile_asm!(tile_w_q8, "", $t, $($rest)*)
        }
    };
}

impl Tile {
    /// The tile's asm for its first T tokens.
    ///
    /// # Safety
    /// SVE; for j < T, `x[j]` holds nb blocks of 32 bytes and `sx[j]` nb
    /// scales, and `y[j]` 4·(groups − 1) + rows floats; the `groups` groups'
    /// rows (clamped by `offs` and `w` to the last group's `rows`) have nb
    /// blocks at `w` and scales at sw + offs[j].
    #[target_feature(enable = "sve")]
    unsafe fn run<const Q4: bool, const T: usize>(&self) {
        let (x, sx, y) = (self.x, self.sx, self.y);
        // SAFETY: the caller's contract above: per group, the asm reads nb
        // blocks at each w[j] and at each token's x, nb scales at each
        // token's sx and at sw + offs[j]; writes `rows` (the last group) or
        // four floats at each token's y, and only the declared registers;
        // the function's feature is SVE.
        unsafe {
            match T {
                1 => tile_call!(
                    self,
                    Q4,
                    "mov v21.16b, v20.16b",
                    [(x0, sx0, y0, "v10", "10", "v20", "v21")],
                    [x[0], sx[0], y[0]],
                ),
                2 => tile_call!(
                    self,
                    Q4,
                    "",
                    [
                        (x0, sx0, y0, "v10", "10", "v20", "v21"),
                        (x1, sx1, y1, "v11", "11", "v21", "v20")
                    ],
                    [x[0], sx[0], y[0], x[1], sx[1], y[1]],
                ),
                3 => tile_call!(
                    self,
                    Q4,
                    "mov v21.16b, v20.16b",
                    [
                        (x0, sx0, y0, "v10", "10", "v20", "v21"),
                        (x1, sx1, y1, "v11", "11", "v21", "v20"),
                        (x2, sx2, y2, "v12", "12", "v20", "v21")
                    ],
                    [x[0], sx[0], y[0], x[1], sx[1], y[1], x[2], sx[2], y[2]],
                ),
                _ => tile_call!(
                    self,
                    Q4,
                    "",
                    [
                        (x0, sx0, y0, "v10", "10", "v20", "v21"),
                        (x1, sx1, y1, "v11", "11", "v21", "v20"),
                        (x2, sx2, y2, "v12", "12", "v20", "v21"),
                        (x3, sx3, y3, "v13", "13", "v21", "v20")
                    ],
                    [x[0], sx[0], y[0], x[1], sx[1], y[1], x[2], sx[2], y[2], x[3], sx[3], y[3]],
                ),
            }
        }
    }
}

/// The tiled matmul: the segment tile (`Matvec::segments`) from VL 256 on
/// when the outputs lie at equal strides, else the narrow tile: each token
/// tile of up to four tokens runs every four-row group (`Tile`), a weight
/// block loaded (and unpacked) once per tile. One token is the matvec.
///
/// # Safety
/// SVE; `scaffold::check_matmul_operands` has accepted these arguments and
/// returned `nb`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "sve")]
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
    if nb == 0 || x.n == 1 {
        for (t, yt) in y.iter_mut().enumerate() {
            // SAFETY: check_matmul_operands checked each token's operands
            // as check_matvec does.
            unsafe { matvec::<Q4>(yt.as_mut_ptr(), wq, wd, &x.token(t), nb, stride, r0, r1) };
        }
        return;
    }
    let bb = if Q4 { Q4_BLOCK_BYTES } else { QK };
    let m = Matvec {
        y: std::ptr::null_mut(),
        wq,
        wd,
        xq: x.q.as_ptr(),
        xd: x.d.as_ptr(),
        nb,
        stride,
        r0,
        r1,
    };
    let (xq_stride, xd_stride) = (x.cols, x.cols / QK);
    let vb = vector_bytes();
    if vb >= 32 {
        // SAFETY: as this function's contract.
        if unsafe { m.segments::<Q4>(y, x.n, xq_stride, xd_stride, vb / 16) } {
            return;
        }
    }
    let mut t = 0;
    while t < x.n {
        let tile = (x.n - t).min(4);
        m.groups(4, |r, rows, groups| {
            let offs: [u32; 4] = std::array::from_fn(|j| (j.min(rows - 1) * nb) as u32);
            let mut tl = Tile {
                w: std::array::from_fn(|j| m.row(r, rows, j)),
                // SAFETY: rows r.. lie in [r0, r1), whose scales
                // check_matmul_operands bounded.
                sw: unsafe { wd.add(r * nb) },
                // SAFETY: offs holds four u32.
                offs: unsafe { std::arch::aarch64::vld1q_u32(offs.as_ptr()) },
                nb,
                rows,
                groups,
                adv: 4 * stride - nb * bb,
                swadv: 3 * nb * 4,
                x: [std::ptr::null(); 4],
                sx: [std::ptr::null(); 4],
                y: [std::ptr::null_mut(); 4],
            };
            for j in 0..tile {
                // SAFETY: token t + j < x.n: check_matmul_operands bounded
                // its activations and its output row's r1 − r0 floats.
                unsafe {
                    tl.x[j] = m.xq.add((t + j) * xq_stride);
                    tl.sx[j] = m.xd.add((t + j) * xd_stride);
                    tl.y[j] = y[t + j].as_mut_ptr().add(r - r0);
                }
            }
            // SAFETY: the tile's tokens and rows are the checked ones above.
            unsafe {
                match tile {
                    1 => tl.run::<Q4, 1>(),
                    2 => tl.run::<Q4, 2>(),
                    3 => tl.run::<Q4, 3>(),
                    _ => tl.run::<Q4, 4>(),
                }
            }
        });
        t += tile;
    }
}

// ---------------------------------------------------------------------------
// The matmul's segment tile (VL ≥ 256): four rows × S = VL/128 tokens per
// token vector, one token per 128-bit segment, one or two token vectors per
// step. A row's block is loaded once, replicated to every segment
// (`ld1rqb`: elements 0–15 in one vector, 16–31 in another), and each
// token's block is gathered into its own segment, so the four rows' two
// sdots serve all S tokens of a vector; a segment-local reduction
// (`trn1`/`trn2` + add, twice) leaves token t's four rows' sums in segment
// t, lanes 4t + j, as the narrow steps' `addp` leaves one token's. Registers:
// z0/z1 the tokens' activation halves, z2–z9 the rows' weights (z2j
// elements 0–15, z2j+1 16–31), z10/z11 the activation halves' byte
// offsets, z12–z15 scratch, z16–z19 the rows' running int32 sums (never
// reset, as in the matvec), z20/z21 their last two reductions, z24 the rows'
// scales and z25 their offsets, z26 the tokens' scales and z27 their offsets,
// z28 the float sums (z30 the second token vector's), z29 the outputs'
// offsets; p0 all true, p5 the first token vector's tokens' lanes, p6 those
// of the rows stored (p3, p4 the second's). Q4: z22 = 0x0F, z23 = 8.

/// The setup of `seg_asm!`: lane l is row l % 4 and token l / 4.
macro_rules! seg_setup {
    () => {
        concat!(
            "ptrue p0.b\n",
            "index z30.s, #0, #1\n",
            "lsr z31.s, z30.s, #2\n", // token
            "and z30.s, z30.s, #3\n", // row
            // Activation bytes: (l / 4)·xstride + 4·(l % 4), + 16.
            "mov z12.s, {xstride:w}\n",
            "mul z12.s, p0/m, z12.s, z31.s\n",
            "lsl z13.s, z30.s, #2\n",
            "add z10.s, z12.s, z13.s\n",
            "mov z11.d, z10.d\n",
            "add z11.s, z11.s, #16\n",
            // Activation scales: (l / 4)·sxstride floats.
            "mov z27.s, {sxstride:w}\n",
            "mul z27.s, p0/m, z27.s, z31.s\n",
            // Outputs: (l / 4)·ystride + l % 4 floats.
            "mov z29.s, {ystride:w}\n",
            "mul z29.s, p0/m, z29.s, z31.s\n",
            "add z29.s, z29.s, z30.s\n",
            // Row scales: min(l % 4, last)·nb floats.
            "mov z12.s, {last:w}\n",
            "mov z25.d, z30.d\n",
            "umin z25.s, p0/m, z25.s, z12.s\n",
            "mov z12.s, {nb:w}\n",
            "mul z25.s, p0/m, z25.s, z12.s\n",
            "mov z16.s, #0\n",
            "mov z17.s, #0\n",
            "mov z18.s, #0\n",
            "mov z19.s, #0\n",
            "mov z21.s, #0\n",
        )
    };
}

/// A token vector's predicates: `$p` its tokens' lanes (l / 4 < `$t`),
/// `$ps` those of them in rows ≤ last (the stores).
macro_rules! seg_preds {
    ($t:expr, $p:literal, $ps:literal) => {
        concat!(
            "mov z12.s, {",
            $t,
            ":w}\n",
            "cmphi ",
            $p,
            ".s, p0/z, z12.s, z31.s\n",
            "mov z12.s, {last:w}\n",
            "cmphs ",
            $ps,
            ".s, ",
            $p,
            "/z, z12.s, z30.s\n",
        )
    };
}

/// One token vector's step of a block (the rows' weights in z2–z9): its
/// tokens' activation halves gathered, the sdots into the running sums, the
/// segment-local reduction into `$cur` and the block's int32 sums `$cur −
/// $prev`, then `sum += sumi · dw · dx` (no FMA) into `$acc`; its
/// activation pointers moved to the next block.
macro_rules! seg_vec {
    ($x:expr, $sx:expr, $p:literal, $cur:literal, $prev:literal, $acc:literal) => {
        concat!(
            "ld1w {{z0.s}}, ",
            $p,
            "/z, [{",
            $x,
            "}, z10.s, uxtw]\n",
            "ld1w {{z1.s}}, ",
            $p,
            "/z, [{",
            $x,
            "}, z11.s, uxtw]\n",
            "sdot z16.s, z2.b, z0.b\n",
            "sdot z16.s, z3.b, z1.b\n",
            "sdot z17.s, z4.b, z0.b\n",
            "sdot z17.s, z5.b, z1.b\n",
            "sdot z18.s, z6.b, z0.b\n",
            "sdot z18.s, z7.b, z1.b\n",
            "sdot z19.s, z8.b, z0.b\n",
            "sdot z19.s, z9.b, z1.b\n",
            // Segment-local: z12 = [r0, r1, r0, r1] pair sums, z13 the
            // same for r2, r3; then their two halves added: [r0..r3].
            "trn1 z12.s, z16.s, z17.s\n",
            "trn2 z13.s, z16.s, z17.s\n",
            "add z12.s, z12.s, z13.s\n",
            "trn1 z13.s, z18.s, z19.s\n",
            "trn2 z14.s, z18.s, z19.s\n",
            "add z13.s, z13.s, z14.s\n",
            "trn1 z14.d, z12.d, z13.d\n",
            "trn2 z15.d, z12.d, z13.d\n",
            "add ",
            $cur,
            ".s, z14.s, z15.s\n",
            "sub z12.s, ",
            $cur,
            ".s, ",
            $prev,
            ".s\n",
            "scvtf z12.s, p0/m, z12.s\n",
            "ld1w {{z26.s}}, ",
            $p,
            "/z, [{",
            $sx,
            "}, z27.s, uxtw #2]\n",
            "fmul z12.s, z12.s, z24.s\n",
            "fmul z12.s, z12.s, z26.s\n",
            "fadd ",
            $acc,
            ".s, ",
            $acc,
            ".s, z12.s\n",
            "add {",
            $x,
            "}, {",
            $x,
            "}, #32\n",
            "add {",
            $sx,
            "}, {",
            $sx,
            "}, #4\n",
        )
    };
}

/// After a group, a token vector's outputs scattered (`$ps`), its output
/// pointer on four rows and its activation pointers back to block 0.
macro_rules! seg_vec_end {
    ($x:expr, $sx:expr, $y:expr, $ps:literal, $acc:literal) => {
        concat!(
            "st1w {{",
            $acc,
            ".s}}, ",
            $ps,
            ", [{",
            $y,
            "}, z29.s, uxtw #2]\n",
            next_token_pointers!($x, $sx, $y),
        )
    };
}

/// One row's Q8 block, replicated to every segment.
macro_rules! seg_row_q8 {
    ($lo:literal, $hi:literal, $w:literal) => {
        concat!(
            "ld1rqb {{z",
            $lo,
            ".b}}, p0/z, [{",
            $w,
            "}, {off}]\n",
            "ld1rqb {{z",
            $hi,
            ".b}}, p0/z, [{",
            $w,
            "}, {off2}]\n",
        )
    };
}

/// One row's Q4 block, replicated to every segment and unpacked as
/// `aarch64::load_w` does: (n & 0x0F) − 8 (elements 0–15), (n >> 4) − 8
/// (16–31).
macro_rules! seg_row_q4 {
    ($lo:literal, $hi:literal, $w:literal) => {
        concat!(
            "ld1rqb {{z",
            $lo,
            ".b}}, p0/z, [{",
            $w,
            "}, {off}]\n",
            "lsr z",
            $hi,
            ".b, z",
            $lo,
            ".b, #4\n",
            "and z",
            $lo,
            ".b, z",
            $lo,
            ".b, z22.b\n",
            "sub z",
            $lo,
            ".b, z",
            $lo,
            ".b, z23.b\n",
            "sub z",
            $hi,
            ".b, z",
            $hi,
            ".b, z23.b\n",
        )
    };
}

/// The four rows' weights of one block.
macro_rules! seg_rows {
    ($row:ident) => {
        concat!(
            $row!("2", "3", "w0"),
            $row!("4", "5", "w1"),
            $row!("6", "7", "w2"),
            $row!("8", "9", "w3"),
        )
    };
}

/// The segment tile's whole call: `groups` groups of four rows, each its
/// blocks in order: the four rows' weights (`$row`) and scales, then each
/// token vector's step (`seg_vec`); then the group's outputs scattered and
/// the next group. `$bb` the weight bytes per block, `$step2` how the
/// second weight offset moves (Q8: the hi halves'), `$odd` what follows a
/// block of one token vector (the reductions alternate between z20 and
/// z21, so every block starts from z21). One or two token vectors, listed
/// as (activation, scales, output, token count operands; predicates; float
/// sum; reductions).
macro_rules! seg_asm {
    ($row:ident, $init:expr, $bb:literal, $step2:expr, $odd:expr, $s:ident,
     [$(($x:ident, $sx:ident, $y:ident, $t:ident, $p:literal, $ps:literal, $acc:literal, $cur:literal, $prev:literal,
         $xv:expr, $sxv:expr, $yv:expr, $tv:expr)),+],
     $($extra:tt)*) => {
        asm!(
            seg_setup!(),
            $(seg_preds!(stringify!($t), $p, $ps),)+
            $init,
            "3:",
            $(concat!("mov ", $acc, ".s, #0"),)+
            "mov {off}, #0",
            "mov {off2}, #16",
            "mov {n}, {nb}",
            "2:",
            seg_rows!($row),
            "ld1w {{z24.s}}, p0/z, [{sw}, z25.s, uxtw #2]",
            $(seg_vec!(stringify!($x), stringify!($sx), $p, $cur, $prev, $acc),)+
            $odd,
            concat!("add {off}, {off}, #", $bb),
            $step2,
            "add {sw}, {sw}, #4",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            $(seg_vec_end!(stringify!($x), stringify!($sx), stringify!($y), $ps, $acc),)+
            "add {w0}, {w0}, {adv}",
            "add {w1}, {w1}, {adv}",
            "add {w2}, {w2}, {adv}",
            "add {w3}, {w3}, {adv}",
            "add {sw}, {sw}, {swadv}",
            "subs {groups}, {groups}, #1",
            "b.ne 3b",
            w0 = inout(reg) $s.w[0] => _,
            w1 = inout(reg) $s.w[1] => _,
            w2 = inout(reg) $s.w[2] => _,
            w3 = inout(reg) $s.w[3] => _,
            sw = inout(reg) $s.sw => _,
            $($x = inout(reg) $xv => _, $sx = inout(reg) $sxv => _, $y = inout(reg) $yv => _, $t = in(reg) $tv,)+
            off = out(reg) _,
            off2 = out(reg) _,
            n = out(reg) _,
            nb = in(reg) $s.nb,
            last = in(reg) $s.rows - 1,
            xstride = in(reg) $s.xstride,
            sxstride = in(reg) $s.sxstride,
            ystride = in(reg) $s.ystride,
            groups = inout(reg) $s.groups => _,
            adv = in(reg) $s.adv,
            swadv = in(reg) $s.swadv,
            xback = in(reg) $s.nb * QK,
            sxback = in(reg) $s.nb * 4,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _,
            out("v5") _, out("v6") _, out("v7") _, out("v8") _, out("v9") _,
            out("v10") _, out("v11") _, out("v12") _, out("v13") _, out("v14") _,
            out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _,
            out("v20") _, out("v21") _, out("v24") _, out("v25") _, out("v26") _,
            out("v27") _, out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            out("p0") _, out("p3") _, out("p4") _, out("p5") _, out("p6") _,
            $($extra)*
            options(nostack)
        )
    };
}

/// `seg_asm!` in format `$q4` for the token vectors listed.
macro_rules! seg_call {
    ($s:ident, $q4:expr, $odd:expr, $vecs:tt) => {
        if $q4 {
            seg_asm!(
                seg_row_q4,
                concat!("mov z22.b, #15\n", "mov z23.b, #8\n"),
                "16",
                "",
                $odd,
                $s,
                $vecs,
                out("v22") _, out("v23") _,
            )
        } else {
            seg_asm!(seg_row_q8, "", "32", "add {off2}, {off2}, #32", $odd, $s, $vecs,)
        }
    };
}

/// One segment-tile call's operands: `groups` groups of four rows from the
/// first group's row pointers `w` and scales `sw` (each next group `adv`
/// weight bytes and `swadv` scale bytes on from where the last left them),
/// `rows` of the last group stored; `t` tokens from activation `x` and
/// scales `sx`, token i's `i·xstride` bytes and `i·sxstride` floats on, its
/// outputs at y + i·ystride floats.
struct Seg {
    w: [*const u8; 4],
    sw: *const f32,
    nb: usize,
    rows: usize,
    groups: usize,
    adv: usize,
    swadv: usize,
    x: *const i8,
    sx: *const f32,
    y: *mut f32,
    t: usize,
    xstride: usize,
    sxstride: usize,
    ystride: usize,
}

impl Seg {
    /// # Safety
    /// SVE with VL = 128·`s` bits, t ≤ 2s, and every lane offset below 2^32
    /// bytes; for i < t, token i's nb blocks and scales and its
    /// 4·(groups − 1) + rows outputs lie inside the operands; the groups'
    /// rows (clamped by `w` to the last group's `rows`) have nb blocks at
    /// `w` and nb scales at sw + j·nb.
    #[target_feature(enable = "sve")]
    unsafe fn run<const Q4: bool>(&self, s: usize) {
        // The second token vector's tokens start s on.
        let (x1, sx1, y1) = (
            self.x.wrapping_add(s * self.xstride),
            self.sx.wrapping_add(s * self.sxstride),
            self.y.wrapping_add(s * self.ystride),
        );
        // SAFETY: the caller's contract above: per group the asm reads nb
        // blocks at each w[j] (replicated loads of 16 bytes), the tile's
        // tokens' nb blocks and scales (gathers predicated on p5/p3: the
        // vector's tokens < t) and the rows' scales, and writes the `rows`
        // (or four) outputs of each of the t tokens (scatters predicated on
        // p6/p4); it writes only the declared registers; the function's
        // feature is SVE.
        unsafe {
            if self.t > s {
                seg_call!(
                    self,
                    Q4,
                    "",
                    [
                        (x0, sx0, y0, t0, "p5", "p6", "z28", "z20", "z21", self.x, self.sx, self.y, s),
                        (
                            x1,
                            sx1,
                            y1,
                            t1,
                            "p3",
                            "p4",
                            "z30",
                            "z21",
                            "z20",
                            x1,
                            sx1,
                            y1,
                            self.t - s
                        )
                    ]
                )
            } else {
                seg_call!(
                    self,
                    Q4,
                    "mov z21.d, z20.d",
                    [(x0, sx0, y0, t0, "p5", "p6", "z28", "z20", "z21", self.x, self.sx, self.y, self.t)]
                )
            }
        }
    }
}

impl Matvec {
    /// The matmul in segment tiles of up to `s` tokens (VL = 128·s bits),
    /// if the outputs lie at equal strides (as `chunks_exact_mut` cuts them)
    /// and every lane's offset fits 32 bits; false (nothing done) if not.
    ///
    /// # Safety
    /// SVE with VL = 128·s bits, s ≥ 2; the operands passed
    /// `check_matmul_operands`, nb ≥ 1; `y` holds n output rows, token t's
    /// activations are `t·xq_stride` bytes and `t·xd_stride` scales on.
    #[target_feature(enable = "sve")]
    unsafe fn segments<const Q4: bool>(
        &self,
        y: &mut [&mut [f32]],
        n: usize,
        xq_stride: usize,
        xd_stride: usize,
        s: usize,
    ) -> bool {
        // The asm scatters every token's outputs from token 0's address:
        // each output row's provenance is exposed and the base pointer made
        // from that address, so it may reach all of them (one derived from
        // y[0] alone could reach y[0] only).
        let a0 = y[0].as_mut_ptr().expose_provenance();
        let ystride = if n > 1 {
            y[1].as_ptr().addr().wrapping_sub(a0) / 4
        } else {
            0
        };
        let equal = y
            .iter_mut()
            .enumerate()
            .all(|(t, yt)| yt.as_mut_ptr().expose_provenance() == a0.wrapping_add(t.wrapping_mul(ystride * 4)));
        let y0 = std::ptr::with_exposed_provenance_mut::<f32>(a0);
        let fits = |stride: usize, unit: usize| stride.checked_mul(s * unit).is_some_and(|v| v < 1 << 31);
        if !equal || !fits(ystride, 4) || !fits(xq_stride, 1) || !fits(xd_stride, 4) {
            return false;
        }
        let mut t = 0;
        while t < n {
            let tile = (n - t).min(2 * s);
            self.groups(4, |r, rows, groups| {
                let sg = Seg {
                    w: std::array::from_fn(|j| self.row(r, rows, j)),
                    // SAFETY: rows r.. lie in [r0, r1), whose scales
                    // check_matmul_operands bounded.
                    sw: unsafe { self.wd.add(r * self.nb) },
                    nb: self.nb,
                    rows,
                    groups,
                    adv: 4 * self.stride,
                    swadv: 3 * self.nb * 4,
                    // SAFETY: tokens t.. < n, whose activations
                    // check_matmul_operands bounded.
                    x: unsafe { self.xq.add(t * xq_stride) },
                    // SAFETY: as above.
                    sx: unsafe { self.xd.add(t * xd_stride) },
                    // Token t's output row r: y0 + t·ystride + r − r0
                    // (equal strides, checked above).
                    y: y0.wrapping_add(t * ystride + r - self.r0),
                    t: tile,
                    xstride: xq_stride,
                    sxstride: xd_stride,
                    ystride,
                };
                // SAFETY: tile ≤ s tokens and groups of rows inside the
                // checked operands; the offsets fit (above).
                unsafe { sg.run::<Q4>(s) };
            });
            t += tile;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::core::quant::{quantize_row_q8, Q4_BLOCK_BYTES, QK};
    use crate::core::rng::Rng;
    use crate::core::tensor::{QActs, QTensor, WType};

    /// Outputs at unequal strides cannot be scattered: the matmul takes the
    /// narrow tile at every vector length, and still gives the matvec's
    /// bits for every token (`tests/it/batch.rs` cuts its outputs with
    /// `chunks_exact_mut`, as the model does, so it tests the other path).
    #[test]
    fn outputs_at_unequal_strides_are_the_matvec_per_token() {
        crate::guard::guard();
        let mut rng = Rng::new(7);
        for (q4, k, rows, n) in [
            (false, 64, 9, 5),
            (true, 96, 6, 9),
            (false, 32, 4, 17),
            (true, 32, 5, 3),
        ] {
            let nb = k / QK;
            let bb = if q4 { Q4_BLOCK_BYTES } else { QK };
            let wq: Vec<u8> = (0..rows * nb * bb)
                .map(|_| match q4 {
                    true => rng.next_u32() as u8,
                    false => ((rng.next_u32() % 255) as i32 - 127) as i8 as u8,
                })
                .collect();
            let wd: Vec<f32> = (0..rows * nb).map(|_| rng.symmetric(0.05)).collect();
            let wtype = if q4 { WType::Q4_0 } else { WType::Q8_0 };
            let w = QTensor {
                wtype,
                rows,
                cols: k,
                q: &wq,
                d: &wd,
                packed: false,
            };
            let xf: Vec<f32> = (0..k * n).map(|_| rng.symmetric(2.0)).collect();
            let (mut xq, mut xd) = (vec![0i8; k * n], vec![0f32; nb * n]);
            quantize_row_q8(&xf, &mut xq, &mut xd);
            let x = QActs {
                q: &xq,
                d: &xd,
                cols: k,
                n,
            };
            // Token t's outputs t % 3 floats after token t − 1's.
            let mut buf = vec![0f32; n * (rows + 2)];
            let mut rest: &mut [f32] = &mut buf;
            let mut ys: Vec<&mut [f32]> = Vec::new();
            for t in 0..n {
                let (_, r) = std::mem::take(&mut rest).split_at_mut(t % 3);
                let (yt, r) = r.split_at_mut(rows);
                ys.push(yt);
                rest = r;
            }
            for (r0, r1) in [(0, rows), (1, rows - 1)] {
                if q4 {
                    super::matmul_q4(&mut ys, &w, &x, r0, r1);
                } else {
                    super::matmul_q8(&mut ys, &w, &x, r0, r1);
                }
                for (t, yt) in ys.iter().enumerate() {
                    let mut want = vec![0f32; r1 - r0];
                    if q4 {
                        super::matvec_q4(&mut want, &w, &x.token(t), r0, r1);
                    } else {
                        super::matvec_q8(&mut want, &w, &x.token(t), r0, r1);
                    }
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&yt[..r1 - r0]),
                        bits(&want),
                        "q4 {q4} k {k} rows {r0}..{r1} token {t} of {n}"
                    );
                }
            }
        }
    }
}
