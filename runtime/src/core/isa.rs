//! The CPU guard (spec §6): what this build needs, what the host has, and
//! the check that runs before any kernel can.
//!
//! This module is compiled for the target's baseline ISA (no
//! `#[target_feature]` here), so running it can never fault.

use super::error::{MlError, Result};

/// The tier this build was compiled for (mirrors `kernels::TIER`).
pub fn build_tier() -> &'static str {
    crate::kernels::TIER
}

/// CPU features, by their Linux /proc/cpuinfo-style names, that the kernels
/// bound in this build execute.
pub fn required_features() -> &'static [&'static str] {
    crate::kernels::REQUIRED_FEATURES
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

/// `ML_PACK`: `1` packs matrices in four-row groups, `0` keeps them
/// row-major, unset or empty leaves it to this CPU (`streaming`). Any other
/// value is an error, for the command line to report; `streaming` treats it
/// as unset.
pub fn pack_override() -> std::result::Result<Option<bool>, String> {
    match std::env::var("ML_PACK").as_deref() {
        Ok("1") => Ok(Some(true)),
        Ok("0") => Ok(Some(false)),
        Ok("") | Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) => Err(format!(
            "ML_PACK must be 1 (pack matrices in four-row groups), 0 (keep them row-major) \
             or empty (this CPU's choice), not {v:?}"
        )),
        Err(std::env::VarError::NotUnicode(v)) => Err(format!("ML_PACK must be 1, 0 or empty, not {v:?}")),
    }
}

/// How this CPU streams weights faster, where its microarchitecture decides
/// and not its ISA. Either way runs the same kernels and gives bit-identical
/// logits, so this is chosen at load time; the kernels themselves stay
/// chosen at compile time. Measured (README, "Speed"):
/// - on an AMD Zen 4, packed row groups (`core::tensor::pack_row_groups`)
///   streamed a cold 49152×576 Q8_0 matvec in 1020–1080 µs against
///   1350–1430 row-major, and the warm pass took row-major Q8_0 decode at
///   1 thread from 62–64% to 70–74% of the roofline;
/// - on an Intel Xeon (Sapphire Rapids or later) row-major was the faster
///   (cold 4096×4096 Q8_0 1175–1200 µs against 1310–1365 packed; SmolLM2
///   decode at 1 thread 88% of the roofline against 80% (Q8_0), 84 against
///   82 (Q4_0)), and the warm pass cost avx2 Q8_0 decode 18 points.
///
/// So Intel CPUs stream row-major without the warm pass; every other CPU
/// keeps the choices measured first. `ML_PACK=1` or `0` overrides the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streaming {
    /// Pack the matrices of a model read into memory in four-row groups,
    /// for a tier whose matvec reads them (`kernels::PACKS_ROW_GROUPS`).
    pub pack_row_groups: bool,
    /// On one thread, prefetch each row-major Q8_0 matrix of up to 2 MiB
    /// whole into the caches one phase before its matvec.
    pub warm_q8_matrices: bool,
}

/// This CPU's `Streaming` choices (and `ML_PACK`'s), read once per process.
pub fn streaming() -> Streaming {
    static CHOICE: std::sync::OnceLock<Streaming> = std::sync::OnceLock::new();
    *CHOICE.get_or_init(|| {
        let intel = cpu_vendor().as_deref() == Some("GenuineIntel");
        let pack = pack_override().ok().flatten().unwrap_or(!intel);
        Streaming {
            pack_row_groups: crate::kernels::PACKS_ROW_GROUPS && pack,
            warm_q8_matrices: !intel,
        }
    })
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

/// The guard of builds compiled with NEON for the whole crate: ARMv7's
/// `isa-neon` (spec §6; ARMv7 NEON intrinsics and per-function NEON are
/// unstable, so that row builds everything with `-C target-feature=+neon`).
/// There LLVM may emit NEON in any function, `main` and `guard()` included,
/// so the check cannot wait for `main`: it runs from an `.init_array`
/// constructor, which the C start-up code (`__libc_start_main`) calls before
/// Rust's runtime and `main`.
///
/// The constructor is loop-free code that calls only libc: getauxval(AT_HWCAP)
/// and, on a CPU without HWCAP_NEON, write(2) of the guard's message (the
/// same text `check()` would print, chosen among the two possible ones by
/// HWCAP_VFPv4) and _exit(7). Nothing in it can need NEON, and
/// `arm-linux-gnueabihf-objdump -d` shows it has none.
///
/// The linker only keeps an rlib object something references, so `check()`
/// and every NEON kernel reference the constructor (`keep()`), which keeps it
/// in `ml`, in every test binary that calls the guard and in every binary
/// that can reach a NEON kernel.
///
/// Other targets need none of this: x86 and AArch64 tiers use per-function
/// `#[target_feature]`, so `guard()` at the start of `main` comes first.
#[cfg(all(target_arch = "arm", target_os = "linux", feature = "isa-neon"))]
pub mod early {
    use core::ffi::{c_int, c_ulong, c_void};

    extern "C" {
        fn getauxval(kind: c_ulong) -> c_ulong;
        fn write(fd: c_int, buf: *const c_void, count: usize) -> isize;
        fn _exit(status: c_int) -> !;
    }

    const AT_HWCAP: c_ulong = 16;
    const HWCAP_NEON: c_ulong = 1 << 12;
    const HWCAP_VFPV4: c_ulong = 1 << 16;

    /// `ErrorKind::Isa.exit_code()`, as a constant (tests/guard.rs compares).
    pub const EXIT_CODE: c_int = 7;

    /// The message for a CPU without NEON, by whether it has VFPv4 (the only
    /// other feature the guard reports on ARMv7): `check()`'s text.
    pub const MESSAGE_VFPV4: &str = "error: this build needs neon; missing: neon; this CPU has: vfpv4\n";
    pub const MESSAGE_NONE: &str = "error: this build needs neon; missing: neon; this CPU has: \n";

    /// Placed in `.init_array.00101`: the linker sorts prioritised entries
    /// first, so this runs after std's own (`.init_array.00099`, std being
    /// prebuilt without +neon) and before every unprioritised constructor,
    /// e.g. one a dependency compiled with +neon might bring.
    #[used]
    #[link_section = ".init_array.00101"]
    pub static NEON_CHECK: extern "C" fn() = neon_check;

    extern "C" fn neon_check() {
        // SAFETY: getauxval has no preconditions.
        let hwcap = unsafe { getauxval(AT_HWCAP) };
        if hwcap & HWCAP_NEON != 0 {
            return;
        }
        let msg = if hwcap & HWCAP_VFPV4 != 0 {
            MESSAGE_VFPV4
        } else {
            MESSAGE_NONE
        };
        // SAFETY: msg is a valid buffer of msg.len() bytes; _exit ends the
        // process without running anything else of it. A short write to
        // stderr cannot be retried without a loop and is not worth one.
        unsafe {
            write(2, msg.as_ptr().cast(), msg.len());
            _exit(EXIT_CODE)
        }
    }

    /// References the constructor so that the linker keeps its object.
    #[inline(always)]
    pub fn keep() {
        std::hint::black_box(&NEON_CHECK);
    }
}

/// The guard of every 32-bit x86 build against CPUs below Rust's i686
/// floor. `i686-unknown-linux-gnu` assumes SSE2 for the whole crate and for
/// the prebuilt std: LLVM uses it anywhere (std's `lang_start` copies eight
/// bytes with `movq %xmm0` before `main` runs), so on a Pentium II or III
/// the guard in `main` would come too late. This constructor runs first,
/// from `.init_array` after the C start-up code (glibc for i686, which
/// picks its own SSE-free routines by CPUID), before std's constructor and
/// before Rust's runtime.
///
/// It executes CPUID and, on a CPU without SSE2, write(2) of the guard's
/// message and _exit(7): integer code only, which the matrix's audit checks
/// instruction by instruction (no MMX, SSE or SSE2 register or instruction)
/// and its `pentium2`/`pentium3` cells run.
#[cfg(all(target_arch = "x86", target_os = "linux", not(miri)))]
pub mod early {
    use core::ffi::{c_int, c_void};

    extern "C" {
        fn write(fd: c_int, buf: *const c_void, count: usize) -> isize;
        fn _exit(status: c_int) -> !;
    }

    /// `ErrorKind::Isa.exit_code()`, as a constant (tests/guard.rs compares).
    pub const EXIT_CODE: c_int = 7;
    const CPUID_1_EDX_SSE: u32 = 1 << 25;
    const CPUID_1_EDX_SSE2: u32 = 1 << 26;

    /// `check()`'s message for a CPU without SSE2, by whether it has SSE
    /// (the Pentium III) or not (the Pentium II and older).
    pub const MESSAGE_SSE: &str =
        "error: this build needs sse2 (Rust's i686 targets assume it in all code); missing: sse2; this CPU has: sse\n";
    pub const MESSAGE_NONE: &str =
        "error: this build needs sse2 (Rust's i686 targets assume it in all code); missing: sse2; this CPU has: \n";

    /// `.init_array.00098`: the linker runs prioritised entries first and in
    /// ascending order, so this comes before std's own (`.init_array.00099`,
    /// std being prebuilt for SSE2) and every unprioritised constructor.
    ///
    /// Every binary needs it, including test binaries that never call the
    /// guard, so its symbol is unmangled and runtime/build.rs passes
    /// `-Wl,--undefined=` for it: the linker then always takes its object.
    #[used]
    #[no_mangle]
    #[link_section = ".init_array.00098"]
    pub static LEGACY_ML_SSE2_CHECK: extern "C" fn() = sse2_check;
    pub use self::LEGACY_ML_SSE2_CHECK as SSE2_CHECK;

    extern "C" fn sse2_check() {
        // SAFETY: CPUID exists on every CPU the i686 target can start on
        // (the Pentium Pro and later; it is older than them).
        #[allow(unused_unsafe)]
        let edx = unsafe { core::arch::x86::__cpuid(1) }.edx;
        if edx & CPUID_1_EDX_SSE2 != 0 {
            return;
        }
        let msg = if edx & CPUID_1_EDX_SSE != 0 {
            MESSAGE_SSE
        } else {
            MESSAGE_NONE
        };
        // SAFETY: msg is a valid buffer of msg.len() bytes; _exit ends the
        // process without running anything else of it. A short write to
        // stderr cannot be retried without a loop and is not worth one.
        unsafe {
            write(2, msg.as_ptr().cast(), msg.len());
            _exit(EXIT_CODE)
        }
    }

    /// References the constructor so that the linker keeps its object.
    #[inline(always)]
    pub fn keep() {
        std::hint::black_box(&SSE2_CHECK);
    }
}

#[cfg(not(any(
    all(target_arch = "arm", target_os = "linux", feature = "isa-neon"),
    all(target_arch = "x86", target_os = "linux", not(miri))
)))]
mod early {
    /// Nothing to keep: the guard in `main` runs first on these builds.
    #[inline(always)]
    pub fn keep() {}
}

#[cfg(all(any(target_arch = "x86", target_arch = "x86_64"), not(miri)))]
mod detect {
    #[cfg(target_arch = "x86")]
    use core::arch::x86::{__cpuid_count, _xgetbv, CpuidResult};
    #[cfg(target_arch = "x86_64")]
    use core::arch::x86_64::{__cpuid_count, _xgetbv, CpuidResult};

    fn cpuid(leaf: u32, sub: u32) -> CpuidResult {
        // SAFETY: CPUID exists on every x86-64 CPU and on every CPU the i686
        // target supports; it only reads identification registers.
        #[allow(unused_unsafe)]
        unsafe {
            __cpuid_count(leaf, sub)
        }
    }

    pub fn vendor() -> String {
        let l0 = cpuid(0, 0);
        let bytes: Vec<u8> = [l0.ebx, l0.edx, l0.ecx].iter().flat_map(|r| r.to_le_bytes()).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// XCR0: which register state the OS saves (so may be used).
    #[target_feature(enable = "xsave")]
    unsafe fn xcr0() -> u64 {
        _xgetbv(0)
    }

    pub fn features() -> Vec<&'static str> {
        let bit = |r: u32, b: u32| r >> b & 1 == 1;
        let max_leaf = cpuid(0, 0).eax;
        let l1 = cpuid(1, 0);
        let (l7, l7_1) = if max_leaf >= 7 {
            (cpuid(7, 0), cpuid(7, 1))
        } else {
            (cpuid(0, 0), cpuid(0, 0))
        };
        let has7 = max_leaf >= 7;
        let osxsave = bit(l1.ecx, 27);
        // SAFETY: OSXSAVE set means the OS enabled XSAVE and XGETBV is legal.
        let xcr0 = if osxsave { unsafe { xcr0() } } else { 0 };
        let ymm_state = xcr0 & 0x6 == 0x6;
        let zmm_state = xcr0 & 0xE6 == 0xE6;
        let mut f = Vec::new();
        let mut add = |name: &'static str, present: bool| {
            if present {
                f.push(name)
            }
        };
        add("sse2", bit(l1.edx, 26));
        add("sse3", bit(l1.ecx, 0));
        add("ssse3", bit(l1.ecx, 9));
        add("sse4_1", bit(l1.ecx, 19));
        add("sse4_2", bit(l1.ecx, 20));
        add("avx", bit(l1.ecx, 28) && ymm_state);
        add("fma", bit(l1.ecx, 12) && ymm_state);
        add("avx2", has7 && bit(l7.ebx, 5) && ymm_state);
        add("avx_vnni", has7 && bit(l7_1.eax, 4) && ymm_state);
        add("avx512f", has7 && bit(l7.ebx, 16) && zmm_state);
        add("avx512bw", has7 && bit(l7.ebx, 30) && zmm_state);
        add("avx512vl", has7 && bit(l7.ebx, 31) && zmm_state);
        add("avx512_vnni", has7 && bit(l7.ecx, 11) && zmm_state);
        f
    }
}

#[cfg(all(any(target_arch = "aarch64", target_arch = "arm"), target_os = "linux", not(miri)))]
mod detect {
    extern "C" {
        fn getauxval(kind: core::ffi::c_ulong) -> core::ffi::c_ulong;
    }
    const AT_HWCAP: core::ffi::c_ulong = 16;
    #[cfg(target_arch = "aarch64")]
    const AT_HWCAP2: core::ffi::c_ulong = 26;

    fn auxval(kind: core::ffi::c_ulong) -> u64 {
        // SAFETY: getauxval is a plain glibc/musl query with no preconditions;
        // unknown kinds return 0.
        unsafe { getauxval(kind) as u64 }
    }

    pub fn features() -> Vec<&'static str> {
        let hwcap = auxval(AT_HWCAP);
        let mut f = Vec::new();
        #[cfg(target_arch = "aarch64")]
        {
            let _hwcap2 = auxval(AT_HWCAP2);
            for (name, b) in [("asimd", 1), ("asimddp", 20), ("sve", 22)] {
                if hwcap >> b & 1 == 1 {
                    f.push(name);
                }
            }
        }
        #[cfg(target_arch = "arm")]
        for (name, b) in [("neon", 12), ("vfpv4", 16)] {
            if hwcap >> b & 1 == 1 {
                f.push(name);
            }
        }
        f
    }
}

/// Under Miri there is no CPU to ask: CPUID and getauxval are beyond what it
/// interprets. The machine Miri emulates has exactly the target features the
/// build was compiled with (`-C target-feature`), so those are reported.
#[cfg(miri)]
mod detect {
    pub fn features() -> Vec<&'static str> {
        [
            ("sse2", cfg!(target_feature = "sse2")),
            ("sse3", cfg!(target_feature = "sse3")),
            ("ssse3", cfg!(target_feature = "ssse3")),
            ("sse4_1", cfg!(target_feature = "sse4.1")),
            ("sse4_2", cfg!(target_feature = "sse4.2")),
            ("avx", cfg!(target_feature = "avx")),
            ("fma", cfg!(target_feature = "fma")),
            ("avx2", cfg!(target_feature = "avx2")),
            ("avx_vnni", cfg!(target_feature = "avxvnni")),
            ("avx512f", cfg!(target_feature = "avx512f")),
            ("avx512bw", cfg!(target_feature = "avx512bw")),
            ("avx512vl", cfg!(target_feature = "avx512vl")),
            ("avx512_vnni", cfg!(target_feature = "avx512vnni")),
            ("asimd", cfg!(all(target_arch = "aarch64", target_feature = "neon"))),
            ("asimddp", cfg!(target_feature = "dotprod")),
            ("sve", cfg!(target_feature = "sve")),
            ("neon", cfg!(all(target_arch = "arm", target_feature = "neon"))),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect()
    }
}

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
