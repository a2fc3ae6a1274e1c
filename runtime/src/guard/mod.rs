//! The CPU guard (DESIGN.md §6): what this build's kernels need, what the host
//! has, and the check that runs before any kernel can.
//!
//! It sits above `kernels`, whose tier and required features it reads, and
//! below everything that calls a kernel; nothing in `core` calls it.
//!
//! This module is compiled for the target's baseline ISA (its one
//! `#[target_feature]`, XGETBV's, runs only once CPUID says the OS enabled
//! it), so running it can never fault.

use crate::core::error::{MlError, Result};
use crate::kernels;

/// The tier this build was compiled for (`kernels::TIER`).
pub fn build_tier() -> &'static str {
    kernels::TIER
}

/// CPU features, by their Linux /proc/cpuinfo-style names, that the kernels
/// bound in this build execute.
pub fn required_features() -> &'static [&'static str] {
    kernels::REQUIRED_FEATURES
}

/// The relevant features of the host CPU, as usable by this process (for
/// x86 that includes the OS having enabled the register state).
pub fn host_features() -> Vec<&'static str> {
    detect::features()
}

/// Features this build needs that the host lacks.
pub fn missing_features() -> Vec<&'static str> {
    let host = host_features();
    required_features()
        .iter()
        .copied()
        .filter(|f| !host.contains(f))
        .collect()
}

/// The CPU vendor's CPUID string ("GenuineIntel", "AuthenticAMD", …) on
/// x86; None on other targets and under Miri.
pub fn cpu_vendor() -> Option<String> {
    #[cfg(all(any(target_arch = "x86", target_arch = "x86_64"), not(miri)))]
    {
        Some(detect::vendor())
    }
    #[cfg(not(all(any(target_arch = "x86", target_arch = "x86_64"), not(miri))))]
    {
        None
    }
}

/// Fails with an Isa error naming every missing feature.
pub fn check() -> Result<()> {
    early::keep();
    let missing = missing_features();
    if missing.is_empty() {
        return Ok(());
    }
    Err(MlError::isa(format!(
        "this build needs {}; missing: {}; this CPU has: {}",
        build_tier(),
        missing.join(" "),
        host_features().join(" ")
    )))
}

/// The guard for binaries: on failure, prints the error and exits 7. Call it
/// first in `main` (and in every test binary) before any kernel runs.
pub fn guard() {
    if let Err(e) = check() {
        // Straight to the stderr handle: in test binaries `eprintln!` is
        // captured by the test harness, and this message must be seen.
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), "error: {e}");
        std::process::exit(e.kind.exit_code());
    }
}

// The checks that cannot wait for `main`, where the compiler may use the
// tier's instructions before it: ARMv7 NEON builds (NEON for the whole
// crate) and every 32-bit x86 build (SSE2 for the whole crate and std).
#[cfg(all(target_arch = "arm", target_os = "linux", feature = "isa-neon"))]
#[path = "early_armv7.rs"]
pub mod early;

#[cfg(all(target_arch = "x86", target_os = "linux", not(miri)))]
#[path = "early_i686.rs"]
pub mod early;

#[cfg(not(any(
    all(target_arch = "arm", target_os = "linux", feature = "isa-neon"),
    all(target_arch = "x86", target_os = "linux", not(miri))
)))]
pub mod early {
    /// Nothing to keep: the guard in `main` runs first on these builds.
    #[inline(always)]
    pub fn keep() {}
}

// How the host is asked: CPUID on x86, HWCAP on Linux ARM, the build's own
// target features under Miri, nothing elsewhere.
#[cfg(all(any(target_arch = "x86", target_arch = "x86_64"), not(miri)))]
#[path = "detect_x86.rs"]
mod detect;

#[cfg(all(any(target_arch = "aarch64", target_arch = "arm"), target_os = "linux", not(miri)))]
#[path = "detect_hwcap.rs"]
mod detect;

#[cfg(miri)]
#[path = "detect_miri.rs"]
mod detect;

#[cfg(not(any(
    miri,
    target_arch = "x86",
    target_arch = "x86_64",
    all(any(target_arch = "aarch64", target_arch = "arm"), target_os = "linux")
)))]
mod detect {
    /// No detection on this platform: builds here are trusted at compile time.
    pub fn features() -> Vec<&'static str> {
        Vec::new()
    }
}
