//! Every kernel bound in this build (`kernels::*`, the tier chosen by the
//! `isa-*` features) against the scalar reference (`kernels::scalar::*`),
//! on seeded random inputs and edge shapes (DESIGN.md §7).
//!
//! Tolerances:
//! * quantize_q8: bit-identical (quant bytes and scale bits), NaN/inf included.
//! * matvec: per-block int32 sums exact. This is asserted directly: with all
//!   scales 1.0 the result is the integer dot itself (every partial sum is
//!   below 2^24, so f32 holds it exactly), and for a single block the result
//!   must be exactly (sumi·dw)·dx. The final FP32 error is held to 1e-5
//!   relative to the largest |y| of the call: a row whose sum nearly cancels
//!   has no meaningful relative error of its own, since the tiers may order
//!   and fuse (FMA) the per-block additions differently.
//! * Float kernels: 1e-5 relative. For sums (dot_f32) and for terms that
//!   may cancel (add, axpy_f32, rope) "relative" is to the magnitude of the
//!   terms, Σ|a·b| or |y|+|a·x|; outputs below 1e-30 (f32 subnormals, where
//!   relative precision does not exist) get that as an absolute allowance.
//! * The SIMD exp behind softmax and silu_mul: 1e-6 relative to f64 exp on
//!   [-88, 88] (DESIGN.md §5). ARMv7 NEON flushes subnormals to zero in hardware,
//!   so there the bound holds where e^x is a normal float (x ≥ −87.33) and
//!   below that the result must be within f32::MIN_POSITIVE (absolute).
//! * ARM tiers: matvec and quantize_q8 bit-identical to scalar (they do the
//!   scalar kernel's float operations in its order); on AArch64 add,
//!   axpy_f32 and rope too. SVE at whatever vector length the CPU runs
//!   (`ML_EXPECT_SVE_BITS` makes the test assert it), with block counts
//!   around multiples of the blocks one vector holds.
//!
//! In the scalar build these compare the scalar kernels with themselves,
//! which passes trivially. Every test calls the CPU guard first, so a build
//! for a tier this CPU lacks exits 7 before any kernel runs.

use legacy_ml::core::quant::{self, Q4_BLOCK_BYTES, QK};
use legacy_ml::core::rng::Rng;
use legacy_ml::core::tensor::{pack_row_groups, pack_scale_groups, QAct, QActs, QTensor, WType};
use legacy_ml::guard;
use legacy_ml::kernels::{self, scalar};

const TIERS: [&str; 9] = [
    "scalar",
    "sse2",
    "sse41",
    "avx2",
    "avxvnni",
    "avx512vnni",
    "neon",
    "neon-dotprod",
    "sve",
];

// ---------------------------------------------------------------------------
// Inputs

struct Matrix {
    wtype: WType,
    rows: usize,
    cols: usize,
    q: Vec<u8>,
    d: Vec<f32>,
}

impl Matrix {
    fn view(&self) -> QTensor<'_> {
        QTensor {
            wtype: self.wtype,
            rows: self.rows,
            cols: self.cols,
            q: &self.q,
            d: &self.d,
            packed: false,
        }
    }
}

/// How the quants of a test matrix or activation are drawn.
#[derive(Clone, Copy, Debug)]
enum Fill {
    /// Uniform over the format's whole range.
    Random,
    /// Random, but every third block all zero (quants, not only the scale).
    ZeroBlocks,
    /// Only the extremes: ±127 (Q8), nibbles 0 and 15 (Q4).
    Extremes,
}

fn q8_quant(rng: &mut Rng, fill: Fill, block: usize) -> i8 {
    match fill {
        Fill::ZeroBlocks if block % 3 == 1 => 0,
        Fill::Extremes => {
            if rng.next_u32() & 1 == 0 {
                127
            } else {
                -127
            }
        }
        _ => ((rng.next_u32() % 255) as i32 - 127) as i8,
    }
}

fn q4_byte(rng: &mut Rng, fill: Fill, block: usize) -> u8 {
    match fill {
        Fill::ZeroBlocks if block % 3 == 1 => 0x88, // both nibbles encode 0
        Fill::Extremes => [0x00, 0x0F, 0xF0, 0xFF][(rng.next_u32() % 4) as usize],
        _ => rng.next_u32() as u8,
    }
}

fn matrix(rng: &mut Rng, wtype: WType, rows: usize, cols: usize, fill: Fill, unit_scales: bool) -> Matrix {
    let nb = cols / QK;
    let mut q = Vec::new();
    for _r in 0..rows {
        for b in 0..nb {
            match wtype {
                WType::Q8_0 => q.extend((0..QK).map(|_| q8_quant(rng, fill, b) as u8)),
                WType::Q4_0 => q.extend((0..Q4_BLOCK_BYTES).map(|_| q4_byte(rng, fill, b))),
            }
        }
    }
    let d = (0..rows * nb)
        .map(|_| if unit_scales { 1.0 } else { rng.symmetric(0.05) })
        .collect();
    Matrix {
        wtype,
        rows,
        cols,
        q,
        d,
    }
}

struct Act {
    q: Vec<i8>,
    d: Vec<f32>,
}

impl Act {
    fn view(&self) -> QAct<'_> {
        QAct { q: &self.q, d: &self.d }
    }
}

fn activation(rng: &mut Rng, cols: usize, fill: Fill, unit_scales: bool) -> Act {
    let q = (0..cols).map(|i| q8_quant(rng, fill, i / QK)).collect();
    let d = (0..cols / QK)
        .map(|_| if unit_scales { 1.0 } else { rng.next_f32() * 0.1 })
        .collect();
    Act { q, d }
}

fn floats(rng: &mut Rng, n: usize, a: f32) -> Vec<f32> {
    (0..n).map(|_| rng.symmetric(a)).collect()
}

/// The integer dot of row `r` with `x`, block by block, in i64.
fn block_sums(w: &Matrix, x: &Act, r: usize) -> Vec<i64> {
    let nb = w.cols / QK;
    (0..nb)
        .map(|b| {
            let xq = &x.q[b * QK..(b + 1) * QK];
            let s = match w.wtype {
                WType::Q8_0 => {
                    let start = r * w.cols + b * QK;
                    let wq: Vec<i8> = w.q[start..start + QK].iter().map(|&v| v as i8).collect();
                    scalar::block_dot_q8(&wq, xq)
                }
                WType::Q4_0 => {
                    let start = r * w.cols / 2 + b * Q4_BLOCK_BYTES;
                    scalar::block_dot_q4(&w.q[start..start + Q4_BLOCK_BYTES], xq)
                }
            };
            s as i64
        })
        .collect()
}

type Matvec = fn(&mut [f32], &QTensor, &QAct, usize, usize);

fn kernels_for(wtype: WType) -> (Matvec, Matvec) {
    match wtype {
        WType::Q8_0 => (kernels::matvec_q8, scalar::matvec_q8),
        WType::Q4_0 => (kernels::matvec_q4, scalar::matvec_q4),
    }
}

// ---------------------------------------------------------------------------
// Assertions

/// |got − want| ≤ 1e-5 · scale[i] (+ the subnormal allowance) for every i.
#[track_caller]
fn assert_close(what: &str, got: &[f32], want: &[f32], scale: impl Fn(usize) -> f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-5 * scale(i) + 1e-30;
        assert!(
            (g - w).abs() <= tol || (g.is_nan() && w.is_nan()),
            "{what}: element {i}: got {g:e}, want {w:e} (|diff| {:e} > {tol:e})",
            (g - w).abs()
        );
    }
}

#[track_caller]
fn assert_rel(what: &str, got: &[f32], want: &[f32]) {
    assert_close(what, got, want, |i| want[i].abs());
}

// ---------------------------------------------------------------------------
// The build

#[test]
fn tier_matches_enabled_feature() {
    guard::guard();
    let expected = if cfg!(feature = "isa-avx512vnni") {
        Some("avx512vnni")
    } else if cfg!(feature = "isa-avxvnni") {
        Some("avxvnni")
    } else if cfg!(feature = "isa-avx2") {
        Some("avx2")
    } else if cfg!(feature = "isa-sse41") {
        Some("sse41")
    } else if cfg!(feature = "isa-sse2") {
        Some("sse2")
    } else if cfg!(feature = "isa-sve") {
        Some("sve")
    } else if cfg!(feature = "isa-neon-dotprod") {
        Some("neon-dotprod")
    } else if cfg!(feature = "isa-neon") {
        Some("neon")
    } else {
        None
    };
    println!(
        "kernels::TIER = {}, REQUIRED_FEATURES = {:?}",
        kernels::TIER,
        kernels::REQUIRED_FEATURES
    );
    assert!(TIERS.contains(&kernels::TIER), "unknown tier {}", kernels::TIER);
    assert_eq!(kernels::TIER, expected.unwrap_or("scalar"));
    assert_eq!(guard::build_tier(), kernels::TIER);
}

#[test]
fn required_features_fit_the_tier() {
    guard::guard();
    let req = kernels::REQUIRED_FEATURES;
    let key = match kernels::TIER {
        "sse2" => Some("sse2"),
        "sse41" => Some("sse4_1"),
        "avx2" => Some("avx2"),
        "avxvnni" => Some("avx_vnni"),
        "avx512vnni" => Some("avx512_vnni"),
        "neon" if cfg!(target_arch = "arm") => Some("neon"),
        "neon" => Some("asimd"),
        "neon-dotprod" => Some("asimddp"),
        "sve" => Some("sve"),
        "scalar" => {
            assert!(req.is_empty(), "scalar needs nothing, not {req:?}");
            None
        }
        _ => None,
    };
    if let Some(key) = key {
        assert!(req.contains(&key), "{} must require {key}: {req:?}", kernels::TIER);
    }
    if kernels::TIER == "sve" {
        // SVE does not imply dotprod (A64FX): this tier must not use it.
        assert!(!req.contains(&"asimddp"), "sve must not require asimddp: {req:?}");
    }
    if kernels::TIER == "avx512vnni" {
        // AVX-512 VNNI does not imply AVX-VNNI (Zen 4): this tier must not use it.
        assert!(
            !req.contains(&"avx_vnni"),
            "avx512vnni must not require avx_vnni: {req:?}"
        );
    }
    // The guard has passed, so the host has every one of them.
    assert!(guard::missing_features().is_empty());
}

// ---------------------------------------------------------------------------
// Integer path

// Miri interprets every instruction: under it each test runs fewer shapes,
// still covering one and several blocks, partial row groups and tails.
// 160 (five blocks) reaches the four-block steps of the SIMD tiers, except
// avx512vnni's Q4 one, which needs an intrinsic Miri lacks (vpermps).
const KS: &[usize] = if !cfg!(miri) {
    &[32, 64, 96, 4096]
} else if cfg!(all(
    any(feature = "isa-sse2", feature = "isa-neon"),
    not(feature = "isa-avx512vnni")
)) {
    &[32, 96, 160]
} else {
    &[32, 96]
};
const ROWS: &[usize] = if cfg!(miri) {
    &[1, 5]
} else {
    &[1, 2, 3, 4, 5, 7, 8, 9, 13]
};
const FILLS: [Fill; 3] = [Fill::Random, Fill::ZeroBlocks, Fill::Extremes];

/// The row ranges tried on a matrix of `rows` rows: all, r0 > 0, r1 < rows,
/// both, a single row, and an empty range.
fn ranges(rows: usize) -> Vec<(usize, usize)> {
    let mut v = vec![(0, rows), (rows / 2, rows / 2)];
    if rows > 1 {
        v.extend([(1, rows), (0, rows - 1), (rows - 1, rows)]);
    }
    if rows > 2 {
        v.push((1, rows - 1));
    }
    v
}

fn check_matvec(wtype: WType, seed: u64) {
    let mut rng = Rng::new(seed);
    let (bound, reference) = kernels_for(wtype);
    for &k in KS {
        for &rows in ROWS {
            for &fill in &FILLS {
                let w = matrix(&mut rng, wtype, rows, k, fill, false);
                let x = activation(&mut rng, k, fill, false);
                let mut full = vec![0.0f32; rows];
                bound(&mut full, &w.view(), &x.view(), 0, rows);
                for (r0, r1) in ranges(rows) {
                    let what = format!("{wtype:?} K={k} rows={rows} {fill:?} [{r0}, {r1})");
                    let mut got = vec![f32::NAN; r1 - r0];
                    let mut want = vec![f32::NAN; r1 - r0];
                    bound(&mut got, &w.view(), &x.view(), r0, r1);
                    reference(&mut want, &w.view(), &x.view(), r0, r1);
                    let max = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                    assert_close(&what, &got, &want, |_| max);
                    // A row's value must not depend on which range computed it
                    // (threads split rows), in any tier.
                    let same = got.iter().zip(&full[r0..r1]).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{what}: rows differ from the full call: {got:?} vs {:?}",
                        &full[r0..r1]
                    );
                }
            }
        }
    }
}

#[test]
fn matvec_q8_matches_scalar() {
    guard::guard();
    check_matvec(WType::Q8_0, 1);
}

#[test]
fn matvec_q4_matches_scalar() {
    guard::guard();
    check_matvec(WType::Q4_0, 2);
}

/// A packed matrix (`pack_row_groups`) through the bound matvec: in a tier
/// that packs, bit-identical to the same matrix row-major, on every row
/// range that cuts between four-row groups (as the thread pool cuts) and at
/// Ks with every tail (a partial 64-byte chunk, an odd block, four-block
/// quads and a pair after them); in any other tier, refused.
fn check_packed_matvec(wtype: WType, seed: u64) {
    let mut rng = Rng::new(seed);
    let (bound, _) = kernels_for(wtype);
    // Under Miri, K = 96 still has a whole chunk and a tail (KS says why
    // avx512vnni's Q4 quads are left out there).
    let ks: &[usize] = if cfg!(miri) {
        &[32, 96]
    } else {
        &[32, 64, 96, 160, 224, 576, 1536]
    };
    for &k in ks {
        for &rows in ROWS {
            let w = matrix(&mut rng, wtype, rows, k, Fill::Random, false);
            let x = activation(&mut rng, k, Fill::Random, false);
            let mut packed_q = w.q.clone();
            let row_bytes = w.q.len() / rows;
            pack_row_groups(&mut packed_q, rows, row_bytes, &mut Vec::new());
            let mut packed_d = w.d.clone();
            pack_scale_groups(&mut packed_d, rows, k / QK, &mut Vec::new());
            let packed = QTensor {
                q: &packed_q,
                d: &packed_d,
                packed: true,
                ..w.view()
            };
            if !kernels::PACKS_ROW_GROUPS {
                let refused = std::panic::catch_unwind(|| bound(&mut vec![0.0; rows], &packed, &x.view(), 0, rows));
                assert!(
                    refused.is_err(),
                    "{wtype:?}: tier {} read a packed matrix",
                    kernels::TIER
                );
                return;
            }
            let mut cuts: Vec<usize> = (0..rows).step_by(4).collect();
            cuts.push(rows);
            for (i, &r0) in cuts.iter().enumerate() {
                for &r1 in &cuts[i..] {
                    let what = format!("{wtype:?} K={k} rows={rows} packed [{r0}, {r1})");
                    let mut got = vec![f32::NAN; r1 - r0];
                    let mut want = vec![f32::NAN; r1 - r0];
                    bound(&mut got, &packed, &x.view(), r0, r1);
                    bound(&mut want, &w.view(), &x.view(), r0, r1);
                    let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{what}: {got:?} vs row-major {want:?}");
                }
            }
            if rows > 4 {
                let mid_group = std::panic::catch_unwind(|| bound(&mut [0.0; 4], &packed, &x.view(), 1, 5));
                assert!(
                    mid_group.is_err(),
                    "{wtype:?} K={k}: a range inside a packed group was accepted"
                );
            }
        }
    }
}

#[test]
fn packed_matvec_q8_matches_row_major() {
    guard::guard();
    check_packed_matvec(WType::Q8_0, 11);
}

#[test]
fn packed_matvec_q4_matches_row_major() {
    guard::guard();
    check_packed_matvec(WType::Q4_0, 12);
}

/// With unit scales the result is Σ of the per-block int32 sums, exactly
/// representable (|Σ| ≤ 32 blocks · 32 · 127² < 2^24), so any error in a
/// block sum shows as an inequality. Q4 products are at most 8 · 127, so
/// it also runs K = 8320 exactly (260 blocks, past the 64 four-block steps
/// whose activations avx512vnni prepares once per call).
fn check_block_sums_exact(wtype: WType, seed: u64) {
    let mut rng = Rng::new(seed);
    let (bound, _) = kernels_for(wtype);
    let (ks, rows_list): (&[usize], &[usize]) = if cfg!(miri) {
        (KS, &[1, 5])
    } else if wtype == WType::Q4_0 {
        (&[32, 64, 96, 1024, 8320], &[1, 3, 4, 7, 12])
    } else {
        (&[32, 64, 96, 1024], &[1, 3, 4, 7, 12])
    };
    for &k in ks {
        for &rows in rows_list {
            for &fill in &FILLS {
                let w = matrix(&mut rng, wtype, rows, k, fill, true);
                let x = activation(&mut rng, k, fill, true);
                let mut got = vec![0.0f32; rows];
                bound(&mut got, &w.view(), &x.view(), 0, rows);
                for (r, &g) in got.iter().enumerate() {
                    let want: i64 = block_sums(&w, &x, r).iter().sum();
                    assert_eq!(g, want as f32, "{wtype:?} K={k} rows={rows} {fill:?} row {r}");
                }
            }
        }
    }
}

/// Q8_0 past the activation pairs a matvec prepares once (avx512vnni
/// hoists 128, K ≤ 8192): K = 8320 (130 pairs), unit scales, against the
/// exact integer sum. Its f32 sums are not exact at this length, so the
/// bound is the accumulation error of two 130-term chains, 1e-5 of Σ|block
/// sums|.
#[test]
#[cfg_attr(miri, ignore = "K = 8320 is too slow to interpret")]
fn matvec_q8_long_rows_match_exact_sums() {
    guard::guard();
    let mut rng = Rng::new(19);
    let (bound, _) = kernels_for(WType::Q8_0);
    for rows in [1, 4, 7] {
        let w = matrix(&mut rng, WType::Q8_0, rows, 8320, Fill::Random, true);
        let x = activation(&mut rng, 8320, Fill::Random, true);
        let mut got = vec![0.0f32; rows];
        bound(&mut got, &w.view(), &x.view(), 0, rows);
        for (r, &g) in got.iter().enumerate() {
            let sums = block_sums(&w, &x, r);
            let want: i64 = sums.iter().sum();
            let magnitude: i64 = sums.iter().map(|s| s.abs()).sum();
            let err = (g as f64 - want as f64).abs();
            assert!(
                err <= 1e-5 * magnitude as f64,
                "rows={rows} row {r}: {g} vs {want} (Σ|sums| {magnitude})"
            );
        }
    }
}

#[test]
fn matvec_q8_block_sums_exact() {
    guard::guard();
    check_block_sums_exact(WType::Q8_0, 3);
}

#[test]
fn matvec_q4_block_sums_exact() {
    guard::guard();
    check_block_sums_exact(WType::Q4_0, 4);
}

/// One block per row: every tier must give exactly (sumi·dw)·dx, the scalar
/// kernel's expression (an FMA onto 0 rounds the same way).
fn check_single_block(wtype: WType, seed: u64) {
    let mut rng = Rng::new(seed);
    let (bound, _) = kernels_for(wtype);
    for rows in [1, 4, 6] {
        for &fill in &FILLS {
            let w = matrix(&mut rng, wtype, rows, QK, fill, false);
            let x = activation(&mut rng, QK, fill, false);
            let mut got = vec![0.0f32; rows];
            bound(&mut got, &w.view(), &x.view(), 0, rows);
            for (r, &g) in got.iter().enumerate() {
                let sumi = block_sums(&w, &x, r)[0];
                let want = sumi as f32 * w.d[r] * x.d[0];
                assert_eq!(g.to_bits(), want.to_bits(), "{wtype:?} {fill:?} row {r}: {g} vs {want}");
            }
        }
    }
}

#[test]
fn matvec_q8_single_block_exact() {
    guard::guard();
    check_single_block(WType::Q8_0, 5);
}

#[test]
fn matvec_q4_single_block_exact() {
    guard::guard();
    check_single_block(WType::Q4_0, 6);
}

#[test]
fn matvec_extreme_products() {
    guard::guard();
    // Every product at ±127² (Q8) or −8·±127 (Q4): the int16 pair sums of
    // pmaddubsw are at their largest, 2·127² = 32258. Q4's 0xFF bytes at
    // −127 do the same for the int16 sums of sse41's and avx2's
    // `group_dot`, which multiply the unsigned nibbles (16·15·127 = 30480
    // on sse41, and the token lanes of sse41 and avx2: 8·2·15·127). The
    // matmul too, over 18 tokens: avx512vnni's lane group of 16, avx2's two
    // of 8, sse41's four of 4 (Q4_0), sse2's and sse41's int16 operands
    // (`x86::matmul_widened!`), and a rest of 2.
    for (wq, xq, want) in [
        (127i8, -127i8, -516_128.0f32),
        (127, 127, 516_128.0),
        (-127, -127, 516_128.0),
    ] {
        let w = Matrix {
            wtype: WType::Q8_0,
            rows: 5,
            cols: 64,
            q: vec![wq as u8; 5 * 64],
            d: vec![1.0; 10],
        };
        let x = Act {
            q: vec![xq; 64],
            d: vec![1.0; 2],
        };
        let mut y = vec![0.0; 5];
        kernels::matvec_q8(&mut y, &w.view(), &x.view(), 0, 5);
        assert_eq!(y, vec![2.0 * want; 5], "q8 {wq}·{xq}");
        assert_eq!(matmul_of_copies(&w, &x, 18), vec![y; 18], "q8 matmul {wq}·{xq}");
    }
    for (byte, xq, want) in [
        (0x00u8, 127i8, -8 * 127 * 32),
        (0x00, -127, 8 * 127 * 32),
        (0xFF, -127, -7 * 127 * 32),
    ] {
        let w = Matrix {
            wtype: WType::Q4_0,
            rows: 5,
            cols: 64,
            q: vec![byte; 5 * 32],
            d: vec![1.0; 10],
        };
        let x = Act {
            q: vec![xq; 64],
            d: vec![1.0; 2],
        };
        let mut y = vec![0.0; 5];
        kernels::matvec_q4(&mut y, &w.view(), &x.view(), 0, 5);
        assert_eq!(y, vec![2.0 * want as f32; 5], "q4 {byte:#x}·{xq}");
        assert_eq!(matmul_of_copies(&w, &x, 18), vec![y; 18], "q4 matmul {byte:#x}·{xq}");
    }
}

/// The matmul over `tokens` copies of `x`, one output row per token.
fn matmul_of_copies(w: &Matrix, x: &Act, tokens: usize) -> Vec<Vec<f32>> {
    let (q, d) = (x.q.repeat(tokens), x.d.repeat(tokens));
    let acts = QActs {
        q: &q,
        d: &d,
        cols: w.cols,
        n: tokens,
    };
    let mut ys = vec![vec![0.0; w.rows]; tokens];
    let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| &mut y[..]).collect();
    match w.wtype {
        WType::Q8_0 => kernels::matmul_q8(&mut outs, &w.view(), &acts, 0, w.rows),
        WType::Q4_0 => kernels::matmul_q4(&mut outs, &w.view(), &acts, 0, w.rows),
    }
    ys
}

#[test]
fn matvec_on_quantized_real_data() {
    guard::guard();
    // The path the model takes: floats quantized by the library, then matvec.
    let mut rng = Rng::new(7);
    for wtype in [WType::Q8_0, WType::Q4_0] {
        let (rows, k) = if cfg!(miri) { (9, 96) } else { (37, 288) };
        let wf = floats(&mut rng, rows * k, 1.0);
        let nb = k / QK;
        let mut d = vec![0.0; rows * nb];
        let q = match wtype {
            WType::Q8_0 => {
                let mut q = vec![0i8; rows * k];
                quant::quantize_row_q8(&wf, &mut q, &mut d);
                q.iter().map(|&v| v as u8).collect()
            }
            WType::Q4_0 => {
                let mut q = vec![0u8; rows * k / 2];
                quant::quantize_row_q4(&wf, &mut q, &mut d);
                q
            }
        };
        let w = Matrix {
            wtype,
            rows,
            cols: k,
            q,
            d,
        };
        let xf = floats(&mut rng, k, 3.0);
        let (mut xq, mut xd) = (vec![0i8; k], vec![0.0f32; nb]);
        kernels::quantize_q8(&mut xq, &mut xd, &xf);
        let x = Act { q: xq, d: xd };
        let (bound, reference) = kernels_for(wtype);
        let (mut got, mut want) = (vec![0.0; rows], vec![0.0; rows]);
        bound(&mut got, &w.view(), &x.view(), 0, rows);
        reference(&mut want, &w.view(), &x.view(), 0, rows);
        let max = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert_close(&format!("{wtype:?}"), &got, &want, |_| max);
    }
}

// ---------------------------------------------------------------------------
// quantize_q8

#[track_caller]
fn assert_quantize_identical(what: &str, x: &[f32], q_len: usize, d_len: usize) {
    let (mut q1, mut d1) = (vec![99i8; q_len], vec![-1.0f32; d_len]);
    let (mut q2, mut d2) = (vec![99i8; q_len], vec![-1.0f32; d_len]);
    kernels::quantize_q8(&mut q1, &mut d1, x);
    scalar::quantize_q8(&mut q2, &mut d2, x);
    for (b, (a, s)) in d1.iter().zip(&d2).enumerate() {
        assert_eq!(a.to_bits(), s.to_bits(), "{what}: scale of block {b}: {a:e} vs {s:e}");
    }
    if let Some(i) = (0..q_len).find(|&i| q1[i] != q2[i]) {
        panic!(
            "{what}: quant {i} (x = {:e}): {} vs scalar {}",
            x.get(i).copied().unwrap_or(f32::NAN),
            q1[i],
            q2[i]
        );
    }
}

#[test]
fn quantize_q8_bit_identical_random() {
    guard::guard();
    let mut rng = Rng::new(8);
    for &k in KS {
        for scale in [1e-30f32, 1e-3, 1.0, 7.5, 1e6, 1e30] {
            let x: Vec<f32> = floats(&mut rng, k, scale);
            assert_quantize_identical(&format!("K={k} scale={scale:e}"), &x, k, k / QK);
        }
        // Blocks of very different magnitudes in one row.
        let x: Vec<f32> = (0..k)
            .map(|i| rng.symmetric(1.0) * 10f32.powi((i / QK) as i32 % 9 - 4))
            .collect();
        assert_quantize_identical(&format!("K={k} mixed"), &x, k, k / QK);
    }
}

#[test]
fn quantize_q8_bit_identical_edges() {
    guard::guard();
    let mut rng = Rng::new(9);
    let mut cases: Vec<(&str, Vec<f32>)> = vec![
        ("zeros", vec![0.0; 64]),
        ("negative zeros", vec![-0.0; 32]),
        (
            "one nonzero",
            (0..32).map(|i| if i == 17 { -3.0 } else { 0.0 }).collect(),
        ),
        (
            "subnormals",
            (0..32)
                .map(|i| f32::from_bits(i as u32 * 977 + 1) * if i % 2 == 0 { 1.0 } else { -1.0 })
                .collect(),
        ),
        (
            "max finite",
            (0..32)
                .map(|i| if i % 3 == 0 { f32::MAX } else { rng.symmetric(f32::MAX) })
                .collect(),
        ),
        (
            "infinity",
            (0..32)
                .map(|i| if i == 5 { f32::INFINITY } else { rng.symmetric(2.0) })
                .collect(),
        ),
        (
            "-infinity",
            (0..32)
                .map(|i| if i == 30 { f32::NEG_INFINITY } else { rng.symmetric(2.0) })
                .collect(),
        ),
        (
            "nan",
            (0..32)
                .map(|i| if i % 7 == 0 { f32::NAN } else { rng.symmetric(2.0) })
                .collect(),
        ),
        ("all nan", vec![f32::NAN; 32]),
    ];
    // amax = 127 makes id = 1, so x·id + 0.5 lands exactly on integers and
    // halves: the round-half-away-from-zero boundaries.
    let halves: Vec<f32> = (0..32)
        .map(|i| {
            if i == 0 {
                127.0
            } else {
                (i as f32 - 16.0) * 0.5 - 60.25 * ((i % 2) as f32)
            }
        })
        .collect();
    cases.push(("halves", halves));
    let ties: Vec<f32> = (0..32)
        .map(|i| if i == 31 { -127.0 } else { i as f32 * 3.5 - 50.5 })
        .collect();
    cases.push(("ties", ties));
    // Values just beside the boundaries, at an awkward amax.
    let awkward: Vec<f32> = (0..32)
        .map(|i| {
            if i == 0 {
                0.3
            } else {
                0.3 * (i as f32 - 15.5) / 127.0 * 7.9
            }
        })
        .collect();
    cases.push(("awkward", awkward));
    for (what, x) in &cases {
        assert_quantize_identical(what, x, x.len(), x.len() / QK);
    }
    // Mismatched lengths behave as the scalar kernel's zip: whole blocks
    // that every slice holds, nothing written beyond.
    let x = floats(&mut rng, 100, 1.0);
    assert_quantize_identical("x 100, q 96, d 3", &x, 96, 3);
    assert_quantize_identical("x 100, q 64, d 3", &x, 64, 3);
    assert_quantize_identical("x 100, q 96, d 1", &x, 96, 1);
    assert_quantize_identical("x 100, q 16, d 3", &x, 16, 3);
}

// ---------------------------------------------------------------------------
// Float kernels

const NS: &[usize] = if cfg!(miri) {
    &[0, 1, 3, 4, 5, 8, 9, 16, 17, 33]
} else {
    &[0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 288, 768, 4099]
};

#[test]
fn rmsnorm_matches_scalar() {
    guard::guard();
    let mut rng = Rng::new(10);
    for &n in NS.iter().filter(|&&n| n > 0) {
        for a in [1e-3f32, 1.0, 100.0] {
            let x = floats(&mut rng, n, a);
            let w = floats(&mut rng, n, 2.0);
            let (mut got, mut want) = (vec![0.0; n], vec![0.0; n]);
            kernels::rmsnorm(&mut got, &x, &w, 1e-5);
            scalar::rmsnorm(&mut want, &x, &w, 1e-5);
            assert_rel(&format!("rmsnorm n={n} a={a}"), &got, &want);
        }
    }
}

#[test]
fn softmax_matches_scalar() {
    guard::guard();
    let mut rng = Rng::new(11);
    for &n in NS {
        for (lo, hi) in [(-1.0f32, 1.0), (-20.0, 20.0), (-200.0, 50.0), (1000.0, 1010.0)] {
            let x: Vec<f32> = (0..n).map(|_| lo + (hi - lo) * rng.next_f32()).collect();
            let (mut got, mut want) = (x.clone(), x.clone());
            kernels::softmax(&mut got);
            scalar::softmax(&mut want);
            assert_rel(&format!("softmax n={n} [{lo}, {hi}]"), &got, &want);
        }
    }
    // One dominant entry, and -inf entries (masked scores).
    let mut x = vec![-1e4f32; 37];
    x[20] = 0.0;
    x[3] = f32::NEG_INFINITY;
    let (mut got, mut want) = (x.clone(), x);
    kernels::softmax(&mut got);
    scalar::softmax(&mut want);
    assert_rel("softmax one-hot", &got, &want);
}

#[test]
fn silu_mul_matches_scalar() {
    guard::guard();
    let mut rng = Rng::new(12);
    for &n in NS {
        for a in [1.0f32, 10.0, 100.0] {
            let g = floats(&mut rng, n, a);
            let u = floats(&mut rng, n, 3.0);
            let (mut got, mut want) = (g.clone(), g);
            kernels::silu_mul(&mut got, &u);
            scalar::silu_mul(&mut want, &u);
            assert_rel(&format!("silu_mul n={n} a={a}"), &got, &want);
        }
    }
    // A shorter u: only the elements both hold change.
    let g = floats(&mut rng, 21, 4.0);
    let u = floats(&mut rng, 13, 4.0);
    let (mut got, mut want) = (g.clone(), g);
    kernels::silu_mul(&mut got, &u);
    scalar::silu_mul(&mut want, &u);
    assert_rel("silu_mul short u", &got, &want);
}

#[test]
fn add_and_axpy_match_scalar() {
    guard::guard();
    let mut rng = Rng::new(13);
    for &n in NS {
        let y0 = floats(&mut rng, n, 5.0);
        let x = floats(&mut rng, n, 5.0);
        let (mut got, mut want) = (y0.clone(), y0.clone());
        kernels::add(&mut got, &x);
        scalar::add(&mut want, &x);
        assert_close(&format!("add n={n}"), &got, &want, |i| y0[i].abs() + x[i].abs());
        for a in [0.0f32, -0.7, 3.25] {
            let (mut got, mut want) = (y0.clone(), y0.clone());
            kernels::axpy_f32(&mut got, a, &x);
            scalar::axpy_f32(&mut want, a, &x);
            assert_close(&format!("axpy n={n} a={a}"), &got, &want, |i| {
                y0[i].abs() + (a * x[i]).abs()
            });
        }
    }
    // Mismatched lengths: as the scalar zip, the shorter one decides.
    let (y0, x) = (floats(&mut rng, 19, 1.0), floats(&mut rng, 11, 1.0));
    let (mut got, mut want) = (y0.clone(), y0.clone());
    kernels::axpy_f32(&mut got, 2.0, &x);
    scalar::axpy_f32(&mut want, 2.0, &x);
    assert_close("axpy short x", &got, &want, |i| {
        y0[i].abs() + 2.0 * x.get(i).map_or(0.0, |v| v.abs())
    });
    let (mut got, mut want) = (x.clone(), x.clone());
    kernels::add(&mut got, &y0);
    scalar::add(&mut want, &y0);
    assert_close("add long x", &got, &want, |i| x[i].abs() + y0[i].abs());
}

#[test]
fn dot_f32_matches_scalar() {
    guard::guard();
    let mut rng = Rng::new(14);
    for &n in NS {
        for a in [1e-3f32, 1.0, 1e3] {
            let x = floats(&mut rng, n, a);
            let y = floats(&mut rng, n, 1.0);
            let got = kernels::dot_f32(&x, &y);
            let want = scalar::dot_f32(&x, &y);
            let mag: f32 = x.iter().zip(&y).map(|(p, q)| (p * q).abs()).sum();
            assert_close(&format!("dot n={n} a={a}"), &[got], &[want], |_| mag);
        }
    }
    let (x, y) = (floats(&mut rng, 40, 1.0), floats(&mut rng, 27, 1.0));
    let mag: f32 = x.iter().zip(&y).map(|(p, q)| (p * q).abs()).sum();
    assert_close(
        "dot mismatched",
        &[kernels::dot_f32(&x, &y)],
        &[scalar::dot_f32(&x, &y)],
        |_| mag,
    );
}

/// attn_scores and attn_mix: within tolerance of the scalar reference, and
/// bit-identical to the same tier's dot_f32/axpy_f32 row by row (what the
/// transformer computed before they were fused, so goldens do not move).
#[test]
fn attention_rows_match_scalar_and_per_row_kernels() {
    guard::guard();
    let mut rng = Rng::new(16);
    let shapes: &[(usize, usize, usize)] = if cfg!(miri) {
        &[(0, 8, 8), (3, 64, 64), (2, 9, 20)]
    } else {
        // (rows, n, stride): head_dim 64 in a GQA row, widths off the
        // 8- and 64-lane steps, a single row, none, long histories.
        &[
            (0, 64, 192),
            (1, 64, 64),
            (5, 64, 192),
            (7, 9, 20),
            (33, 72, 72),
            (100, 130, 131),
            (300, 64, 192),
            (8, 64, 64),
            (15, 64, 192),
            (16, 64, 576),
            (17, 1, 3),
        ]
    };
    for &(rows_n, n, stride) in shapes {
        let slack = rng.next_u32() as usize % 4;
        let rows = floats(&mut rng, rows_n.saturating_sub(1) * stride + n + slack, 2.0);
        let q = floats(&mut rng, n, 1.5);
        let scale = 0.125;
        let mut got = vec![0.0; rows_n];
        let mut want = vec![0.0; rows_n];
        kernels::attn_scores(&mut got, &q, &rows, stride, scale);
        scalar::attn_scores(&mut want, &q, &rows, stride, scale);
        let per_row: Vec<f32> = (0..rows_n)
            .map(|t| kernels::dot_f32(&q, &rows[t * stride..t * stride + n]) * scale)
            .collect();
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            per_row.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "attn_scores rows={rows_n} n={n} stride={stride}: not dot_f32 row by row"
        );
        assert_close(&format!("attn_scores rows={rows_n} n={n}"), &got, &want, |t| {
            scale
                * q.iter()
                    .zip(&rows[t * stride..])
                    .map(|(a, b)| (a * b).abs())
                    .sum::<f32>()
        });

        let p: Vec<f32> = (0..rows_n).map(|_| rng.next_f32()).collect();
        let out0 = floats(&mut rng, n, 1.0);
        let (mut got, mut want, mut per_row) = (out0.clone(), out0.clone(), out0.clone());
        kernels::attn_mix(&mut got, &p, &rows, stride);
        scalar::attn_mix(&mut want, &p, &rows, stride);
        for (t, &pt) in p.iter().enumerate() {
            kernels::axpy_f32(&mut per_row, pt, &rows[t * stride..t * stride + n]);
        }
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            per_row.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "attn_mix rows={rows_n} n={n} stride={stride}: not axpy_f32 row by row"
        );
        assert_close(&format!("attn_mix rows={rows_n} n={n}"), &got, &want, |i| {
            out0[i].abs()
                + p.iter()
                    .enumerate()
                    .map(|(t, pt)| (pt * rows[t * stride + i]).abs())
                    .sum::<f32>()
        });
    }
}

#[test]
#[should_panic(expected = "attention rows")]
fn attention_rows_past_the_cache_panic_before_reading() {
    guard::guard();
    let rows = vec![1.0f32; 100];
    let mut out = vec![0.0f32; 2];
    // Row 1 would end at 64 + 64 = 128 > 100.
    kernels::attn_scores(&mut out, &[1.0; 64], &rows, 64, 1.0);
}

#[test]
fn rope_matches_scalar() {
    guard::guard();
    let mut rng = Rng::new(15);
    let (shapes, positions): (&[(usize, usize, usize)], &[usize]) = if cfg!(miri) {
        (&[(2, 1, 1), (10, 2, 2), (16, 2, 2)], &[0, 17])
    } else {
        (
            &[
                (2, 1, 1),
                (6, 3, 1),
                (8, 4, 2),
                (10, 2, 2),
                (16, 2, 2),
                (48, 6, 6),
                (64, 8, 2),
                (128, 4, 4),
            ],
            &[0, 1, 17, 1000],
        )
    };
    for &(head_dim, n_heads, n_kv_heads) in shapes {
        for &pos in positions {
            let pairs = head_dim / 2;
            let angle = |i: usize| pos as f32 * 10000f32.powf(-2.0 * i as f32 / head_dim as f32);
            let cos: Vec<f32> = (0..pairs).map(|i| angle(i).cos()).collect();
            let sin: Vec<f32> = (0..pairs).map(|i| angle(i).sin()).collect();
            // One spare element past the heads: it must stay untouched.
            let q0 = floats(&mut rng, n_heads * head_dim + 1, 2.0);
            let k0 = floats(&mut rng, n_kv_heads * head_dim + 1, 2.0);
            let (mut q1, mut k1, mut q2, mut k2) = (q0.clone(), k0.clone(), q0.clone(), k0.clone());
            kernels::rope(&mut q1, &mut k1, &cos, &sin, head_dim, n_heads, n_kv_heads);
            scalar::rope(&mut q2, &mut k2, &cos, &sin, head_dim, n_heads, n_kv_heads);
            // Each output is a·c ± b·s: relative to the terms' magnitude.
            let mag = |v: &[f32], i: usize| {
                let (p, j) = (i - i % 2, (i % head_dim) / 2);
                if i >= v.len() - 1 {
                    v[i].abs()
                } else {
                    v[p].abs() * cos[j].abs()
                        + v[p + 1].abs() * sin[j].abs()
                        + v[p].abs() * sin[j].abs()
                        + v[p + 1].abs() * cos[j].abs()
                }
            };
            let what = format!("rope hd={head_dim} heads={n_heads}/{n_kv_heads} pos={pos}");
            assert_close(&format!("{what} q"), &q1, &q2, |i| mag(&q0, i));
            assert_close(&format!("{what} k"), &k1, &k2, |i| mag(&k0, i));
            assert_eq!(q1.last(), q0.last(), "{what}: wrote past the query heads");
            assert_eq!(k1.last(), k0.last(), "{what}: wrote past the key heads");
        }
    }
}

// ---------------------------------------------------------------------------
// The SIMD exp (DESIGN.md §5: relative error ≤ 1e-6 on [-88, 88])

/// `flushes`: the kernels' arithmetic flushes subnormals (ARMv7 NEON), so
/// results below f32::MIN_POSITIVE are held to that absolutely instead.
#[cfg(any(feature = "isa-sse2", feature = "isa-neon"))]
fn check_exp(tier: &str, exp_in_place: fn(&mut [f32]), flushes: bool) {
    const N: usize = if cfg!(miri) { 1 << 8 } else { 1 << 20 };
    let mut x: Vec<f32> = (0..=N).map(|i| -88.0 + 176.0 * i as f32 / N as f32).collect();
    // The range ends, where results turn subnormal, the range reduction's
    // boundaries (n changes at odd multiples of ln2/2) and around zero.
    let ln2 = std::f32::consts::LN_2;
    x.extend([
        -88.0,
        -87.336_55,
        -87.0,
        -1e-7,
        -0.0,
        0.0,
        1e-7,
        ln2 / 2.0,
        -ln2 / 2.0,
        1.5 * ln2,
        ln2,
        87.0,
        88.0,
    ]);
    let mut y = x.clone();
    exp_in_place(&mut y);
    let mut worst = (0.0f64, 0.0f32);
    for (&xi, &yi) in x.iter().zip(&y) {
        let exact = (xi as f64).exp();
        if flushes && exact < f32::MIN_POSITIVE as f64 {
            let err = ((yi as f64) - exact).abs();
            assert!(
                err <= f32::MIN_POSITIVE as f64,
                "{tier} exp({xi}) = {yi:e}, not within MIN_POSITIVE of {exact:e}"
            );
            continue;
        }
        let rel = ((yi as f64) - exact).abs() / exact;
        if rel > worst.0 {
            worst = (rel, xi);
        }
    }
    println!("{tier} exp: worst relative error {:.3e} at x = {}", worst.0, worst.1);
    assert!(
        worst.0 <= 1e-6,
        "{tier} exp: relative error {:e} at x = {}",
        worst.0,
        worst.1
    );
    // Outside the range: saturate sensibly rather than produce garbage.
    let mut edge = [-200.0f32, -104.0, f32::NEG_INFINITY, 100.0];
    exp_in_place(&mut edge);
    assert!(
        edge[0] == 0.0 && edge[1] == 0.0 && edge[2] == 0.0,
        "{tier} exp underflow: {edge:?}"
    );
    assert!(edge[3] > 3e38, "{tier} exp overflow: {edge:?}");
}

#[cfg(all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")))]
#[test]
fn sse2_exp_accuracy() {
    guard::guard();
    check_exp("sse2", kernels::sse2::exp_in_place, false);
}

#[cfg(all(feature = "isa-avx2", any(target_arch = "x86", target_arch = "x86_64")))]
#[test]
fn avx2_exp_accuracy() {
    guard::guard();
    check_exp("avx2", kernels::avx2::exp_in_place, false);
}

#[cfg(all(feature = "isa-neon", target_arch = "aarch64"))]
#[test]
fn neon_exp_accuracy() {
    guard::guard();
    check_exp("neon (AArch64)", kernels::neon::exp_in_place, false);
}

#[cfg(all(feature = "isa-neon", target_arch = "arm"))]
#[test]
fn neon_exp_accuracy() {
    guard::guard();
    check_exp("neon (ARMv7)", kernels::neon::exp_in_place, true);
}

// ---------------------------------------------------------------------------
// ARM tiers: bit-identical kernels, SVE vector lengths

/// Every ARM tier's matvec does the scalar kernel's float operations in its
/// order (SVE's fadda adds lanes strictly in order), so it is bit-identical
/// to it, not only within 1e-5. `ks`: the columns to try.
#[cfg(feature = "isa-neon")]
fn check_matvec_bits(ks: &[usize], seed: u64) {
    let mut rng = Rng::new(seed);
    for wtype in [WType::Q8_0, WType::Q4_0] {
        let (bound, reference) = kernels_for(wtype);
        for &k in ks {
            for rows in [1, 2, 3, 4, 5, 7, 8, 9, 16, 19, 27] {
                for &fill in &FILLS {
                    let w = matrix(&mut rng, wtype, rows, k, fill, false);
                    let x = activation(&mut rng, k, fill, false);
                    for (r0, r1) in ranges(rows) {
                        let mut got = vec![f32::NAN; r1 - r0];
                        let mut want = vec![f32::NAN; r1 - r0];
                        bound(&mut got, &w.view(), &x.view(), r0, r1);
                        reference(&mut want, &w.view(), &x.view(), r0, r1);
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(
                            bits(&got),
                            bits(&want),
                            "{wtype:?} K={k} rows={rows} {fill:?} [{r0}, {r1}): {got:?} vs {want:?}"
                        );
                    }
                }
            }
        }
    }
}

#[cfg(feature = "isa-neon")]
#[test]
fn arm_matvec_bit_identical_to_scalar() {
    guard::guard();
    check_matvec_bits(&[32, 64, 96, 160, 288, 4096], 16);
}

/// On AArch64 NEON float arithmetic is IEEE (subnormals included), so the
/// element-wise kernels equal the scalar ones bit for bit.
#[cfg(all(feature = "isa-neon", target_arch = "aarch64"))]
#[test]
fn aarch64_elementwise_bit_identical_to_scalar() {
    guard::guard();
    let mut rng = Rng::new(17);
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for &n in NS {
        let y0 = floats(&mut rng, n, 5.0);
        let x = floats(&mut rng, n, 5.0);
        let (mut got, mut want) = (y0.clone(), y0.clone());
        kernels::add(&mut got, &x);
        scalar::add(&mut want, &x);
        assert_eq!(bits(&got), bits(&want), "add n={n}");
        let (mut got, mut want) = (y0.clone(), y0.clone());
        kernels::axpy_f32(&mut got, -0.7, &x);
        scalar::axpy_f32(&mut want, -0.7, &x);
        assert_eq!(bits(&got), bits(&want), "axpy n={n}");
    }
    for head_dim in [2, 8, 10, 64] {
        let pairs = head_dim / 2;
        let cos = floats(&mut rng, pairs, 1.0);
        let sin = floats(&mut rng, pairs, 1.0);
        let q0 = floats(&mut rng, 3 * head_dim, 2.0);
        let k0 = floats(&mut rng, head_dim, 2.0);
        let (mut q1, mut k1, mut q2, mut k2) = (q0.clone(), k0.clone(), q0.clone(), k0);
        kernels::rope(&mut q1, &mut k1, &cos, &sin, head_dim, 3, 1);
        scalar::rope(&mut q2, &mut k2, &cos, &sin, head_dim, 3, 1);
        assert_eq!(bits(&q1), bits(&q2), "rope q hd={head_dim}");
        assert_eq!(bits(&k1), bits(&k2), "rope k hd={head_dim}");
    }
}

/// The SVE matvecs at this CPU's vector length: G = VL/256 blocks (at least
/// one) per step, so block counts around multiples of G exercise full and
/// partial last steps. Run under `qemu-aarch64 -cpu max,sve128=on`,
/// `max,sve-default-vector-length=256` (2048 bits) … with
/// `ML_EXPECT_SVE_BITS` set to the length meant, so the test proves which
/// one it ran at.
#[cfg(all(feature = "isa-sve", target_arch = "aarch64"))]
#[test]
fn sve_matvec_at_this_vector_length() {
    guard::guard();
    // SAFETY: the guard has verified SVE.
    let bytes = unsafe { kernels::sve::vector_bytes() };
    println!("SVE vector length: {} bits", bytes * 8);
    assert!(
        (16..=256).contains(&bytes) && bytes % 16 == 0,
        "vector length {bytes} bytes"
    );
    if let Ok(want) = std::env::var("ML_EXPECT_SVE_BITS") {
        assert_eq!((bytes * 8).to_string(), want.trim(), "SVE vector length");
    }
    let g = (bytes / QK).max(1);
    let mut nbs = vec![1, g, g + 1, 2 * g, 2 * g + 1, 3 * g + 2];
    if g > 1 {
        nbs.extend([g - 1, 2 * g - 1]);
    }
    nbs.sort_unstable();
    nbs.dedup();
    let ks: Vec<usize> = nbs.iter().map(|nb| nb * QK).collect();
    check_matvec_bits(&ks, 18);
}

#[test]
fn stream_sum_adds_every_word_and_tail_byte_with_or_without_prefetch() {
    for len in [0usize, 1, 63, 64, 65, 127, 4096 + 37, 70_000] {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
        let whole = len / 64 * 64;
        let words = bytes[..whole]
            .chunks_exact(8)
            .fold(0u64, |a, c| a.wrapping_add(u64::from_le_bytes(c.try_into().unwrap())));
        let want = words.wrapping_add(bytes[whole..].iter().map(|&b| b as u64).sum::<u64>());
        for prefetch in [false, true] {
            assert_eq!(
                kernels::stream_sum(&bytes, prefetch),
                want,
                "len {len}, prefetch {prefetch}"
            );
        }
    }
}
