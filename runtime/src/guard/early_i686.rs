//! The guard of every 32-bit x86 build against CPUs below Rust's i686
//! floor. `i686-unknown-linux-gnu` assumes SSE2 for the whole crate and for
//! the prebuilt std: LLVM uses it anywhere (std's `lang_start` copies eight
//! bytes with `movq %xmm0` before `main` runs), so on a Pentium II or III
//! the guard in `main` would come too late. This constructor runs first,
//! from `.init_array` after the C start-up code (glibc for i686, which
//! picks its own SSE-free routines by CPUID), before std's constructor and
//! before Rust's runtime.
//!
//! It executes CPUID and, on a CPU without SSE2, write(2) of the guard's
//! message and _exit(7): integer code only, which the matrix's audit checks
//! instruction by instruction (no MMX, SSE or SSE2 register or instruction)
//! and its `pentium2`/`pentium3` cells run.

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
