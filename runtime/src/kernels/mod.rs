//! Kernels, one file per instruction-set tier, and the one binding table
//! that picks, at compile time, which tier's function each kernel name means.
//!
//! The scalar tier is always compiled: it is the fallback of every chain and
//! the reference the tests hold the other tiers to.
//!
//! A tier's module implements the kernels its instructions improve and
//! re-exports the rest from the tier below it, so each module is a complete
//! set of fourteen (the spec's ten, attention's `attn_scores`/`attn_mix`,
//! and prompt processing's `matmul_q8`/`matmul_q4`) and its fallback chain
//! reads in one place.
//!
//! The matmuls are never re-exported from the tier below: each must be
//! bit-identical to its own tier's matvec (`scalar`'s module comment), so
//! every tier has its own: the scalar reference; sse2, sse41, avx2 and
//! avxvnni (`x86::matmul_by_row_groups!`'s tiles; avx2 and avxvnni put
//! eight tokens in int32 lanes first, `x86::matmul_by_token_lanes!` with
//! each tier's block routines, and sse41 four for Q4_0; sse2, and sse41
//! for Q8_0, widen weights and activations to int16 once,
//! `x86::matmul_widened!`); avx512vnni;
//! AArch64 neon and neon_dotprod (`aarch64::neon_matmul!`); sve; ARMv7
//! neon. Each loads (for Q4_0: unpacks) a weight block once for several
//! tokens, then gives each token its matvec's per-block steps.
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

// Declared first, with their macros, so that every tier below can use them.
#[macro_use]
mod scaffold;
mod exp_poly;
pub(crate) mod prefetch;

pub use prefetch::{prefetch_l2, stream_sum};

pub mod scalar;

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

// The x86 tiers' shared matvec driver and scale steps, before the tiers
// for its macro.
#[cfg(all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")))]
#[macro_use]
mod x86;

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

#[cfg(all(feature = "isa-neon", target_arch = "aarch64"))]
mod aarch64;

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

// The binding table: the highest enabled tier is the active one (DESIGN.md §3),
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
        add, attn_mix, attn_scores, axpy_f32, dot_f32, matmul_q4, matmul_q8, matvec_q4, matvec_q8, quantize_q8,
        rmsnorm, rope, silu_mul, softmax,
    };
    pub const TIER: &str = "scalar";
    pub const REQUIRED_FEATURES: &[&str] = &[];
}

pub use active::{
    add, attn_mix, attn_scores, axpy_f32, dot_f32, matmul_q4, matmul_q8, matvec_q4, matvec_q8, quantize_q8, rmsnorm,
    rope, silu_mul, softmax,
};

/// Whether the active tier's matvecs read matrices packed in four-row
/// groups (`core::tensor::pack_row_groups` and `pack_scale_groups`); the
/// model packs them at load when its bytes are an owned copy and the CPU
/// streams them faster so (`model::streaming`: not on Intel). Only
/// avx512vnni: its 4-row kernels then read one ascending stream that the
/// hardware prefetchers follow, where four row streams needed software
/// prefetch and still fell short, and load a group's scales for two or four
/// blocks in one load instead of gathering them.
pub const PACKS_ROW_GROUPS: bool = cfg!(all(
    feature = "isa-avx512vnni",
    any(target_arch = "x86", target_arch = "x86_64")
));

/// The instruction-set tier this build was compiled for.
pub const TIER: &str = active::TIER;

/// CPU features (as /proc/cpuinfo names them; HWCAP names on ARM) that the kernels bound above
/// execute; the `guard` checks them before any kernel can run.
pub const REQUIRED_FEATURES: &[&str] = active::REQUIRED_FEATURES;
