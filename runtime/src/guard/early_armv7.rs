//! The guard of builds compiled with NEON for the whole crate: ARMv7's
//! `isa-neon` (DESIGN.md §6; ARMv7 NEON intrinsics and per-function NEON are
//! unstable, so that row builds everything with `-C target-feature=+neon`).
//! There LLVM may emit NEON in any function, `main` and `guard()` included,
//! so the check cannot wait for `main`: it runs from an `.init_array`
//! constructor, which the C start-up code (`__libc_start_main`) calls before
//! Rust's runtime and `main`.
//!
//! The constructor is loop-free code that calls only libc: getauxval(AT_HWCAP)
//! and, on a CPU without HWCAP_NEON, write(2) of the guard's message (the
//! same text `check()` would print, chosen among the two possible ones by
//! HWCAP_VFPv4) and _exit(7). Nothing in it can need NEON, and
//! `arm-linux-gnueabihf-objdump -d` shows it has none.
//!
//! The linker only keeps an rlib object something references, so `check()`
//! and every NEON kernel reference the constructor (`keep()`), which keeps it
//! in `ml`, in every test binary that calls the guard and in every binary
//! that can reach a NEON kernel.
//!
//! Other targets need none of this: x86 and AArch64 tiers use per-function
//! `#[target_feature]`, so `guard()` at the start of `main` comes first.

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
