//! The host's features and vendor by CPUID, and XCR0 for the register state the OS saves.

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
    // SAFETY: the caller has seen OSXSAVE, so XGETBV is enabled, and XCR0
    // (index 0) exists wherever it is.
    unsafe { _xgetbv(0) }
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
