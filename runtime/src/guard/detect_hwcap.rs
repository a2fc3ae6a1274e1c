//! The host's features on Linux ARM, by the kernel's HWCAP bits (getauxval).

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
