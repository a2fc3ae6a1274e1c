//! 32-bit ARM: the extension an instruction needs beyond ARMv6 (ARM state)
//! and VFPv2, from objdump's text and encoding. (yaxpeax-arm 0.5 does not
//! decode ARMv7 NEON, so objdump stays the source here.)

use super::{has_reg, is_num, Ext};

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

/// Condition codes, as a mnemonic's suffix.
const CONDS: &[&str] = &[
    "eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al",
];

/// Branches, whose operand objdump prints as a bare hex address (`bcs
/// d0024 <f+0x10>`): never a register, though it may read as one (d0024).
const BRANCHES: &[&str] = &["b", "bl", "blx", "bx", "cbz", "cbnz"];

/// The mnemonic without a condition code or `.w`/`.n` width suffix.
fn arm_base_mnemonic(m: &str) -> &str {
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

/// A branch mnemonic, with or without a condition code or width suffix.
fn is_branch(base: &str) -> bool {
    let m = base.trim_end_matches(".w").trim_end_matches(".n");
    BRANCHES.contains(&m)
        || CONDS
            .iter()
            .any(|c| m.strip_suffix(c).is_some_and(|stem| BRANCHES.contains(&stem)))
}

/// The register operands of objdump's operand text: without a comment
/// (`;` or `@`, which may hold an address such as `@ d0024`), without
/// symbol names (`<d16_table+0x4>`), and none of a branch's (an address).
fn register_operands(base: &str, ops: &str) -> String {
    if is_branch(base) {
        return String::new();
    }
    let ops = ops.split([';', '@']).next().unwrap_or("");
    let mut out = String::with_capacity(ops.len());
    let mut depth = 0usize;
    for c in ops.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.trim().to_string()
}

pub(super) fn classify(insn: &str, bytes: &str) -> Vec<Ext> {
    let insn = insn.trim().to_ascii_lowercase();
    let (mnemonic, ops) = insn.split_once(char::is_whitespace).unwrap_or((insn.as_str(), ""));
    let mut parts = mnemonic.split('.');
    let base = parts.next().unwrap_or("");
    let types: Vec<&str> = parts.collect();
    let ops = register_operands(mnemonic, ops);
    let ops = ops.as_str();
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
