//! AArch64: the extension an instruction needs beyond ARMv8.0 + FP + ASIMD,
//! from objdump's text. (No maintained Rust decoder covers SVE:
//! yaxpeax-arm 0.5 returns `IncompleteDecoder` for the whole SVE encoding
//! space, so the text of binutils' objdump, which knows SVE, stays the
//! source here.)

use super::{has_reg, is_num, Ext};

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

pub(super) fn classify(insn: &str) -> Vec<Ext> {
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
