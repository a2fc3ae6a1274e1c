//! Under Miri there is no CPU to ask: CPUID and getauxval are beyond what it
//! interprets. The machine Miri emulates has exactly the target features the
//! build was compiled with (`-C target-feature`), so those are reported.

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
