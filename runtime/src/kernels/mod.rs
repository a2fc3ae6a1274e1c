//! Kernels, one file per instruction-set tier, and the one binding table
//! that picks, at compile time, which tier's function each kernel name means.
//!
//! The scalar tier is always compiled: it is the fallback of every chain and
//! the reference the tests hold the other tiers to.
//!
//! A tier's module implements the kernels its instructions improve (listed in
//! its `PROVIDES`) and re-exports the rest from the tier below it, so each
//! module is a complete set of twelve (the spec's ten, plus attention's
//! `attn_scores`/`attn_mix`) and its fallback chain reads in one place.
//! Only the enabled tiers are compiled; the cargo features chain
//! (`isa-avx512vnni` enables `isa-avxvnni` … enables `isa-sse2`; `isa-sve`
//! enables `isa-neon-dotprod` enables `isa-neon`), so every module a tier
//! re-exports from is there. The exception: avx512vnni re-exports from
//! avx2, and the avxvnni module is left out of its builds (below).
//!
//! Where each tier's code is: x86 `sse2.rs` … `avx512vnni.rs`; ARM
//! `neon_a64.rs` (NEON on AArch64) and `neon_v7.rs` (NEON on ARMv7), both
//! compiled as the module `kernels::neon` for their target, then
//! `neon_dotprod.rs` and `sve.rs` (AArch64 only).

/// Attention over a KV cache's rows, built on the tier's own `dot_f32`
/// and `axpy_f32` (one call per position): what a tier without a fused
/// version binds. Row `t` is `rows[t·stride ..][.. n]`.
///
/// * `attn_scores`: out[t] = dot(q, row t) · scale, for t < out.len().
/// * `attn_mix`: out += p[t] · row t, for t < p.len() in order (axpy's
///   element operations, so a fused tier can match it bit for bit).
///
/// Both panic (`check_rows`), as slice indexing would, if a row runs past
/// `rows`.
macro_rules! attention_by_rows {
    () => {
        pub fn attn_scores(out: &mut [f32], q: &[f32], rows: &[f32], stride: usize, scale: f32) {
            let n = q.len();
            super::check_rows(rows, out.len(), stride, n);
            for (t, score) in out.iter_mut().enumerate() {
                super::prefetch_f32(rows.as_ptr().wrapping_add((t + super::ROWS_AHEAD) * stride), n);
                *score = dot_f32(q, &rows[t * stride..t * stride + n]) * scale;
            }
        }

        pub fn attn_mix(out: &mut [f32], p: &[f32], rows: &[f32], stride: usize) {
            let n = out.len();
            super::check_rows(rows, p.len(), stride, n);
            for (t, &pt) in p.iter().enumerate() {
                super::prefetch_f32(rows.as_ptr().wrapping_add((t + super::ROWS_AHEAD) * stride), n);
                axpy_f32(out, pt, &rows[t * stride..t * stride + n]);
            }
        }
    };
}

/// KV rows ahead that attention prefetches. The rows come from memory (the
/// weights streamed since the last token evicted them). On SmolLM2 Q4_0
/// (head_dim 64, rows 768 bytes apart), decoding 1024 tokens at 1 thread:
/// 6 rows ahead 153.8 tok/s, 16 rows 160.8, 32 rows 140.6.
const ROWS_AHEAD: usize = 16;

/// The rows `attn_scores`/`attn_mix` read; panics as slice indexing would
/// (before any unsafe code) when row `keys − 1` runs past `rows`.
fn check_rows(rows: &[f32], keys: usize, stride: usize, n: usize) {
    if keys > 0 {
        let end = (keys - 1).checked_mul(stride).and_then(|s| s.checked_add(n));
        assert!(
            end.is_some_and(|e| e <= rows.len()),
            "attention rows: {keys} rows of {n} every {stride} exceed {} floats",
            rows.len()
        );
    }
}

pub mod scalar;

/// The constants of the SIMD exp (softmax, silu) shared by every tier that
/// has one: range reduction by Cody–Waite ln 2, then Cephes' polynomial.
#[allow(dead_code)]
mod exp_poly {
    /// Below EXP_LO e^x rounds to 0 in f32 (and n ≥ −150 keeps both 2ⁿ
    /// factors normal); above EXP_HI it overflows.
    pub const EXP_LO: f32 = -104.0;
    pub const EXP_HI: f32 = 88.722_83;
    /// ln 2 = LN2_HI + LN2_LO (Cody–Waite): LN2_HI = 0.693359375 has 9
    /// significant bits, so n·LN2_HI is exact for every n the clamp allows.
    pub const LN2_HI: f32 = 355.0 / 512.0;
    #[allow(clippy::excessive_precision)]
    pub const LN2_LO: f32 = -2.121_944_40e-4;
    /// Cephes expf: e^r ≈ 1 + r + r²·P(r), coefficients as published.
    #[allow(clippy::excessive_precision)]
    pub const EXP_POLY: [f32; 6] = [
        1.987_569_150_0e-4,
        1.398_199_950_7e-3,
        8.333_451_907_3e-3,
        4.166_579_589_4e-2,
        1.666_666_545_9e-1,
        5.000_000_120_1e-1,
    ];
}

#[cfg(all(feature = "isa-sse2", not(any(target_arch = "x86", target_arch = "x86_64"))))]
compile_error!(
    "the isa-sse2/sse41/avx2/avxvnni/avx512vnni features select x86 kernels, but this target is not x86; \
     build without them (scalar) or with an ISA feature for this target"
);

#[cfg(all(feature = "isa-neon", not(any(target_arch = "aarch64", target_arch = "arm"))))]
compile_error!(
    "the isa-neon/neon-dotprod/sve features select ARM kernels, but this target is not ARM; \
     build without them (scalar) or with an ISA feature for this target"
);

#[cfg(all(feature = "isa-neon-dotprod", target_arch = "arm"))]
compile_error!(
    "isa-neon-dotprod and isa-sve are AArch64 tiers; on ARMv7 build isa-neon \
     (with RUSTFLAGS=\"-C target-feature=+neon\")"
);

// Tier modules, lowest first. Each exists only when its feature is on.
#[cfg(all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")))]
pub mod sse2;

#[cfg(all(feature = "isa-sse41", any(target_arch = "x86", target_arch = "x86_64")))]
pub mod sse41;

#[cfg(all(feature = "isa-avx2", any(target_arch = "x86", target_arch = "x86_64")))]
pub mod avx2;

// Not in avx512vnni builds, although the feature is on there: AVX-512 VNNI
// does not imply AVX-VNNI (an AMD Zen 4 has the one, not the other), so
// that tier skips these kernels, and its guard does not check avx_vnni. An
// unused copy would still be in a Windows binary (a PE link keeps every
// function .pdata names) with instructions beyond the guard: the audit of
// the win-avx512vnni row found `kernels::avxvnni::matvec` there.
#[cfg(all(
    feature = "isa-avxvnni",
    not(feature = "isa-avx512vnni"),
    any(target_arch = "x86", target_arch = "x86_64")
))]
pub mod avxvnni;

#[cfg(all(feature = "isa-avx512vnni", any(target_arch = "x86", target_arch = "x86_64")))]
pub mod avx512vnni;

// NEON: one tier, one module name, the file of the target's instruction set.
#[cfg(all(feature = "isa-neon", target_arch = "aarch64"))]
#[path = "neon_a64.rs"]
pub mod neon;

#[cfg(all(feature = "isa-neon", target_arch = "arm"))]
#[path = "neon_v7.rs"]
pub mod neon;

#[cfg(all(feature = "isa-neon-dotprod", target_arch = "aarch64"))]
pub mod neon_dotprod;

#[cfg(all(feature = "isa-sve", target_arch = "aarch64"))]
pub mod sve;

// The binding table: the highest enabled tier is the active one (spec §3),
// tried from the top. No function pointers, no runtime dispatch: each name
// below is a direct call the optimiser can inline.
#[cfg(all(feature = "isa-avx512vnni", any(target_arch = "x86", target_arch = "x86_64")))]
use avx512vnni as active;

#[cfg(all(
    feature = "isa-avxvnni",
    not(feature = "isa-avx512vnni"),
    any(target_arch = "x86", target_arch = "x86_64")
))]
use avxvnni as active;

#[cfg(all(
    feature = "isa-avx2",
    not(feature = "isa-avxvnni"),
    any(target_arch = "x86", target_arch = "x86_64")
))]
use avx2 as active;

#[cfg(all(
    feature = "isa-sse41",
    not(feature = "isa-avx2"),
    any(target_arch = "x86", target_arch = "x86_64")
))]
use sse41 as active;

#[cfg(all(
    feature = "isa-sse2",
    not(feature = "isa-sse41"),
    any(target_arch = "x86", target_arch = "x86_64")
))]
use sse2 as active;

#[cfg(all(feature = "isa-sve", target_arch = "aarch64"))]
use sve as active;

#[cfg(all(feature = "isa-neon-dotprod", not(feature = "isa-sve"), target_arch = "aarch64"))]
use neon_dotprod as active;

// On ARMv7 isa-neon is the top tier (dotprod/SVE there are the compile_error
// above, which should be the only error reported).
#[cfg(all(
    feature = "isa-neon",
    any(all(target_arch = "aarch64", not(feature = "isa-neon-dotprod")), target_arch = "arm")
))]
use neon as active;

// Scalar: no tier feature, or (after the compile_errors above) the wrong
// architecture, so that the compile_error is the only error reported.
#[cfg(not(any(
    all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")),
    all(feature = "isa-neon", any(target_arch = "aarch64", target_arch = "arm"))
)))]
mod active {
    pub use super::scalar::{
        add, attn_mix, attn_scores, axpy_f32, dot_f32, matvec_q4, matvec_q8, quantize_q8, rmsnorm, rope, silu_mul,
        softmax,
    };
    pub const TIER: &str = "scalar";
    pub const REQUIRED_FEATURES: &[&str] = &[];
}

pub use active::{
    add, attn_mix, attn_scores, axpy_f32, dot_f32, matvec_q4, matvec_q8, quantize_q8, rmsnorm, rope, silu_mul, softmax,
};

/// Whether the active tier's matvecs read matrices packed in four-row
/// groups (`core::tensor::pack_row_groups` and `pack_scale_groups`); the
/// model packs them at load when its bytes are an owned copy and the CPU
/// streams them faster so (`core::isa::streaming`: not on Intel). Only
/// avx512vnni: its 4-row kernels then read one ascending stream that the
/// hardware prefetchers follow, where four row streams needed software
/// prefetch and still fell short, and load a group's scales for two or four
/// blocks in one load instead of gathering them. On this project's Zen 4,
/// `ml bench --shape 49152x576`, Q8_0 cold: about 1350–1430 µs row-major,
/// 1020–1080 packed (89–96% of the probe's bandwidth).
pub const PACKS_ROW_GROUPS: bool = cfg!(all(
    feature = "isa-avx512vnni",
    any(target_arch = "x86", target_arch = "x86_64")
));

/// The instruction-set tier this build was compiled for.
pub const TIER: &str = active::TIER;

/// CPU features (as /proc/cpuinfo names them; HWCAP names on ARM) that the kernels bound above
/// execute; `core::isa` checks them before any kernel can run.
pub const REQUIRED_FEATURES: &[&str] = active::REQUIRED_FEATURES;

/// Which cache a prefetch asks a line into.
#[derive(Clone, Copy)]
enum CacheLevel {
    /// prefetcht0 / `pldl1keep`.
    L1,
    /// prefetcht1 / `pldl2keep`.
    L2,
}

/// Asks for the line holding `p` in `level`. A hint: it never faults,
/// whatever the address (past the end of an array included), and changes
/// no result; a no-op on targets without a stable prefetch and under Miri.
#[inline(always)]
fn prefetch_line(p: *const u8, level: CacheLevel) {
    let _ = (p, level);
    #[cfg(all(any(target_arch = "x86", target_arch = "x86_64"), not(miri)))]
    // SAFETY: prefetch is an SSE instruction, in every x86-64 and in the
    // i686 target's baseline; it reads nothing architecturally and cannot
    // fault.
    unsafe {
        #[cfg(target_arch = "x86")]
        use std::arch::x86::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        #[cfg(target_arch = "x86_64")]
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        match level {
            CacheLevel::L1 => _mm_prefetch::<_MM_HINT_T0>(p.cast()),
            CacheLevel::L2 => _mm_prefetch::<_MM_HINT_T1>(p.cast()),
        }
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: prfm is a hint in the AArch64 base ISA: no architectural
    // read, no fault, no flags or stack touched.
    unsafe {
        match level {
            CacheLevel::L1 => {
                std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) p, options(nostack, readonly, preserves_flags))
            }
            CacheLevel::L2 => {
                std::arch::asm!("prfm pldl2keep, [{0}]", in(reg) p, options(nostack, readonly, preserves_flags))
            }
        }
    }
}

/// Asks for the cache lines of the `len` floats from `p` on, into L1, to be
/// read soon (attention's key and value rows, a few positions ahead: they
/// come from L3 or memory, since each layer's weights stream through the
/// caches between two visits). `p` may point anywhere.
#[inline(always)]
pub fn prefetch_f32(p: *const f32, len: usize) {
    for line in (0..len).step_by(16) {
        prefetch_line(p.wrapping_add(line).cast(), CacheLevel::L1);
    }
}

/// Asks for the cache lines of `items` into L2: a matrix that the next
/// matvec streams, requested while the core computes something else, so
/// memory works during that phase too.
#[inline]
pub fn prefetch_l2<T>(items: &[T]) {
    let start = items.as_ptr().cast::<u8>();
    for line in (0..std::mem::size_of_val(items)).step_by(64) {
        prefetch_line(start.wrapping_add(line), CacheLevel::L2);
    }
}

/// How far ahead of a weight stream software prefetch asks for lines: in
/// each row stream of the x86 matvecs (`prefetch`), and in the bandwidth
/// probe's prefetching reader (`stream_sum`).
const WEIGHTS_AHEAD: usize = 16 << 10;

/// Sums `bytes` as little-endian u64 words in eight independent lanes, so
/// the loop is bound by loads, not by one add chain: the bandwidth probe's
/// reader. With `prefetch`, each line is asked for 16 KiB ahead into L2, as
/// the x86 matvecs do. Neither way is the faster everywhere, so the probe
/// takes the better: on an Intel Xeon whose L3 holds an 80 MiB working set,
/// 30 GB/s with the prefetch against 15 without; from memory (512 MiB),
/// 16–17.5 GB/s with it against 17.4–18.3 without.
pub fn stream_sum(bytes: &[u8], prefetch: bool) -> u64 {
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
    let mut lanes = [0u64; 8];
    let mut lines = bytes.chunks_exact(64);
    for (i, line) in (&mut lines).enumerate() {
        if prefetch {
            prefetch_line(bytes.as_ptr().wrapping_add(64 * i + WEIGHTS_AHEAD), CacheLevel::L2);
        }
        for (j, lane) in lanes.iter_mut().enumerate() {
            *lane = lane.wrapping_add(word(&line[8 * j..8 * j + 8]));
        }
    }
    let tail = lines.remainder().iter().fold(0u64, |a, &b| a.wrapping_add(b as u64));
    lanes.iter().fold(tail, |a, &b| a.wrapping_add(b))
}

/// Software prefetch for the x86 matvecs. Measured with `ml bench --shape`
/// on a Zen 4 (cold, i.e. streamed from DRAM): at K = 576 the hardware
/// prefetchers alone reach about a third of the read bandwidth, and
/// prefetching into L1 (T0) only about half, since each L1 prefetch holds
/// one of the few L1 miss buffers for a whole DRAM round trip. Into L2 (T1)
/// and 16 KiB ahead of each row stream (8 and 32 KiB were no better) the
/// kernels stream at 85–90 % of it.
#[cfg(all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")))]
pub(crate) mod prefetch {
    use super::{prefetch_line, CacheLevel, WEIGHTS_AHEAD};

    /// Asks for the line holding `p` in L2. `p` may point anywhere, past
    /// the end of the matrix included: a prefetch never faults.
    #[inline(always)]
    pub fn to_l2<T>(p: *const T) {
        prefetch_line(p.cast(), CacheLevel::L2);
    }

    /// The prefetches of a four-row group (rows r..r+4, `stride` bytes
    /// apart, scales `nb` per row at `wd`) at the step that reads `blocks`
    /// blocks of `block_bytes` from block `b` on. Called every step, it asks
    /// for each weight line and each scale line once. `PACKED`: the group
    /// is one stream (`core::tensor::pack_row_groups`), the four rows' bytes
    /// at `offset` side by side at 4·offset.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn row_group<const PACKED: bool>(
        wq: *const u8,
        wd: *const f32,
        stride: usize,
        nb: usize,
        r: usize,
        b: usize,
        blocks: usize,
        block_bytes: usize,
    ) {
        let offset = b * block_bytes;
        if offset % 64 < blocks * block_bytes {
            for j in 0..4 {
                to_l2(wq.wrapping_add(match PACKED {
                    false => (r + j) * stride + offset + WEIGHTS_AHEAD,
                    true => r * stride + 4 * offset + 64 * j + WEIGHTS_AHEAD,
                }));
            }
        }
        // The group's scales are 4·nb contiguous floats, 16 bytes per block
        // while the weights advance 4·block_bytes: ask for them as many
        // blocks ahead as the weights, so both arrive in time.
        if b % 4 < blocks {
            let ahead = WEIGHTS_AHEAD * 4 / block_bytes;
            to_l2(wd.wrapping_add(r * nb + 4 * b).cast::<u8>().wrapping_add(ahead));
        }
    }
}

/// The bounds every SIMD matvec relies on, checked once per call so that its
/// pointer loops stay inside the slices whatever the caller passes. Rows are
/// `row_stride` bytes apart and a block's quants are `block_bytes` long (as
/// the scalar kernels index them). Returns the number of blocks per row.
///
/// Inputs the scalar kernels would panic on (by slice indexing) panic here
/// too, before any unsafe code runs.
#[cfg(any(
    all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")),
    all(feature = "isa-neon", any(target_arch = "aarch64", target_arch = "arm"))
))]
pub(crate) fn check_matvec(
    y: &[f32],
    w: &crate::core::tensor::QTensor,
    x: &crate::core::tensor::QAct,
    r0: usize,
    r1: usize,
    row_stride: usize,
    block_bytes: usize,
) -> usize {
    assert!(
        !w.packed,
        "this tier's matvec reads row-major matrices only, not packed ones"
    );
    check_matvec_any_layout(y, w, x, r0, r1, row_stride, block_bytes)
}

/// `check_matvec` for a matvec that also reads packed matrices
/// (`core::tensor::pack_row_groups`): a packed group spans the same bytes as
/// its four rows, and [r0, r1) must cut the matrix only between groups, or
/// at its end.
#[cfg(any(
    all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")),
    all(feature = "isa-neon", any(target_arch = "aarch64", target_arch = "arm"))
))]
pub(crate) fn check_matvec_any_layout(
    y: &[f32],
    w: &crate::core::tensor::QTensor,
    x: &crate::core::tensor::QAct,
    r0: usize,
    r1: usize,
    row_stride: usize,
    block_bytes: usize,
) -> usize {
    use crate::core::quant::QK;
    let nb = w.blocks_per_row();
    assert!(r0 <= r1, "matvec rows {r0}..{r1} are reversed");
    // Packed rows lie in groups: a range may cut between them, or anywhere
    // among the row-major rows after the last whole group.
    let between_groups = |r: usize| r.is_multiple_of(4) || r >= w.rows / 4 * 4;
    assert!(
        !w.packed || (between_groups(r0) && between_groups(r1) && row_stride == nb * block_bytes),
        "matvec rows {r0}..{r1} of a packed matrix must start and end between four-row groups"
    );
    assert!(
        y.len() >= r1 - r0,
        "matvec output holds {} rows, not {}",
        y.len(),
        r1 - r0
    );
    assert!(
        x.q.len() >= nb * QK && x.d.len() >= nb,
        "matvec activation is shorter than {} columns",
        nb * QK
    );
    if r1 > r0 {
        // The last row read ends at (r1 - 1) * row_stride + nb * block_bytes.
        let q_end = (r1 - 1)
            .checked_mul(row_stride)
            .and_then(|v| v.checked_add(nb * block_bytes));
        assert!(
            q_end.is_some_and(|e| e <= w.q.len()),
            "matvec weights are shorter than row {r1}"
        );
        assert!(
            r1.checked_mul(nb).is_some_and(|e| e <= w.d.len()),
            "matvec scales are shorter than row {r1}"
        );
    }
    nb
}
