//! Which CPU features an instruction needs beyond its architecture's oldest
//! baseline, by the guard's names for them (cpuinfo flags / HWCAPs).
//!
//! - **x86** (`x86.rs`): the encoding is decoded by iced-x86, whose
//!   per-instruction CPUID feature list is the source; the ELF or PE file is
//!   read with `object`, no objdump. Only an explicit list of features counts
//!   as baseline; any other, known or not, is named and so a finding.
//! - **AArch64** (`aarch64.rs`, beyond ARMv8.0 + FP + ASIMD) and **32-bit
//!   ARM** (`arm.rs`, beyond ARMv6 in ARM state + VFPv2, the Raspberry Pi 1's
//!   ARM1176; ARMv6K, ARMv7, Thumb-2, VFPv3 and its D32 register bank are
//!   extensions, which the ARMv7 target's floor includes, see
//!   `isa::arm_floor`): tables over objdump's text, since no maintained Rust
//!   decoder covers SVE or ARMv7 NEON (yaxpeax-arm 0.5 has neither).

mod aarch64;
mod arm;
pub mod x86;

use crate::isa::Arch;
use serde::Serialize;
use std::borrow::Cow;

/// An ARM or AArch64 extension beyond the architecture's floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Ext {
    // AArch64
    Lse,
    Rcpc,
    Crc,
    Crypto,
    Fp16,
    Rdm,
    Dotprod,
    I8mm,
    Bf16,
    Sve,
    // 32-bit ARM beyond ARMv6 + VFPv2
    V6k,
    V7,
    Thumb2,
    Vfp3,
    Neon,
    D32,
    Vfp4,
    Idiv,
}

impl Ext {
    /// The guard's name (HWCAP) for the CPU feature this extension needs.
    pub fn feature(self) -> &'static str {
        use Ext::*;
        match self {
            Lse => "atomics",
            Rcpc => "lrcpc",
            Crc => "crc32",
            Crypto => "aes",
            Fp16 => "fphp",
            Rdm => "asimdrdm",
            Dotprod => "asimddp",
            I8mm => "i8mm",
            Bf16 => "bf16",
            Sve => "sve",
            V6k => "v6k",
            V7 => "v7",
            Thumb2 => "thumb2",
            Vfp3 => "vfpv3",
            Neon => "neon",
            D32 => "vfpd32",
            Vfp4 => "vfpv4",
            Idiv => "idiva",
        }
    }
}

/// Features that come with another one on every CPU (and that LLVM lets a
/// `#[target_feature]` function use once the other is enabled).
const IMPLIES: &[(&str, &[&str])] = &[
    ("sse2", &["sse", "mmx"]),
    ("sse", &["mmx"]),
    ("sse3", &["sse2"]),
    ("ssse3", &["sse3"]),
    ("sse4_1", &["ssse3"]),
    ("sse4_2", &["sse4_1"]),
    ("avx", &["sse4_2"]),
    ("fma", &["avx"]),
    ("f16c", &["avx"]),
    ("avx2", &["avx"]),
    ("avx_vnni", &["avx2"]),
    ("avx512f", &["avx2", "fma", "f16c"]),
    ("avx512bw", &["avx512f"]),
    ("avx512dq", &["avx512f"]),
    ("avx512vl", &["avx512f"]),
    ("avx512cd", &["avx512f"]),
    ("avx512_vnni", &["avx512f"]),
    ("asimddp", &["asimd"]),
    ("sve", &["asimd", "fphp"]),
    ("neon", &["vfpd32", "v7"]),
    ("vfpv4", &["vfpv3"]),
    ("vfpd32", &["vfpv3"]),
    ("vfpv3", &["vfp"]),
    ("v7", &["v6k"]),
    ("v6k", &["v6"]),
];

/// `features` plus everything they imply.
pub fn closure(features: &[String]) -> Vec<String> {
    let mut out: Vec<String> = features.to_vec();
    let mut i = 0;
    while i < out.len() {
        let f = out[i].clone();
        if let Some((_, more)) = IMPLIES.iter().find(|(k, _)| *k == f) {
            for m in *more {
                if !out.iter().any(|o| o == m) {
                    out.push(m.to_string());
                }
            }
        }
        i += 1;
    }
    out
}

/// The features one instruction needs (guard names), sorted. On x86 they
/// come from the encoding (`bytes`: hex pairs as objdump prints them; the
/// text is for people only); on ARM from objdump's text (and, for Thumb,
/// the encoding's width).
pub fn classify(arch: Arch, insn: &str, bytes: &str) -> Vec<Cow<'static, str>> {
    let mut out: Vec<Cow<'static, str>> = match arch {
        Arch::X86_64 | Arch::X86 => x86::classify_hex(bytes, arch == Arch::X86_64),
        Arch::Aarch64 | Arch::Arm => classify_ext(arch, insn, bytes)
            .into_iter()
            .map(|e| Cow::Borrowed(e.feature()))
            .collect(),
    };
    out.sort();
    out.dedup();
    out
}

/// The ARM/AArch64 extensions of one instruction (none for x86, whose
/// features are not an `Ext`).
pub fn classify_ext(arch: Arch, insn: &str, bytes: &str) -> Vec<Ext> {
    let mut out = match arch {
        Arch::X86_64 | Arch::X86 => Vec::new(),
        Arch::Aarch64 => aarch64::classify(insn),
        Arch::Arm => arm::classify(insn, bytes),
    };
    out.sort();
    out.dedup();
    out
}

fn has_reg(ops: &str, pred: impl Fn(&str) -> bool) -> bool {
    ops.split(|c: char| !c.is_ascii_alphanumeric()).any(pred)
}

fn is_num(s: &str) -> Option<u32> {
    if s.is_empty() || !s.chars().all(|c| c.is_ascii_digit()) {
        None
    } else {
        s.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Ext::*;

    #[test]
    fn classify_names_guard_features_sorted() {
        // x86 from the encoding, whatever the text says.
        assert_eq!(classify(Arch::X86_64, "(anything)", "c4 e2 7d 50 c2"), ["avx_vnni"]);
        assert_eq!(classify(Arch::Aarch64, "sdot\tz0.s, z1.b, z2.b", ""), ["sve"]);
        assert_eq!(classify(Arch::Arm, "veor\td16, d16, d16", ""), ["neon", "vfpd32"]);
    }

    /// Addresses and symbols are not registers: a branch to 0xd0024 once
    /// read as d24 (vfpd32) in an ARMv6 build's clap code.
    #[test]
    fn arm_addresses_and_symbols_are_not_registers() {
        let r = |i: &str| classify_ext(Arch::Arm, i, "");
        assert_eq!(r("bcs\td0024 <_ZN4clap3foo17h0123E+0x40>"), vec![]);
        assert_eq!(r("bl\td16a0 <d16_table>"), vec![]);
        assert_eq!(r("bxeq\tlr"), vec![]);
        assert_eq!(r("ldr\tr3, [pc, #16]\t@ d0024 <d20+0x4>"), vec![]);
        assert_eq!(r("vldr\td17, [pc, #8]\t@ d0030 <x>"), vec![D32]);
        assert_eq!(r("vmov.f64\td16, d0\t; d0028"), vec![D32]);
        // A Thumb-2 compare-and-branch still needs Thumb-2, by its mnemonic.
        assert_eq!(r("cbz\tr0, d0024 <f>"), vec![Thumb2]);
    }

    #[test]
    fn aarch64_extensions() {
        let a = |i: &str| classify_ext(Arch::Aarch64, i, "");
        assert_eq!(a("add\tx0, x1, x2"), vec![]);
        assert_eq!(a("smull\tv0.8h, v1.8b, v2.8b"), vec![]);
        assert_eq!(a("sadalp\tv0.4s, v1.8h"), vec![]);
        assert_eq!(a("fcvt\th0, s0"), vec![]);
        assert_eq!(a("ldaxr\tw0, [x1]"), vec![]);
        assert_eq!(a("sdot\tv0.4s, v1.16b, v2.16b"), vec![Dotprod]);
        assert_eq!(a("sdot\tz0.s, z1.b, z2.b"), vec![Sve]);
        assert_eq!(a("ld1b\t{z0.b}, p0/z, [x0]"), vec![Sve]);
        assert_eq!(a("whilelo\tp0.s, x8, x9"), vec![Sve]);
        assert_eq!(a("rdvl\tx0, #1"), vec![Sve]);
        assert_eq!(a("ldaddal\tw0, w1, [x2]"), vec![Lse]);
        assert_eq!(a("casal\tx0, x1, [x2]"), vec![Lse]);
        assert_eq!(a("fadd\th0, h1, h2"), vec![Fp16]);
        assert_eq!(a("crc32cx\tw0, w0, x1"), vec![Crc]);
    }

    #[test]
    fn armv7_extensions() {
        let r = |i: &str| classify_ext(Arch::Arm, i, "");
        for vfp in [
            "vadd.f32\ts0, s1, s2",
            "vadd.f64\td0, d1, d2",
            "vldr\td0, [r0]",
            "vcvt.s32.f64\ts0, d0",
            "vcvt.f64.s32\td0, s0",
            "vmov.32\tr0, d0[1]",
            "vmov\td0, r0, r1",
            "vmov.f64\td0, d1",
            "vpush\t{d8-d15}",
            "vmrs\tAPSR_nzcv, fpscr",
            "add\tr0, r1, r2",
        ] {
            assert_eq!(r(vfp), vec![], "{vfp}");
        }
        assert_eq!(r("vadd.i32\tq0, q1, q2"), vec![Neon]);
        assert_eq!(r("vmull.s8\tq0, d0, d1"), vec![Neon]);
        assert_eq!(r("vld1.8\t{d0-d1}, [r0]"), vec![Neon]);
        assert_eq!(r("vadd.f32\td0, d1, d2"), vec![Neon]);
        assert_eq!(r("vdup.32\td0, r0"), vec![Neon]);
        assert_eq!(r("veor\td16, d16, d16"), vec![Neon, D32]);
        assert_eq!(r("vmov.i32\td0, #0"), vec![Neon]);
        assert_eq!(r("vfma.f32\ts0, s1, s2"), vec![Vfp4]);
        assert_eq!(r("sdiv\tr0, r1, r2"), vec![Idiv]);
    }

    #[test]
    fn armv6_floor_and_what_lies_beyond_it() {
        let r = |i: &str| classify_ext(Arch::Arm, i, "");
        // ARMv6 + VFPv2, what an ARM1176 runs.
        for v6 in [
            "ldrex\tr3, [r0]",
            "strex\tr2, r1, [r0]",
            "rev\tr0, r0",
            "uxtb\tr0, r1",
            "sxth\tr2, r3",
            "smlad\tr0, r1, r2, r3",
            "usat\tr0, #8, r1",
            "mcr\t15, 0, r0, cr7, cr10, {5}",
            "pld\t[r0, #64]",
            "ldrd\tr0, [r2]",
            "udf\t#65006",
            "vmov.f32\ts0, s1",
            "vcvt.s32.f32\ts0, s0",
            "vldmia\tr0, {d0-d7}",
            "movne\tr0, #1",
        ] {
            assert_eq!(r(v6), vec![], "{v6}");
        }
        assert_eq!(r("movw\tr0, #4660"), vec![V7]);
        assert_eq!(r("movtne\tr0, #4660"), vec![V7]);
        assert_eq!(r("dmb\tish"), vec![V7]);
        assert_eq!(r("ubfx\tr0, r1, #4, #4"), vec![V7]);
        assert_eq!(r("mls\tr0, r1, r2, r3"), vec![V7]);
        assert_eq!(r("ldrexd\tr0, r1, [r2]"), vec![V6k]);
        assert_eq!(r("clrex"), vec![V6k]);
        assert_eq!(r("mrc\t15, 0, r1, cr13, cr0, {3}"), vec![V6k]);
        assert_eq!(r("mrc\t15, 0, r0, cr1, cr0, {0}"), vec![]);
        assert_eq!(r("vmov.f64\td0, #1.000000e+00"), vec![Vfp3]);
        assert_eq!(r("vcvt.s32.f32\ts0, s0, #16"), vec![Vfp3]);
        assert_eq!(r("vmov.i32\td0, #0"), vec![Neon]);
        // Thumb-2: 32-bit encodings other than BL/BLX, IT blocks, CBZ.
        assert_eq!(
            classify_ext(Arch::Arm, "ldr.w\tr3, [r0, #4]", "f8d0 3004"),
            vec![Thumb2]
        );
        assert_eq!(
            classify_ext(Arch::Arm, "push.w\t{r4, r5, lr}", "e92d 4030"),
            vec![Thumb2]
        );
        assert_eq!(classify_ext(Arch::Arm, "bl\t1000", "f000 f800"), vec![]);
        assert_eq!(classify_ext(Arch::Arm, "push\t{r4, lr}", "b510"), vec![]);
        assert_eq!(classify_ext(Arch::Arm, "ldr\tr3, [r0, #4]", "e5903004"), vec![]);
        assert_eq!(r("it\teq"), vec![Thumb2]);
        assert_eq!(r("cbz\tr0, 1000"), vec![Thumb2]);
        // The ARMv7 target's floor covers all of it; ARMv6's none.
        let v7 = closure(&["v7".into(), "thumb2".into(), "vfpv3".into(), "vfpd32".into()]);
        for f in ["v6", "v6k", "v7", "thumb2", "vfp", "vfpv3", "vfpd32"] {
            assert!(v7.iter().any(|x| x == f), "{f} in {v7:?}");
        }
        let v6 = closure(&["v6".into(), "v6k".into(), "vfp".into()]);
        assert!(!v6.iter().any(|x| x == "v7" || x == "thumb2" || x == "vfpv3"), "{v6:?}");
    }

    #[test]
    fn closure_follows_implications() {
        let c = closure(&["avx512_vnni".to_string()]);
        for f in ["avx512f", "avx2", "avx", "sse4_1", "ssse3", "fma"] {
            assert!(c.iter().any(|x| x == f), "{f} in {c:?}");
        }
        assert!(!c.iter().any(|x| x == "avx_vnni"));
        assert!(!c.iter().any(|x| x == "avx512bw"));
    }
}
