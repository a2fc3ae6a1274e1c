//! Which instruction-set extension an instruction needs, from its objdump
//! text (and, on x86, its encoding bytes). One table per architecture; only
//! extensions beyond each architecture's oldest baseline are named
//! (x86: SSE2; AArch64: ARMv8.0 + FP + ASIMD; 32-bit ARM: ARMv6 in ARM
//! state + VFPv2, the Raspberry Pi 1's ARM1176; ARMv6K, ARMv7, Thumb-2,
//! VFPv3 and its D32 register bank are extensions, which the ARMv7 target's
//! floor includes, see `isa::arm_floor`).
//!
//! x86 lines are Intel syntax (`objdump -M intel`), e.g.
//! `{vex} vpdpbusd ymm0,ymm1,ymm2`.

use crate::isa::Arch;
use serde::Serialize;

/// An instruction-set extension beyond the architecture's floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Ext {
    // x86. MMX, SSE and SSE2 are part of every x86-64 CPU and of Rust's
    // i686 floor; they matter where code must run below that floor (the
    // start-up path and the pre-main check of 32-bit builds).
    Mmx,
    Sse,
    Sse2,
    Sse3,
    Ssse3,
    Sse41,
    Sse42,
    Popcnt,
    Avx,
    Avx2,
    Fma,
    F16c,
    Bmi1,
    Bmi2,
    Lzcnt,
    Movbe,
    Cx16,
    Xsave,
    AvxVnni,
    Avx512F,
    Avx512Bw,
    Avx512Dq,
    Avx512Vl,
    Avx512Vnni,
    Aes,
    Pclmul,
    Sha,
    Adx,
    Rdrand,
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
    /// The guard's name (cpuinfo flag / HWCAP) for the CPU feature this
    /// extension needs.
    pub fn feature(self) -> &'static str {
        use Ext::*;
        match self {
            Mmx => "mmx",
            Sse => "sse",
            Sse2 => "sse2",
            Sse3 => "sse3",
            Ssse3 => "ssse3",
            Sse41 => "sse4_1",
            Sse42 => "sse4_2",
            Popcnt => "popcnt",
            Avx => "avx",
            Avx2 => "avx2",
            Fma => "fma",
            F16c => "f16c",
            Bmi1 => "bmi1",
            Bmi2 => "bmi2",
            Lzcnt => "abm",
            Movbe => "movbe",
            Cx16 => "cx16",
            Xsave => "xsave",
            AvxVnni => "avx_vnni",
            Avx512F => "avx512f",
            Avx512Bw => "avx512bw",
            Avx512Dq => "avx512dq",
            Avx512Vl => "avx512vl",
            Avx512Vnni => "avx512_vnni",
            Aes => "aes",
            Pclmul => "pclmulqdq",
            Sha => "sha_ni",
            Adx => "adx",
            Rdrand => "rdrand",
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

/// The extensions one instruction needs. `bytes` are the encoding as
/// objdump prints them (hex pairs), empty when unknown.
pub fn classify(arch: Arch, insn: &str, bytes: &str) -> Vec<Ext> {
    let mut out = match arch {
        Arch::X86_64 | Arch::X86 => x86(insn, bytes, arch == Arch::X86_64),
        Arch::Aarch64 => aarch64(insn),
        Arch::Arm => arm(insn, bytes),
    };
    out.sort();
    out.dedup();
    out
}

// ---------------------------------------------------------------- x86 ----

/// Legacy-SSE mnemonics by the extension that introduced them (their
/// VEX `v…` forms need AVX, which implies these).
const X86_MNEMONICS: &[(Ext, &[&str])] = &[
    (
        Ext::Sse3,
        &[
            "addsubps", "addsubpd", "haddps", "haddpd", "hsubps", "hsubpd", "movddup", "movshdup", "movsldup", "lddqu",
            "fisttp", "monitor", "mwait",
        ],
    ),
    (
        Ext::Ssse3,
        &[
            "pshufb",
            "pabsb",
            "pabsw",
            "pabsd",
            "psignb",
            "psignw",
            "psignd",
            "pmaddubsw",
            "phaddw",
            "phaddd",
            "phaddsw",
            "phsubw",
            "phsubd",
            "phsubsw",
            "palignr",
            "pmulhrsw",
        ],
    ),
    (
        Ext::Sse41,
        &[
            "pmulld",
            "pmuldq",
            "pblendvb",
            "blendvps",
            "blendvpd",
            "blendps",
            "blendpd",
            "pblendw",
            "ptest",
            "pminsb",
            "pminsd",
            "pminuw",
            "pminud",
            "pmaxsb",
            "pmaxsd",
            "pmaxuw",
            "pmaxud",
            "pextrb",
            "pextrd",
            "pextrq",
            "pinsrb",
            "pinsrd",
            "pinsrq",
            "extractps",
            "insertps",
            "roundps",
            "roundpd",
            "roundss",
            "roundsd",
            "dpps",
            "dppd",
            "pmovsxbw",
            "pmovsxbd",
            "pmovsxbq",
            "pmovsxwd",
            "pmovsxwq",
            "pmovsxdq",
            "pmovzxbw",
            "pmovzxbd",
            "pmovzxbq",
            "pmovzxwd",
            "pmovzxwq",
            "pmovzxdq",
            "pcmpeqq",
            "packusdw",
            "mpsadbw",
            "phminposuw",
            "movntdqa",
        ],
    ),
    (
        Ext::Sse42,
        &["pcmpgtq", "pcmpestri", "pcmpestrm", "pcmpistri", "pcmpistrm", "crc32"],
    ),
    (Ext::Popcnt, &["popcnt"]),
    (Ext::Lzcnt, &["lzcnt"]),
    // tzcnt is not here: it is encoded `rep bsf`, which CPUs without BMI1
    // execute as bsf (same result for a nonzero input, which is the only
    // case LLVM emits it for on a baseline target).
    (Ext::Bmi1, &["andn", "bextr", "blsi", "blsmsk", "blsr"]),
    (
        Ext::Bmi2,
        &["bzhi", "mulx", "pdep", "pext", "rorx", "sarx", "shlx", "shrx"],
    ),
    (Ext::Movbe, &["movbe"]),
    (Ext::Cx16, &["cmpxchg16b"]),
    (
        Ext::Xsave,
        &[
            "xgetbv",
            "xsetbv",
            "xsave",
            "xsave64",
            "xsaveopt",
            "xsaveopt64",
            "xsavec",
            "xsavec64",
            "xsaves",
            "xrstor",
            "xrstor64",
            "xrstors",
        ],
    ),
    (
        Ext::Aes,
        &[
            "aesenc",
            "aesenclast",
            "aesdec",
            "aesdeclast",
            "aesimc",
            "aeskeygenassist",
        ],
    ),
    (
        Ext::Sha,
        &[
            "sha1rnds4",
            "sha1nexte",
            "sha1msg1",
            "sha1msg2",
            "sha256rnds2",
            "sha256msg1",
            "sha256msg2",
        ],
    ),
    (Ext::Adx, &["adcx", "adox"]),
    (Ext::Rdrand, &["rdrand", "rdseed"]),
    (Ext::F16c, &["vcvtph2ps", "vcvtps2ph"]),
    // AVX2 regardless of vector width.
    (
        Ext::Avx2,
        &[
            "vpbroadcastb",
            "vpbroadcastw",
            "vpbroadcastd",
            "vpbroadcastq",
            "vbroadcasti128",
            "vperm2i128",
            "vpermd",
            "vpermq",
            "vpermps",
            "vpermpd",
            "vinserti128",
            "vextracti128",
            "vpblendd",
            "vpsllvd",
            "vpsllvq",
            "vpsrlvd",
            "vpsrlvq",
            "vpsravd",
            "vpmaskmovd",
            "vpmaskmovq",
            "vgatherdps",
            "vgatherdpd",
            "vgatherqps",
            "vgatherqpd",
            "vpgatherdd",
            "vpgatherdq",
            "vpgatherqd",
            "vpgatherqq",
        ],
    ),
    // AVX-512 only (EVEX-only mnemonics).
    (
        Ext::Avx512F,
        &[
            "vpternlogd",
            "vpternlogq",
            "vpermt2d",
            "vpermt2q",
            "vpermt2ps",
            "vpermt2pd",
            "vpermi2d",
            "vpermi2q",
            "vpermi2ps",
            "vpermi2pd",
            "vpcompressd",
            "vpcompressq",
            "vpexpandd",
            "vpexpandq",
            "vcompressps",
            "vcompresspd",
            "vexpandps",
            "vexpandpd",
            "vpmovdb",
            "vpmovdw",
            "vpmovqb",
            "vpmovqw",
            "vpmovqd",
            "vpmovsdb",
            "vpmovusdb",
            "vpmovsdw",
            "vpmovusdw",
            "vpandd",
            "vpandq",
            "vpandnd",
            "vpandnq",
            "vpord",
            "vporq",
            "vpxord",
            "vpxorq",
            "vmovdqa32",
            "vmovdqa64",
            "vmovdqu32",
            "vmovdqu64",
            "vpblendmd",
            "vpblendmq",
            "vblendmps",
            "vblendmpd",
            "vpcmpd",
            "vpcmpud",
            "vpcmpq",
            "vpcmpuq",
            "vptestmd",
            "vptestmq",
            "vptestnmd",
            "vptestnmq",
            "vpabsq",
            "vpmaxsq",
            "vpmaxuq",
            "vpminsq",
            "vpminuq",
            "vpsraq",
            "vpsravq",
            "vprold",
            "vprolq",
            "vprord",
            "vprorq",
            "vshuff32x4",
            "vshuff64x2",
            "vshufi32x4",
            "vshufi64x2",
            "valignd",
            "valignq",
            "vextractf32x4",
            "vextracti32x4",
            "vextractf64x4",
            "vextracti64x4",
            "vinsertf32x4",
            "vinserti32x4",
            "vinsertf64x4",
            "vinserti64x4",
            "vbroadcastf32x4",
            "vbroadcasti32x4",
            "vbroadcastf64x4",
            "vbroadcasti64x4",
            "vrcp14ps",
            "vrsqrt14ps",
            "vscalefps",
            "vgetexpps",
            "vgetmantps",
            "vrndscaleps",
            "vfixupimmps",
            "kmovw",
            "kandw",
            "korw",
            "kxorw",
            "knotw",
            "kortestw",
            "kunpckbw",
            "kshiftlw",
            "kshiftrw",
            "kxnorw",
            "kandnw",
        ],
    ),
    (
        Ext::Avx512Bw,
        &[
            "vmovdqu8",
            "vmovdqu16",
            "vpblendmb",
            "vpblendmw",
            "vpcmpb",
            "vpcmpub",
            "vpcmpw",
            "vpcmpuw",
            "vptestmb",
            "vptestmw",
            "vptestnmb",
            "vptestnmw",
            "vpmovb2m",
            "vpmovw2m",
            "vpmovm2b",
            "vpmovm2w",
            "vpmovwb",
            "vpmovswb",
            "vpmovuswb",
            "vpermw",
            "vpermt2w",
            "vpermi2w",
            "vpsllvw",
            "vpsrlvw",
            "vpsravw",
            "vdbpsadbw",
            "kmovd",
            "kmovq",
            "kandd",
            "kandq",
            "kord",
            "korq",
            "kxord",
            "kxorq",
            "knotd",
            "knotq",
            "kortestd",
            "kortestq",
            "kunpckdq",
            "kunpckwd",
            "kshiftld",
            "kshiftlq",
            "kshiftrd",
            "kshiftrq",
            "kaddd",
            "kaddq",
            "ktestd",
            "ktestq",
            "kxnord",
            "kxnorq",
            "kandnd",
            "kandnq",
        ],
    ),
    (
        Ext::Avx512Dq,
        &[
            "vpmullq",
            "vextractf64x2",
            "vextracti64x2",
            "vextractf32x8",
            "vextracti32x8",
            "vinsertf64x2",
            "vinserti64x2",
            "vinsertf32x8",
            "vinserti32x8",
            "vbroadcastf64x2",
            "vbroadcasti64x2",
            "vbroadcastf32x8",
            "vbroadcasti32x8",
            "vpmovd2m",
            "vpmovq2m",
            "vpmovm2d",
            "vpmovm2q",
            "vfpclassps",
            "vfpclasspd",
            "vrangeps",
            "vrangepd",
            "vreduceps",
            "vreducepd",
            "vcvtqq2ps",
            "vcvtqq2pd",
            "vcvtuqq2ps",
            "vcvtuqq2pd",
            "vcvtps2qq",
            "vcvtpd2qq",
            "kmovb",
            "kandb",
            "korb",
            "kxorb",
            "knotb",
            "kortestb",
            "kaddb",
            "kaddw",
            "ktestb",
            "ktestw",
            "kshiftlb",
            "kshiftrb",
        ],
    ),
];

/// Byte/word element ops: on EVEX (AVX-512) they need AVX512BW.
const X86_BW_ON_EVEX: &[&str] = &[
    "vpaddb",
    "vpaddw",
    "vpaddsb",
    "vpaddsw",
    "vpaddusb",
    "vpaddusw",
    "vpsubb",
    "vpsubw",
    "vpsubsb",
    "vpsubsw",
    "vpsubusb",
    "vpsubusw",
    "vpabsb",
    "vpabsw",
    "vpmaddubsw",
    "vpmaddwd",
    "vpmullw",
    "vpmulhw",
    "vpmulhuw",
    "vpmulhrsw",
    "vpacksswb",
    "vpackssdw",
    "vpackuswb",
    "vpackusdw",
    "vpunpcklbw",
    "vpunpckhbw",
    "vpunpcklwd",
    "vpunpckhwd",
    "vpshufb",
    "vpshufhw",
    "vpshuflw",
    "vpcmpeqb",
    "vpcmpeqw",
    "vpcmpgtb",
    "vpcmpgtw",
    "vpminsb",
    "vpminsw",
    "vpminub",
    "vpminuw",
    "vpmaxsb",
    "vpmaxsw",
    "vpmaxub",
    "vpmaxuw",
    "vpavgb",
    "vpavgw",
    "vpsadbw",
    "vpalignr",
    "vpmovsxbw",
    "vpmovzxbw",
    "vpbroadcastb",
    "vpbroadcastw",
    "vpsllw",
    "vpsrlw",
    "vpsraw",
    "vpslldq",
    "vpsrldq",
];
/// FP logic on EVEX needs AVX512DQ.
const X86_DQ_ON_EVEX: &[&str] = &[
    "vandps", "vandpd", "vandnps", "vandnpd", "vorps", "vorpd", "vxorps", "vxorpd",
];
/// `vp…` mnemonics that work on ymm with AVX1 alone.
const X86_AVX1_VP: &[&str] = &["vptest", "vpermilps", "vpermilpd", "vperm2f128", "vpclmulqdq"];
/// Base-ISA mnemonics that happen to start with `v` (virtualization).
const X86_NOT_SIMD_V: &[&str] = &[
    "verr", "verw", "vmcall", "vmlaunch", "vmresume", "vmxoff", "vmxon", "vmread", "vmwrite", "vmptrld", "vmptrst",
    "vmclear", "vmfunc", "vmrun", "vmload", "vmsave", "vmmcall",
];
const X86_VNNI: &[&str] = &["vpdpbusd", "vpdpbusds", "vpdpwssd", "vpdpwssds"];
const X86_PREFIXES: &[&str] = &[
    "rep", "repz", "repnz", "repe", "repne", "lock", "data16", "data32", "addr32", "addr16", "notrack", "bnd", "cs",
    "ds", "es", "ss", "fs", "gs", "rex", "rex.w", "xacquire", "xrelease",
];

#[derive(Debug, PartialEq, Eq)]
enum Encoding {
    Legacy,
    Vex,
    Evex,
}

/// VEX (c4/c5) or EVEX (62) from the encoding bytes, after legacy and REX
/// prefixes.
fn x86_encoding(bytes: &str, long_mode: bool) -> Encoding {
    let b: Vec<u8> = bytes
        .split_whitespace()
        .filter_map(|h| u8::from_str_radix(h, 16).ok())
        .collect();
    let mut i = 0;
    while i < b.len()
        && matches!(
            b[i],
            0x66 | 0x67 | 0xf2 | 0xf3 | 0xf0 | 0x2e | 0x3e | 0x26 | 0x36 | 0x64 | 0x65
        )
    {
        i += 1;
    }
    if long_mode {
        while i < b.len() && (0x40..=0x4f).contains(&b[i]) {
            i += 1;
        }
    }
    // In 32-bit mode c4/c5/62 are LES/LDS/BOUND unless ModRM.mod == 11.
    let next_is_reg = || long_mode || b.get(i + 1).is_some_and(|m| m >> 6 == 3);
    match b.get(i) {
        Some(0xc4 | 0xc5) if next_is_reg() => Encoding::Vex,
        Some(0x62) if next_is_reg() => Encoding::Evex,
        _ => Encoding::Legacy,
    }
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

fn x86(insn: &str, bytes: &str, long_mode: bool) -> Vec<Ext> {
    let insn = insn.trim().to_ascii_lowercase();
    let mut words = insn.split_whitespace();
    let mut vex_pseudo = false;
    let mut mnemonic = "";
    for w in words.by_ref() {
        if w == "{vex}" || w == "{vex3}" {
            vex_pseudo = true;
        } else if w.starts_with('{') || X86_PREFIXES.contains(&w) {
            continue;
        } else {
            mnemonic = w;
            break;
        }
    }
    let ops: String = words.collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    if mnemonic.is_empty() || mnemonic == "(bad)" {
        return out;
    }
    let enc = if vex_pseudo {
        Encoding::Vex
    } else {
        x86_encoding(bytes, long_mode)
    };
    let zmm = has_reg(&ops, |t| t.strip_prefix("zmm").and_then(is_num).is_some());
    let ymm = has_reg(&ops, |t| t.strip_prefix("ymm").and_then(is_num).is_some());
    let high_xy = has_reg(&ops, |t| {
        t.strip_prefix("xmm")
            .or_else(|| t.strip_prefix("ymm"))
            .and_then(is_num)
            .is_some_and(|n| n >= 16)
    });
    let kreg = has_reg(&ops, |t| t.strip_prefix('k').and_then(is_num).is_some_and(|n| n <= 7));
    let evex = enc == Encoding::Evex || zmm || high_xy || kreg || ops.contains("{1to");
    if evex {
        out.push(Ext::Avx512F);
        let xy = has_reg(&ops, |t| {
            t.strip_prefix("xmm")
                .or_else(|| t.strip_prefix("ymm"))
                .and_then(is_num)
                .is_some()
        });
        if !zmm && xy && !x86_evex_scalar(mnemonic) {
            out.push(Ext::Avx512Vl);
        }
        if X86_BW_ON_EVEX.contains(&mnemonic) {
            out.push(Ext::Avx512Bw);
        }
        if X86_DQ_ON_EVEX.contains(&mnemonic) {
            out.push(Ext::Avx512Dq);
        }
    }
    let simd_v = mnemonic.starts_with('v') && !X86_NOT_SIMD_V.contains(&mnemonic);
    if simd_v || enc == Encoding::Vex || ymm {
        out.push(Ext::Avx);
    }
    if ymm && mnemonic.starts_with("vp") && !X86_AVX1_VP.contains(&mnemonic) {
        out.push(Ext::Avx2);
    }
    // Broadcast from a register (not memory) is AVX2.
    if matches!(mnemonic, "vbroadcastss" | "vbroadcastsd")
        && ops
            .split_once(',')
            .is_some_and(|(_, src)| src.trim().starts_with("xmm"))
    {
        out.push(Ext::Avx2);
    }
    if mnemonic.starts_with("vfmadd")
        || mnemonic.starts_with("vfmsub")
        || mnemonic.starts_with("vfnmadd")
        || mnemonic.starts_with("vfnmsub")
    {
        out.push(Ext::Fma);
    }
    if X86_VNNI.contains(&mnemonic) {
        out.push(if enc == Encoding::Vex && !zmm {
            Ext::AvxVnni
        } else {
            Ext::Avx512Vnni
        });
        if enc != Encoding::Vex || zmm {
            out.push(Ext::Avx512F);
        }
    }
    if mnemonic.starts_with("pclmul") || mnemonic.starts_with("vpclmul") {
        out.push(Ext::Pclmul);
    }
    // pextrw with a memory destination is SSE4.1 (the register form is SSE2).
    if mnemonic == "pextrw" && ops.contains('[') {
        out.push(Ext::Sse41);
    }
    for (ext, list) in X86_MNEMONICS {
        if list.contains(&mnemonic) {
            out.push(*ext);
        }
    }
    // Every x86-64 CPU has MMX, SSE and SSE2: only 32-bit code is asked.
    if !long_mode && enc == Encoding::Legacy && !vex_pseudo {
        out.extend(x86_below_sse3(mnemonic, &ops));
    }
    out
}

/// SSE instructions without a vector register operand.
const X86_SSE_NO_XMM: &[&str] = &[
    "ldmxcsr",
    "stmxcsr",
    "sfence",
    "prefetchnta",
    "prefetcht0",
    "prefetcht1",
    "prefetcht2",
    "movntq",
    "maskmovq",
];
const X86_SSE2_NO_XMM: &[&str] = &["lfence", "mfence", "clflush", "movnti"];
/// EVEX instructions on one element (or a general register's worth) of an
/// xmm register: AVX-512F (BW/DQ for the byte/word/quad inserts and
/// extracts), never AVX512VL, which only the 128- and 256-bit *vector*
/// forms need. Their xmm16–31 operands are what makes them EVEX: on
/// Windows, whose ABI saves xmm6–15, LLVM picks xmm16+ for scalar float
/// code in AVX-512 functions (win-avx512vnni's matvec: `vmulss xmm20,…`).
fn x86_evex_scalar(mnemonic: &str) -> bool {
    let scalar_float = (mnemonic.ends_with("ss") || mnemonic.ends_with("sd"))
        && mnemonic.starts_with('v')
        && !mnemonic.starts_with("vp")
        && !mnemonic.starts_with("vbroadcast");
    scalar_float
        || matches!(
            mnemonic,
            "vmovd"
                | "vmovq"
                | "vinsertps"
                | "vextractps"
                | "vpinsrb"
                | "vpinsrw"
                | "vpinsrd"
                | "vpinsrq"
                | "vpextrb"
                | "vpextrw"
                | "vpextrd"
                | "vpextrq"
        )
}

/// SSE (1) instructions on xmm registers; every other legacy-encoded xmm
/// instruction is taken to need SSE2 or later.
const X86_SSE1_XMM: &[&str] = &[
    "movaps",
    "movups",
    "movss",
    "movhps",
    "movlps",
    "movhlps",
    "movlhps",
    "movmskps",
    "movntps",
    "addps",
    "addss",
    "subps",
    "subss",
    "mulps",
    "mulss",
    "divps",
    "divss",
    "sqrtps",
    "sqrtss",
    "rcpps",
    "rcpss",
    "rsqrtps",
    "rsqrtss",
    "maxps",
    "maxss",
    "minps",
    "minss",
    "andps",
    "andnps",
    "orps",
    "xorps",
    "cmpps",
    "cmpss",
    "comiss",
    "ucomiss",
    "shufps",
    "unpckhps",
    "unpcklps",
    "cvtsi2ss",
    "cvtss2si",
    "cvttss2si",
    "cvtpi2ps",
    "cvtps2pi",
    "cvttps2pi",
];

/// What a legacy-encoded instruction needs of MMX, SSE and SSE2, which the
/// later extensions' tables take for granted: any use of an mm or xmm
/// register, and the few SSE/SSE2 instructions that have none.
fn x86_below_sse3(mnemonic: &str, ops: &str) -> Vec<Ext> {
    let xmm = has_reg(ops, |t| t.strip_prefix("xmm").and_then(is_num).is_some());
    let mm = has_reg(ops, |t| t.strip_prefix("mm").and_then(is_num).is_some());
    let mut out = Vec::new();
    if xmm {
        out.push(if X86_SSE1_XMM.contains(&mnemonic) {
            Ext::Sse
        } else {
            Ext::Sse2
        });
    }
    if mm || mnemonic == "emms" {
        out.push(Ext::Mmx);
    }
    if X86_SSE_NO_XMM.contains(&mnemonic) {
        out.push(Ext::Sse);
    }
    if X86_SSE2_NO_XMM.contains(&mnemonic) {
        out.push(Ext::Sse2);
    }
    out
}

// ------------------------------------------------------------ AArch64 ----

const A64_SVE_ONLY: &[&str] = &[
    "ptrue", "ptrues", "pfalse", "whilelo", "whilelt", "whilele", "whilels", "whilege", "whilegt", "whilehi",
    "whilehs", "cntb", "cnth", "cntw", "cntd", "cntp", "incb", "inch", "incw", "incd", "decb", "dech", "decw", "decd",
    "addvl", "addpl", "rdvl", "setffr", "rdffr", "wrffr", "pnext", "pfirst", "sqincb", "sqincw", "uqincb", "uqincw",
    "sqdecb", "uqdecw",
];
const A64_LSE_PREFIXES: &[&str] = &[
    "cas", "ldadd", "ldclr", "ldeor", "ldset", "ldsmax", "ldsmin", "ldumax", "ldumin", "swp", "stadd", "stclr",
    "steor", "stset", "stsmax", "stsmin", "stumax", "stumin",
];
const A64_CRYPTO: &[&str] = &[
    "aese",
    "aesd",
    "aesmc",
    "aesimc",
    "sha1c",
    "sha1h",
    "sha1m",
    "sha1p",
    "sha1su0",
    "sha1su1",
    "sha256h",
    "sha256h2",
    "sha256su0",
    "sha256su1",
    "sha512h",
    "sha512h2",
    "sha512su0",
    "sha512su1",
    "eor3",
    "bcax",
    "rax1",
    "xar",
    "sm3ss1",
    "sm4e",
];
/// FP instructions that are ARMv8.0 even with half-precision operands.
const A64_FP16_BASE: &[&str] = &["fcvt", "fcvtl", "fcvtl2", "fcvtn", "fcvtn2"];

fn aarch64(insn: &str) -> Vec<Ext> {
    let insn = insn.trim().to_ascii_lowercase();
    let (mnemonic, ops) = insn.split_once(char::is_whitespace).unwrap_or((insn.as_str(), ""));
    let ops = ops.trim();
    let mut out = Vec::new();
    let zreg = has_reg(ops, |t| t.strip_prefix('z').and_then(is_num).is_some_and(|n| n <= 31));
    let preg = ops.split([',', ' ', '{', '}']).any(|t| {
        t.strip_prefix('p').is_some_and(|r| {
            r.split(['.', '/']).next().and_then(is_num).is_some_and(|n| n <= 15) && (r.contains('.') || r.contains('/'))
        })
    });
    if zreg || preg || A64_SVE_ONLY.contains(&mnemonic) {
        out.push(Ext::Sve);
    }
    match mnemonic {
        "sdot" | "udot" if !zreg => out.push(Ext::Dotprod),
        "usdot" | "sudot" | "smmla" | "ummla" | "usmmla" => out.push(Ext::I8mm),
        "sqrdmlah" | "sqrdmlsh" => out.push(Ext::Rdm),
        "bfcvt" | "bfcvtn" | "bfcvtn2" | "bfdot" | "bfmmla" | "bfmlalb" | "bfmlalt" => out.push(Ext::Bf16),
        m if m.starts_with("crc32") => out.push(Ext::Crc),
        m if m.starts_with("ldapr") || m.starts_with("ldapur") => out.push(Ext::Rcpc),
        m if A64_LSE_PREFIXES.iter().any(|p| m.starts_with(p)) => out.push(Ext::Lse),
        m if A64_CRYPTO.contains(&m) => out.push(Ext::Crypto),
        "pmull" | "pmull2" if ops.contains(".1q") => out.push(Ext::Crypto),
        _ => {}
    }
    // Half-precision arithmetic (FEAT_FP16): h registers or .4h/.8h float vectors.
    if mnemonic.starts_with('f') && !A64_FP16_BASE.contains(&mnemonic) && !zreg {
        let half = has_reg(ops, |t| t.strip_prefix('h').and_then(is_num).is_some())
            || ops.contains(".4h")
            || ops.contains(".8h")
            || ops.contains(".h[");
        if half {
            out.push(Ext::Fp16);
        }
    }
    out
}

// -------------------------------------------------------------- ARMv7 ----

/// NEON mnemonics (before any `.type` suffix) that VFP does not have.
const ARM_NEON_ONLY: &[&str] = &[
    "vand", "vorr", "vorn", "veor", "vbic", "vbsl", "vbit", "vbif", "vext", "vtbl", "vtbx", "vzip", "vuzp", "vtrn",
    "vswp", "vrev16", "vrev32", "vrev64", "vpadd", "vpaddl", "vpadal", "vpmax", "vpmin", "vmull", "vmlal", "vmlsl",
    "vqdmull", "vqdmlal", "vqdmlsl", "vqmovn", "vqmovun", "vmovn", "vmovl", "vshrn", "vrshrn", "vqshrn", "vqrshrn",
    "vqshrun", "vqrshrun", "vshll", "vaddl", "vaddw", "vsubl", "vsubw", "vaddhn", "vsubhn", "vraddhn", "vrsubhn",
    "vabal", "vabdl", "vcnt", "vcls", "vclz", "vrecpe", "vrsqrte", "vrecps", "vrsqrts", "vdup", "vtst", "vceq", "vcge",
    "vcgt", "vcle", "vclt", "vhadd", "vrhadd", "vqadd", "vqsub", "vhsub", "vsra", "vrsra", "vsri", "vsli", "vqshl",
    "vqshlu", "vqrshl", "vrshl", "vshl", "vshr", "vrshr", "vmvn", "vabd", "vaba", "vmax", "vmin", "vqdmulh",
    "vqrdmulh", "vqabs", "vqneg", "vacge", "vacgt", "vacle", "vaclt", "vpmaxnm",
];

/// ARMv7 (and v6T2) instructions ARMv6 lacks, by mnemonic before any
/// condition or `.w` suffix. (`udf` is not here: LLVM's trap is the
/// permanently undefined `0xe7ffdefe`, which every architecture faults on,
/// on purpose.)
const ARM_V7_ONLY: &[&str] = &[
    "movw", "movt", "bfi", "bfc", "sbfx", "ubfx", "rbit", "mls", "dmb", "dsb", "isb", "pli", "pldw", "strht", "ldrht",
    "ldrsht", "ldrsbt",
];
/// ARMv6K additions to ARMv6 (ARM1176 has them, ARM1136 does not).
const ARM_V6K_ONLY: &[&str] = &[
    "ldrexb", "ldrexh", "ldrexd", "strexb", "strexh", "strexd", "clrex", "yield", "wfe", "wfi", "sev",
];
/// Thumb instructions that exist only in Thumb-2 even in their 16-bit forms.
const THUMB2_ONLY: &[&str] = &[
    "it", "ite", "itt", "itee", "itet", "itte", "ittt", "cbz", "cbnz", "tbb", "tbh",
];

/// The mnemonic without a condition code or `.w`/`.n` width suffix.
fn arm_base_mnemonic(m: &str) -> &str {
    const CONDS: &[&str] = &[
        "eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al",
    ];
    let m = m.trim_end_matches(".w").trim_end_matches(".n");
    let all = ARM_V7_ONLY.iter().chain(ARM_V6K_ONLY).chain(THUMB2_ONLY);
    if all.clone().any(|k| *k == m) {
        return m;
    }
    for c in CONDS {
        if let Some(stem) = m.strip_suffix(c) {
            if all.clone().any(|k| *k == stem) {
                return stem;
            }
        }
    }
    m
}

fn arm(insn: &str, bytes: &str) -> Vec<Ext> {
    let insn = insn.trim().to_ascii_lowercase();
    let (mnemonic, ops) = insn.split_once(char::is_whitespace).unwrap_or((insn.as_str(), ""));
    let ops = ops.split(';').next().unwrap_or("").trim();
    let mut parts = mnemonic.split('.');
    let base = parts.next().unwrap_or("");
    let types: Vec<&str> = parts.collect();
    let mut out = Vec::new();
    let qreg = has_reg(ops, |t| t.strip_prefix('q').and_then(is_num).is_some_and(|n| n <= 15));
    let dreg = has_reg(ops, |t| t.strip_prefix('d').and_then(is_num).is_some());
    let dhigh = has_reg(ops, |t| {
        t.strip_prefix('d')
            .and_then(is_num)
            .is_some_and(|n| (16..=31).contains(&n))
    });
    let sreg = has_reg(ops, |t| t.strip_prefix('s').and_then(is_num).is_some_and(|n| n <= 31));
    let core = has_reg(ops, |t| {
        t.strip_prefix('r').and_then(is_num).is_some_and(|n| n <= 15)
            || matches!(t, "sp" | "lr" | "pc" | "ip" | "fp" | "sl" | "sb")
    });
    let is_v = base.starts_with('v');
    let int_type = types.iter().any(|t| {
        matches!(t.chars().next(), Some('i' | 's' | 'u' | 'p'))
            && t[1..].chars().all(|c| c.is_ascii_digit())
            && t.len() > 1
    });
    let neon = qreg
        || (is_v
            && (base.starts_with("vld1")
                || base.starts_with("vld2")
                || base.starts_with("vld3")
                || base.starts_with("vld4")))
        || (is_v
            && (base.starts_with("vst1")
                || base.starts_with("vst2")
                || base.starts_with("vst3")
                || base.starts_with("vst4")))
        || (is_v && ARM_NEON_ONLY.contains(&base))
        || (is_v && int_type && !sreg && !(base == "vmov" && core && types.iter().all(|t| *t == "32")) && dreg)
        || (is_v && types.contains(&"f32") && dreg && !sreg && !core)
        || (base == "vmov" && types.is_empty() && dreg && !core && !sreg);
    if neon {
        out.push(Ext::Neon);
    }
    if dhigh {
        out.push(Ext::D32);
    }
    if matches!(base, "vfma" | "vfms" | "vfnma" | "vfnms" | "vcvtb" | "vcvtt") {
        out.push(Ext::Vfp4);
    }
    if matches!(base, "sdiv" | "udiv") {
        out.push(Ext::Idiv);
    }
    // objdump prints a 32-bit Thumb instruction as two halfwords
    // (`f8d0 3004`) and an ARM one as one word (`e5903004`). ARMv6 has
    // 16-bit Thumb plus the BL/BLX pair only.
    let halfwords: Vec<&str> = bytes.split_whitespace().collect();
    let thumb32 = halfwords.len() == 2 && halfwords.iter().all(|h| h.len() == 4);
    let stem = arm_base_mnemonic(base);
    if (thumb32 && !matches!(base, "bl" | "blx")) || THUMB2_ONLY.contains(&stem) || base.ends_with(".w") {
        out.push(Ext::Thumb2);
    }
    if ARM_V7_ONLY.contains(&stem) {
        out.push(Ext::V7);
    }
    // The user read-only thread register (TPIDRURO), which musl built for
    // an ARMv6K CPU reads directly instead of through the kernel helper.
    if ARM_V6K_ONLY.contains(&stem) || (stem.starts_with("mrc") && ops.replace(' ', "").ends_with("cr13,cr0,{3}")) {
        out.push(Ext::V6k);
    }
    // VFPv3: an immediate operand to vmov (`vmov.f64 d0, #1.0`) and the
    // fixed-point vcvt (`vcvt.s32.f32 s0, s0, #16`).
    let imm = ops.contains('#');
    if !neon && is_v && imm && (base == "vmov" || base == "vcvt") && (sreg || dreg) {
        out.push(Ext::Vfp3);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use Ext::*;

    fn x(insn: &str) -> Vec<Ext> {
        classify(Arch::X86_64, insn, "")
    }

    #[test]
    fn x86_baseline_is_clean() {
        for i in [
            "mov    rax,QWORD PTR [rdi+0x8]",
            "paddd  xmm0,xmm1",
            "pmaddwd xmm0,xmm1",
            "cvttps2dq xmm0,xmm0",
            "punpcklbw xmm0,xmm0",
            "psraw  xmm0,0x8",
            "pextrw eax,xmm0,0x3",
            "rep stos QWORD PTR es:[rdi],rax",
            "lock cmpxchg QWORD PTR [rdi],rcx",
            "cpuid",
            "movaps XMMWORD PTR [rsp+0x10],xmm6",
        ] {
            assert_eq!(x(i), vec![], "{i}");
        }
    }

    #[test]
    fn i686_code_is_asked_for_mmx_sse_and_sse2() {
        let x32 = |i: &str| classify(Arch::X86, i, "");
        for i in [
            "mov    eax,DWORD PTR [esp+0x8]",
            "cpuid",
            "cmovne eax,edx",
            "fld    QWORD PTR [esp]",
            "rep stos DWORD PTR es:[edi],eax",
            "pause",
        ] {
            assert_eq!(x32(i), vec![], "{i}");
        }
        assert_eq!(x32("movq   xmm0,QWORD PTR [esi+0x1c54]"), vec![Sse2]);
        assert_eq!(x32("paddd  xmm0,xmm1"), vec![Sse2]);
        assert_eq!(x32("movsd  xmm0,QWORD PTR [eax]"), vec![Sse2]);
        assert_eq!(x32("xorps  xmm0,xmm0"), vec![Sse]);
        assert_eq!(x32("movups XMMWORD PTR [eax],xmm0"), vec![Sse]);
        assert_eq!(x32("ldmxcsr DWORD PTR [esp]"), vec![Sse]);
        assert_eq!(x32("mfence"), vec![Sse2]);
        assert_eq!(x32("paddb  mm0,mm1"), vec![Mmx]);
        assert_eq!(x32("emms"), vec![Mmx]);
        assert_eq!(x32("pshufb xmm0,xmm1"), vec![Sse2, Ssse3]);
        // VEX forms need AVX, which implies the rest.
        assert_eq!(classify(Arch::X86, "vpaddd xmm0,xmm1,xmm2", "c5 f1 fe c2"), vec![Avx]);
        // The same instructions in 64-bit code are baseline.
        assert_eq!(x("movq   xmm0,QWORD PTR [rsi+0x1c54]"), vec![]);
        let c = closure(&["sse2".to_string()]);
        assert!(c.iter().any(|f| f == "sse") && c.iter().any(|f| f == "mmx"), "{c:?}");
    }

    #[test]
    fn x86_extensions_by_mnemonic_and_register() {
        assert_eq!(x("pshufb xmm0,xmm1"), vec![Ssse3]);
        assert_eq!(x("pmaddubsw xmm0,xmm1"), vec![Ssse3]);
        assert_eq!(x("pmulld xmm0,xmm1"), vec![Sse41]);
        assert_eq!(x("ptest  xmm0,xmm0"), vec![Sse41]);
        assert_eq!(x("pextrd eax,xmm0,0x1"), vec![Sse41]);
        assert_eq!(x("roundps xmm0,xmm1,0x1"), vec![Sse41]);
        assert_eq!(x("vaddps xmm0,xmm1,xmm2"), vec![Avx]);
        assert_eq!(x("vaddps ymm0,ymm1,ymm2"), vec![Avx]);
        assert_eq!(x("vpaddd ymm0,ymm1,ymm2"), vec![Avx, Avx2]);
        assert_eq!(x("vptest ymm0,ymm0"), vec![Avx]);
        assert_eq!(x("vpbroadcastd xmm0,xmm1"), vec![Avx, Avx2]);
        assert_eq!(x("vfmadd231ps ymm0,ymm1,ymm2"), vec![Avx, Fma]);
        assert_eq!(x("{vex} vpdpbusd ymm0,ymm1,ymm2"), vec![Avx, Avx2, AvxVnni]);
        assert_eq!(x("vpdpbusd zmm0,zmm1,zmm2"), vec![Avx, Avx512F, Avx512Vnni]);
        assert_eq!(x("vbroadcastss ymm0,xmm1"), vec![Avx, Avx2]);
        assert_eq!(x("vbroadcastss ymm0,DWORD PTR [rdi]"), vec![Avx]);
        assert_eq!(x("vpaddd zmm0{k1}{z},zmm1,zmm2"), vec![Avx, Avx512F]);
        assert_eq!(x("vpaddb zmm0,zmm1,zmm2"), vec![Avx, Avx512F, Avx512Bw]);
        assert_eq!(x("kmovq  k1,rax"), vec![Avx512F, Avx512Bw]);
        assert_eq!(x("vmovdqu64 ymm17,YMMWORD PTR [rdi]"), vec![Avx, Avx512F, Avx512Vl]);
        // Scalar EVEX forms on xmm16+ are AVX-512F, not VL.
        assert_eq!(x("vmulss xmm20,xmm8,DWORD PTR [r14+r10*4]"), vec![Avx, Avx512F]);
        assert_eq!(x("vfmadd132ss xmm16,xmm1,xmm2"), vec![Avx, Fma, Avx512F]);
        assert_eq!(x("vmovsd xmm17,QWORD PTR [rax]"), vec![Avx, Avx512F]);
        assert_eq!(x("vmovq  xmm16,rax"), vec![Avx, Avx512F]);
        // Their packed and broadcast twins still need VL.
        assert_eq!(x("vmulps xmm20,xmm8,xmm9"), vec![Avx, Avx512F, Avx512Vl]);
        assert_eq!(x("vbroadcastsd ymm17,xmm1"), vec![Avx, Avx2, Avx512F, Avx512Vl]);
        assert_eq!(x("vpabsd xmm17,xmm1"), vec![Avx, Avx512F, Avx512Vl]);
        assert_eq!(x("popcnt eax,ecx"), vec![Popcnt]);
        assert_eq!(x("tzcnt  eax,ecx"), vec![]);
        assert_eq!(x("andn   eax,ecx,edx"), vec![Bmi1]);
        assert_eq!(x("shlx   rax,rcx,rdx"), vec![Bmi2]);
        assert_eq!(x("xgetbv"), vec![Xsave]);
        assert_eq!(x("vzeroupper"), vec![Avx]);
        assert_eq!(x("crc32  eax,cl"), vec![Sse42]);
    }

    #[test]
    fn x86_encoding_bytes_decide_vex_and_evex() {
        // vpdpbusd xmm (VEX, AVX-VNNI) vs (EVEX, AVX512-VNNI + VL) with the
        // same text when objdump prints no {vex}.
        assert_eq!(
            classify(Arch::X86_64, "vpdpbusd xmm0,xmm1,xmm2", "c4 e2 71 50 c2"),
            vec![Avx, AvxVnni]
        );
        assert_eq!(
            classify(Arch::X86_64, "vpdpbusd xmm0,xmm1,xmm2", "62 f2 75 08 50 c2"),
            vec![Avx, Avx512F, Avx512Vl, Avx512Vnni]
        );
        // 32-bit: c5 with a memory ModRM is LDS, not VEX.
        assert_eq!(x86_encoding("c5 06", false), Encoding::Legacy);
        assert_eq!(x86_encoding("66 0f 38 00 c1", true), Encoding::Legacy);
        assert_eq!(x86_encoding("c5 f8 77", true), Encoding::Vex);
    }

    #[test]
    fn aarch64_extensions() {
        let a = |i: &str| classify(Arch::Aarch64, i, "");
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
        let r = |i: &str| classify(Arch::Arm, i, "");
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
        let r = |i: &str| classify(Arch::Arm, i, "");
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
        assert_eq!(classify(Arch::Arm, "ldr.w\tr3, [r0, #4]", "f8d0 3004"), vec![Thumb2]);
        assert_eq!(classify(Arch::Arm, "push.w\t{r4, r5, lr}", "e92d 4030"), vec![Thumb2]);
        assert_eq!(classify(Arch::Arm, "bl\t1000", "f000 f800"), vec![]);
        assert_eq!(classify(Arch::Arm, "push\t{r4, lr}", "b510"), vec![]);
        assert_eq!(classify(Arch::Arm, "ldr\tr3, [r0, #4]", "e5903004"), vec![]);
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
