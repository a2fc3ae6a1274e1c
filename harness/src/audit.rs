//! The static guard proof: disassemble a built `ml` and show that every
//! instruction needing more than the baseline lies where the guard covers it.
//!
//! x86 and x86-64 binaries (ELF and PE) are read and decoded in-process
//! (`object`, iced-x86: `insn::x86`), each instruction's CPUID features
//! taken from the decoder; ARM and AArch64 ones through the target's
//! `objdump -d` text (`insn::{arm,aarch64}`). Functions are the symbols of
//! the code sections, named as `objdump -d -C` names them.
//!
//! Three rules, each failing with the offending symbol:
//! 1. **guard path** — `main`, `ml::main`, `legacy_ml::guard::*`,
//!    `std::rt::lang_start*` and the C start-up code (glibc's on ELF,
//!    mingw-w64's CRT on PE: `mainCRTStartup`, `__tmainCRTStartup`,
//!    `__main`, `_pei386_runtime_relocator`, its TLS callbacks…) use
//!    nothing beyond the *target's* baseline (not even the row's global
//!    rustflags features); a binary in which neither start-up code nor
//!    `main` can be found fails, since the rule would then prove nothing;
//! 2. **outside kernels** — every other non-kernel function uses nothing
//!    beyond the row's baseline (target baseline + the row's rustflags);
//! 3. **kernels** — functions under `legacy_ml::kernels::<tier>::` (tier ≠
//!    scalar) and C-ABI `ml_k_*` symbols use only what the guard of this
//!    build checks (`ml isa`'s "needs features"), plus what that implies.
//!
//! On x86 a feature the audit does not know by name, and bytes that decode
//! to no instruction, are findings like any other.
//!
//! Documented exceptions (each reported when used): `xgetbv` in the guard
//! and in std's feature detection (run only after CPUID reports OSXSAVE;
//! mingw keeps the `_xgetbv` intrinsic out of line), memchr's AVX2
//! searchers on Windows (memchr picks them after its own CPUID check),
//! AArch64's outline-atomics helpers (they pick LSE or LL/SC at run time),
//! in statically linked binaries glibc's ifunc variants (`__memcmp_sse4_2`,
//! …), its CPU probing and its lock elision (RTM), which glibc selects and
//! runs only after its own CPUID check, and undecodable bytes under a
//! symbol the symbol table types as data (mingw-w64 keeps its constructor
//! lists and some libm constants in `.text`).

use crate::insn;
use crate::isa::Arch;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use xshell::{cmd, Shell};

#[derive(Debug, Clone)]
pub struct Function {
    pub name: String,
    pub insns: Vec<Insn>,
    /// The symbol table types the symbol as data (ELF `STT_OBJECT`, a COFF
    /// symbol that is not a function: mingw-w64 keeps its constructor lists
    /// and libm's constants in `.text`). Only x86's own reader knows it.
    pub data: bool,
}

#[derive(Debug, Clone)]
pub struct Insn {
    pub addr: u64,
    pub bytes: String,
    pub text: String,
}

/// Parses `objdump -d -C [--insn-width=16]` output into functions.
pub fn parse_objdump(text: &str) -> Vec<Function> {
    let mut out: Vec<Function> = Vec::new();
    for line in text.lines() {
        if let Some(name) = header(line) {
            out.push(Function {
                name: name.to_string(),
                insns: Vec::new(),
                data: false,
            });
            continue;
        }
        let Some(f) = out.last_mut() else { continue };
        let mut fields = line.split('\t');
        let Some(addr) = fields.next().map(str::trim).and_then(|a| a.strip_suffix(':')) else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        let bytes = fields.next().unwrap_or("").trim().to_string();
        let rest: Vec<&str> = fields.collect();
        let text = strip_comment(&rest.join(" "));
        if text.is_empty() || text.starts_with('.') {
            continue; // a wrapped byte line, or data (.word) in a code section
        }
        f.insns.push(Insn { addr, bytes, text });
    }
    out
}

fn header(line: &str) -> Option<&str> {
    let (addr, rest) = line.split_once(' ')?;
    if addr.is_empty() || !addr.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    rest.strip_prefix('<')?.strip_suffix(">:")
}

fn strip_comment(s: &str) -> String {
    let s = s.split(" # ").next().unwrap_or(s);
    let s = s.split("\t@").next().unwrap_or(s);
    let s = s.split(" @ ").next().unwrap_or(s);
    let s = s.split(" ; ").next().unwrap_or(s);
    // Branch targets print as `<symbol>`; symbol text is not an operand.
    let s = match s.find(" <") {
        Some(i) if s.ends_with('>') => &s[..i],
        _ => s,
    };
    s.trim().to_string()
}

/// What a symbol is, for the audit's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    GuardPath,
    Kernel,
    Other,
}

const STARTUP: &[&str] = &[
    "_start",
    "_init",
    "_fini",
    "main",
    "__libc_csu_init",
    "__libc_csu_fini",
    "frame_dummy",
    "register_tm_clones",
    "deregister_tm_clones",
    "__do_global_dtors_aux",
    "call_weak_fn",
    "ml::main",
];

/// What a statically linked glibc runs before the first constructor (the
/// start-up path of the i686 rows), by name; a `.constprop.N` or similar
/// suffix counts as the same function.
const GLIBC_STATIC_STARTUP: &[&str] = &[
    "__libc_start_main",
    "__libc_start_main_impl",
    "__libc_start_call_main",
    "__libc_setup_tls",
    "__libc_init_secure",
    "__libc_init_first",
    "__libc_early_init",
    "__tunables_init",
    "__init_misc",
    "_dl_aux_init",
    "_dl_non_dynamic_init",
    "_dl_relocate_static_pie",
    "init_cpu_features",
    "update_active",
    "call_init",
];

fn is_glibc_static_startup(symbol: &str) -> bool {
    GLIBC_STATIC_STARTUP
        .iter()
        .any(|s| symbol == *s || symbol.strip_prefix(s).is_some_and(|rest| rest.starts_with('.')))
}

/// mingw-w64's C start-up code in a PE binary (crtexe.c, pseudo-reloc.c,
/// tlssup.c, gccmain.c, …): it runs before `main`, and its TLS callbacks
/// before the entry point, so it must stay at the target baseline too.
/// `.l_start`/`.l_end` (and the `w` pair) are labels inside the entry
/// points that objdump prints as functions of their own.
const PE_STARTUP: &[&str] = &[
    "mainCRTStartup",
    "WinMainCRTStartup",
    "__tmainCRTStartup",
    ".l_start",
    ".l_end",
    ".l_startw",
    ".l_endw",
    "pre_c_init",
    "pre_cpp_init",
    "__main",
    "__do_global_ctors",
    "__do_global_dtors",
    "_pei386_runtime_relocator",
    "mark_section_writable",
    "__report_error",
    "_setargv",
    "_fpreset",
    "_gnu_exception_handler",
    "__mingw_invalidParameterHandler",
    "__dyn_tls_init",
    "__dyn_tls_dtor",
    "__tlregdtor",
    "__mingw_TLScallback",
    "__mingwthr_run_key_dtors.part.0",
    "___w64_mingwthr_add_key_dtor",
    "___w64_mingwthr_remove_key_dtor",
    "_ValidateImageBase",
    "_FindPESection",
    "_FindPESectionByName",
    "_FindPESectionExec",
    "_GetPEImageBase",
    "_IsNonwritableInCurrentImage",
    "__mingw_GetSectionForAddress",
    "__mingw_GetSectionCount",
    "__mingw_enum_import_library_names",
    "__gcc_register_frame",
    "__gcc_deregister_frame",
    "register_frame_ctor",
    "atexit",
    "_matherr",
    "__mingw_raise_matherr",
    "__mingw_setusermatherr",
    "___chkstk_ms",
];

/// The entry points, one of which every audited binary must show: ELF's
/// `_start`, PE's (mingw-w64) `mainCRTStartup` or `WinMainCRTStartup`.
const ENTRY_POINTS: &[&str] = &["_start", "mainCRTStartup", "WinMainCRTStartup"];

/// The pre-main CPU check of builds with a crate-wide ISA flag.
fn is_pre_main_guard(symbol: &str) -> bool {
    symbol.trim_start_matches('<').starts_with("legacy_ml::guard::early::")
}

/// C start-up code: runs before any constructor, so always at the target baseline.
fn is_c_startup(symbol: &str) -> bool {
    ((STARTUP.contains(&symbol) || PE_STARTUP.contains(&symbol)) && symbol != "main" && symbol != "ml::main")
        || is_glibc_static_startup(symbol)
}

pub fn kind(symbol: &str) -> Kind {
    let s = symbol.trim_start_matches('<');
    if STARTUP.contains(&symbol)
        || is_glibc_static_startup(symbol)
        || PE_STARTUP.contains(&symbol)
        || s.starts_with("legacy_ml::guard::")
        || s.starts_with("std::rt::lang_start")
        || s.starts_with("std::rt::init")
        || symbol.starts_with("ml::main::")
    {
        return Kind::GuardPath;
    }
    if let Some(rest) = s.strip_prefix("legacy_ml::kernels::") {
        let module = rest.split("::").next().unwrap_or("");
        if module != "scalar" && rest.contains("::") {
            return Kind::Kernel;
        }
    }
    if symbol.starts_with("ml_k_") {
        return Kind::Kernel;
    }
    Kind::Other
}

/// Returns the reason when `ext` in `symbol` is a documented exception.
fn exception(symbol: &str, feature: &str) -> Option<&'static str> {
    match feature {
        "xsave" if symbol.starts_with("legacy_ml::guard::") || symbol.starts_with("std_detect::") => {
            Some("xgetbv runs only after CPUID.1:ECX.OSXSAVE says it exists")
        }
        // The mingw build keeps the intrinsic out of line; its only callers
        // are std_detect and the guard, both after the OSXSAVE check.
        "xsave" if symbol == "core::core_arch::x86::xsave::_xgetbv" => {
            Some("the _xgetbv intrinsic out of line, called only by std_detect and the guard after CPUID.1:ECX.OSXSAVE")
        }
        // A statically linked glibc carries its ifunc variants and the CPU
        // probing that picks one of them at start-up.
        _ if symbol.starts_with("__")
            && ["_sse2", "_sse3", "_ssse3", "_sse4", "_sse42", "_avx", "_evex", "_fma"]
                .iter()
                .any(|t| symbol.contains(t)) =>
        {
            Some("glibc ifunc variant: glibc's CPUID check selects it at run time")
        }
        "xsave"
            if [
                "update_active",
                "init_cpu_features",
                "get_common_indices",
                "_dl_runtime_resolve",
                "__init_cpu_features",
            ]
            .iter()
            .any(|p| symbol.starts_with(p)) =>
        {
            Some("glibc's own CPU probing / lazy-binding trampoline, after CPUID")
        }
        // glibc's lock elision (statically linked i686): used only when
        // init_cpu_features found RTM and the elision tunable is on.
        "rtm" if symbol.starts_with("__lll_") && symbol.contains("_elision") => {
            Some("glibc's lock elision: run only when glibc's CPUID check found RTM (and elision is enabled)")
        }
        // std's backtrace symbolizer (gimli, object) on PE links memchr,
        // which picks its AVX2 searcher after its own CPUID check
        // (is_x86_feature_detected!, std_detect).
        "avx" | "avx2"
            if symbol
                .trim_start_matches('<')
                .starts_with("memchr::arch::x86_64::avx2::")
                || symbol.starts_with("memchr::arch::x86_64::memchr::") && symbol.ends_with("::find_avx2") =>
        {
            Some("memchr's AVX2 searcher: memchr selects it at run time after CPUID (std_detect)")
        }
        // musl's ARM atomics come in variants that `__set_thread_area`
        // picks at start-up: the ARMv7 ones (dmb) only when AT_PLATFORM
        // does not say v6 (src/thread/arm/__set_thread_area.c).
        "v7" if ["__a_barrier_v7", "__a_cas_v7"].contains(&symbol) => {
            Some("musl's ARMv7 barrier/CAS: chosen at start-up only when AT_PLATFORM is not v6")
        }
        // libunwind restores d16-d31 only for frames whose unwind info saved
        // them, which code built without D32 has none of.
        "vfpd32"
            if symbol.starts_with("libunwind::Registers_arm::saveVFPv3")
                || symbol.starts_with("libunwind::Registers_arm::restoreVFPv3") =>
        {
            Some("libunwind's d16-d31 save/restore: used only for frames that saved d16-d31, which this build has none of")
        }
        "atomics"
            if symbol.starts_with("__aarch64_")
                && ["cas", "swp", "ldadd", "ldclr", "ldeor", "ldset"]
                    .iter()
                    .any(|p| symbol[10..].starts_with(p)) =>
        {
            Some("outline-atomics helper: picks LSE or LL/SC at run time from AT_HWCAP")
        }
        _ => None,
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Violation {
    pub rule: Kind,
    pub symbol: String,
    /// The CPU feature the instruction needs (guard name).
    pub feature: String,
    pub count: usize,
    /// The first such instruction and its address.
    pub example: String,
    pub addr: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct AuditResult {
    pub ok: bool,
    pub functions: usize,
    pub instructions: usize,
    /// Allowed anywhere: the target's baseline.
    pub target_baseline: Vec<String>,
    /// What the guard path was held to: the target's baseline, or with a
    /// pre-main check the floor below it (empty: the plain ISA, e.g. i686
    /// without MMX/SSE/SSE2).
    #[serde(default)]
    pub guard_path_baseline: Vec<String>,
    /// Allowed outside kernels: target baseline + row rustflags.
    pub row_baseline: Vec<String>,
    /// Allowed in kernels: what the guard checks (`ml isa`), plus implied.
    pub guard_checks: Vec<String>,
    pub kernel_functions: Vec<String>,
    /// Beyond-baseline instructions inside kernels, per feature.
    pub kernel_features: BTreeMap<String, usize>,
    /// Guard-path functions found (the rule-1 set).
    pub guard_path_functions: Vec<String>,
    pub exceptions: Vec<String>,
    pub violations: Vec<Violation>,
}

impl AuditResult {
    /// One line for the report.
    pub fn summary(&self) -> String {
        if self.ok {
            let feats: Vec<String> = self.kernel_features.iter().map(|(f, n)| format!("{f}×{n}")).collect();
            format!(
                "clean: {} instructions in {} functions; {} kernel functions{}; guard path ({} functions) at {}",
                self.instructions,
                self.functions,
                self.kernel_functions.len(),
                if feats.is_empty() {
                    String::new()
                } else {
                    format!(" using {}", feats.join(" "))
                },
                self.guard_path_functions.len(),
                if self.guard_path_baseline == self.target_baseline {
                    "target baseline".to_string()
                } else if self.guard_path_baseline.is_empty() {
                    "the bare ISA (no SIMD)".to_string()
                } else {
                    self.guard_path_baseline.join(" ")
                }
            )
        } else {
            let v: Vec<String> = self
                .violations
                .iter()
                .take(5)
                .map(|v| {
                    format!(
                        "{} `{}` uses {} ({}× e.g. `{}` at {})",
                        rule_name(v.rule),
                        v.symbol,
                        v.feature,
                        v.count,
                        v.example,
                        v.addr
                    )
                })
                .collect();
            format!("{} violation(s): {}", self.violations.len(), v.join("; "))
        }
    }
}

pub fn rule_name(k: Kind) -> &'static str {
    match k {
        Kind::GuardPath => "guard path:",
        Kind::Kernel => "kernel beyond its guard:",
        Kind::Other => "outside kernels:",
    }
}

pub struct Baselines {
    pub target: Vec<String>,
    /// What the C start-up code and a pre-main check may use: below
    /// `target` where the target's floor is above the oldest CPUs it can
    /// start on (Rust's i686 assumes SSE2, glibc for i686 does not).
    pub floor: Vec<String>,
    pub row: Vec<String>,
    pub guard: Vec<String>,
}

impl Baselines {
    /// A row's baselines: the target's, plus the features of its rustflags,
    /// and what its guard checks.
    pub fn for_row(triple: &str, rustflags: &[String], guard: Vec<String>) -> Baselines {
        let arch = Arch::from_triple(triple).unwrap_or(Arch::X86_64);
        let target = target_baseline(triple);
        let mut row = target.clone();
        for f in crate::config::rustflag_target_features(rustflags) {
            row.push(rust_feature_to_guard(arch, &f));
        }
        Baselines {
            floor: target_floor(triple),
            target,
            row,
            guard,
        }
    }
}

/// The features the start-up path of a binary for `arch` may use: the
/// target baseline, except on 32-bit x86, whose CPUs below Rust's floor
/// (the Pentium II and III have no SSE2) are refused by a pre-main check
/// that must itself run there.
pub fn target_floor(triple: &str) -> Vec<String> {
    match Arch::from_triple(triple) {
        Some(Arch::X86) => Vec::new(),
        _ => target_baseline(triple),
    }
}

/// The target's own baseline features (guard names).
pub fn target_baseline(triple: &str) -> Vec<String> {
    let Some(arch) = Arch::from_triple(triple) else {
        return vec![];
    };
    match arch {
        // Rust's x86-64 Windows targets require SSE3 and CMPXCHG16B (and
        // LAHF/SAHF), Windows 10's floor (`rustc --print cfg --target
        // x86_64-pc-windows-gnu` lists sse3 and cmpxchg16b): the compiler
        // uses them anywhere, e.g. movshdup in the scalar quantizer.
        Arch::X86_64 if crate::config::is_windows_triple(triple) => {
            vec!["sse2".into(), "sse3".into(), "cx16".into()]
        }
        Arch::X86_64 | Arch::X86 => vec!["sse2".into()],
        Arch::Aarch64 => vec!["asimd".into()],
        // Rust's armv7-unknown-linux-gnueabihf code uses d16-d31 (VFPv3-D32)
        // anywhere (seen in clap, float parsing, ml::main): D32 is part of
        // that target's floor, so D16-only ARMv7 cores are below it; it is
        // ARMv7-A with Thumb-2 too (Debian's armhf glibc). The ARMv6
        // targets' is ARMv6K + VFPv2 (`isa::arm_floor`).
        Arch::Arm => crate::isa::arm_floor(triple).iter().map(|s| s.to_string()).collect(),
    }
}

/// Maps a rustc target-feature name to the guard's name for it.
pub fn rust_feature_to_guard(arch: Arch, f: &str) -> String {
    match (arch, f) {
        (_, "sse4.1") => "sse4_1".into(),
        (_, "sse4.2") => "sse4_2".into(),
        (_, "avxvnni") => "avx_vnni".into(),
        (_, "avx512vnni") => "avx512_vnni".into(),
        (_, "dotprod") => "asimddp".into(),
        (Arch::Aarch64, "neon") => "asimd".into(),
        (_, "fp16" | "fullfp16") => "fphp".into(),
        (_, "lse") => "atomics".into(),
        (_, "rcpc") => "lrcpc".into(),
        (_, "crc") => "crc32".into(),
        (_, "d32") => "vfpd32".into(),
        (_, "vfp4") => "vfpv4".into(),
        (_, "vfp3") => "vfpv3".into(),
        (_, "vfp2") => "vfp".into(),
        (_, other) => other.to_string(),
    }
}

/// Audits parsed functions.
pub fn audit(arch: Arch, functions: &[Function], b: &Baselines) -> AuditResult {
    let target = insn::closure(&b.target);
    let floor = insn::closure(&b.floor);
    let row = insn::closure(&b.row);
    let mut guard_all = b.row.clone();
    guard_all.extend(b.guard.iter().cloned());
    let guard = insn::closure(&guard_all);
    let mut res = AuditResult {
        functions: functions.len(),
        target_baseline: b.target.clone(),
        row_baseline: b.row.clone(),
        guard_checks: b.guard.clone(),
        ..Default::default()
    };
    let mut violations: BTreeMap<(String, String), Violation> = BTreeMap::new();
    let mut exceptions = std::collections::BTreeSet::new();
    // A row built with a crate-wide feature (ARMv7 `+neon`) cannot keep
    // `main` and the guard at the target baseline: the compiler may use the
    // feature anywhere. Nor can a target whose baseline is above the oldest
    // CPUs it starts on (i686 and SSE2). Such builds check the CPU before
    // Rust starts, from an `.init_array` constructor
    // (`legacy_ml::guard::early`). Then the guard path is the C start-up
    // code plus that constructor, held to the floor, and `main` and the rest
    // are ordinary code at the row's baseline. (The row's `reject` cells
    // prove at run time that the constructor runs first: `main` holds the
    // feature's instructions, so anything else would die of SIGILL.)
    let below_target = b.row.len() > b.target.len() || floor.len() < target.len();
    let pre_main_guard = below_target && functions.iter().any(|f| is_pre_main_guard(&f.name));
    res.guard_path_baseline = if pre_main_guard {
        b.floor.clone()
    } else {
        b.target.clone()
    };
    if pre_main_guard {
        exceptions.insert(
            "pre-main guard: `legacy_ml::guard::early` checks the CPU from .init_array, so the guard path is \
             start-up code plus that check, and main/the guard run at the row's baseline"
                .to_string(),
        );
    }
    for f in functions {
        let mut k = kind(&f.name);
        if pre_main_guard && k == Kind::GuardPath && !is_c_startup(&f.name) && !is_pre_main_guard(&f.name) {
            k = Kind::Other;
        }
        match k {
            Kind::Kernel => res.kernel_functions.push(f.name.clone()),
            Kind::GuardPath => res.guard_path_functions.push(f.name.clone()),
            Kind::Other => {}
        }
        let allowed = match k {
            Kind::GuardPath if pre_main_guard => &floor,
            Kind::GuardPath => &target,
            Kind::Other => &row,
            Kind::Kernel => &guard,
        };
        for i in &f.insns {
            res.instructions += 1;
            for feat in insn::classify(arch, &i.text, &i.bytes) {
                let feat = feat.as_ref();
                if feat == insn::x86::UNDECODABLE && f.data {
                    exceptions.insert(format!(
                        "{feat} `{}`: bytes under a symbol typed as data (data in a code section), not code",
                        f.name
                    ));
                    continue;
                }
                if !target.iter().any(|t| t == feat) && k == Kind::Kernel {
                    *res.kernel_features.entry(feat.to_string()).or_default() += 1;
                }
                if allowed.iter().any(|a| a == feat) {
                    continue;
                }
                if let Some(why) = exception(&f.name, feat) {
                    exceptions.insert(format!("{} `{}`: {}", feat, f.name, why));
                    continue;
                }
                violations
                    .entry((f.name.clone(), feat.to_string()))
                    .and_modify(|v| v.count += 1)
                    .or_insert_with(|| Violation {
                        rule: k,
                        symbol: f.name.clone(),
                        feature: feat.to_string(),
                        count: 1,
                        example: i.text.split_whitespace().collect::<Vec<_>>().join(" "),
                        addr: format!("{:#x}", i.addr),
                    });
            }
        }
    }
    // A target whose floor is below its baseline needs the pre-main check:
    // without it, `main` and std's start-up run at the baseline on CPUs
    // that lack it.
    if floor.len() < target.len() && !pre_main_guard {
        let missing: Vec<&str> = b
            .target
            .iter()
            .filter(|f| !b.floor.contains(f))
            .map(String::as_str)
            .collect();
        violations.insert(
            ("legacy_ml::guard::early".to_string(), missing.join(" ")),
            Violation {
                rule: Kind::GuardPath,
                symbol: "legacy_ml::guard::early".to_string(),
                feature: missing.join(" "),
                count: 1,
                example: "no pre-main check: CPUs below the target's floor would run main and std's start-up"
                    .to_string(),
                addr: "-".to_string(),
            },
        );
    }
    let mut v: Vec<Violation> = violations.into_values().collect();
    // Guard-path first: those are the ones that can fault before the check.
    v.sort_by_key(|v| (v.rule != Kind::GuardPath, v.rule != Kind::Other, v.symbol.clone()));
    res.violations = v;
    res.exceptions = exceptions.into_iter().collect();
    res.ok = res.violations.is_empty();
    res
}

/// Rule 1 means something only if the guard path is in the dump: an entry
/// point and `main`. Symbol naming that changed (another toolchain, another
/// object format) would otherwise leave it empty and the audit clean.
pub fn guard_path_missing(functions: &[Function]) -> Option<String> {
    let has = |names: &[&str]| functions.iter().any(|f| names.contains(&f.name.as_str()));
    let mut missing = Vec::new();
    if !has(ENTRY_POINTS) {
        missing.push(format!("no entry point ({})", ENTRY_POINTS.join(", ")));
    }
    if !has(&["main", "ml::main"]) {
        missing.push("no `main`".to_string());
    }
    (!missing.is_empty()).then(|| {
        format!(
            "the disassembly has {}: the guard-path rule would check nothing",
            missing.join(" and ")
        )
    })
}

/// Disassembles `binary` and audits it: x86 (ELF or PE) decoded by
/// iced-x86 from the file itself, ARM and AArch64 through `objdump`'s text
/// (`objdump` is used for those only).
pub fn audit_binary(sh: &Shell, objdump: &str, arch: Arch, binary: &Path, b: &Baselines) -> Result<AuditResult> {
    let functions = match arch {
        Arch::X86_64 | Arch::X86 => insn::x86::disassemble(binary, arch == Arch::X86_64)?,
        Arch::Aarch64 | Arch::Arm => objdump_functions(sh, objdump, binary)?,
    };
    if functions.is_empty() {
        bail!("no functions found in {}", binary.display());
    }
    let mut res = audit(arch, &functions, b);
    if let Some(why) = guard_path_missing(&functions) {
        res.violations.insert(
            0,
            Violation {
                rule: Kind::GuardPath,
                symbol: "(start-up / main)".into(),
                feature: "-".into(),
                count: 0,
                example: why,
                addr: "-".into(),
            },
        );
        res.ok = false;
    }
    Ok(res)
}

/// `objdump -d -C` of `binary`, parsed.
fn objdump_functions(sh: &Shell, objdump: &str, binary: &Path) -> Result<Vec<Function>> {
    let args = ["-d", "-C", "--insn-width=16"];
    let out = cmd!(sh, "{objdump} {args...} {binary}")
        .quiet()
        .ignore_stderr()
        .output()
        .with_context(|| format!("run {objdump} on {}", binary.display()))?;
    if !out.status.success() {
        bail!(
            "{objdump} failed on {}: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(parse_objdump(&String::from_utf8_lossy(&out.stdout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86_DUMP: &str = "
/tmp/ml:     file format elf64-x86-64


Disassembly of section .text:

0000000000038f70 <_start>:
   38f70:\tf3 0f 1e fa          \tendbr64
   38f74:\t31 ed                \txor    ebp,ebp
0000000000040580 <ml::main>:
   40580:\t48 83 ec 08          \tsub    rsp,0x8
   40584:\te8 00 00 00 00       \tcall   4b3f0 <legacy_ml::guard::guard>
0000000000050000 <legacy_ml::kernels::avx2::matvec_q8>:
   50000:\tc5 fd fe c1          \tvpaddd ymm0,ymm0,ymm1
   50004:\tc4 e2 7d 18 c0       \tvbroadcastss ymm0,xmm0
   50009:\tc5 f8 77             \tvzeroupper
0000000000050100 <legacy_ml::ops::matvec>:
   50100:\t66 0f fe c1          \tpaddd  xmm0,xmm1
0000000000050200 <legacy_ml::guard::detect::xcr0>:
   50200:\t0f 01 d0             \txgetbv
";

    /// `vmovdqu ymm0,[rdi]` (AVX) as objdump prints it.
    const VMOVDQU: &str = "c5 fe 6f 07          \tvmovdqu ymm0,YMMWORD PTR [rdi]";

    fn x86_baselines(guard: &[&str]) -> Baselines {
        Baselines {
            target: vec!["sse2".into()],
            floor: vec!["sse2".into()],
            row: vec!["sse2".into()],
            guard: guard.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn parses_headers_and_instructions() {
        let f = parse_objdump(X86_DUMP);
        assert_eq!(f.len(), 5);
        assert_eq!(f[1].name, "ml::main");
        assert_eq!(f[1].insns[1].text, "call   4b3f0");
        assert_eq!(f[2].insns[0].bytes, "c5 fd fe c1");
        assert_eq!(kind("legacy_ml::kernels::avx2::matvec_q8::{{closure}}"), Kind::Kernel);
        assert_eq!(kind("legacy_ml::kernels::scalar::matvec_q8"), Kind::Other);
        assert_eq!(
            kind("<legacy_ml::kernels::sse41::Q as core::ops::Fn>::call"),
            Kind::Kernel
        );
        assert_eq!(kind("main"), Kind::GuardPath);
    }

    #[test]
    fn a_clean_avx2_build_passes() {
        let r = audit(
            Arch::X86_64,
            &parse_objdump(X86_DUMP),
            &x86_baselines(&["avx", "avx2", "fma"]),
        );
        assert!(r.ok, "{}", r.summary());
        assert_eq!(r.kernel_features.get("avx2"), Some(&2));
        assert_eq!(r.exceptions.len(), 1, "{:?}", r.exceptions);
        assert!(r.summary().starts_with("clean:"));
    }

    #[test]
    fn isa_instructions_outside_kernels_fail_naming_the_symbol() {
        let dump = X86_DUMP.replace(
            "66 0f fe c1          \tpaddd  xmm0,xmm1",
            "66 0f 38 40 c1\tpmulld xmm0,xmm1",
        );
        let r = audit(
            Arch::X86_64,
            &parse_objdump(&dump),
            &x86_baselines(&["avx", "avx2", "fma"]),
        );
        assert!(!r.ok);
        assert_eq!(r.violations[0].symbol, "legacy_ml::ops::matvec");
        assert_eq!(r.violations[0].feature, "sse4_1");
        assert_eq!(r.violations[0].rule, Kind::Other);
        assert!(
            r.summary()
                .contains("outside kernels: `legacy_ml::ops::matvec` uses sse4_1"),
            "{}",
            r.summary()
        );
    }

    #[test]
    fn isa_instructions_in_main_or_the_guard_fail() {
        let dump = X86_DUMP.replace("48 83 ec 08          \tsub    rsp,0x8", VMOVDQU);
        let r = audit(
            Arch::X86_64,
            &parse_objdump(&dump),
            &x86_baselines(&["avx", "avx2", "fma"]),
        );
        assert!(!r.ok);
        assert_eq!(r.violations[0].rule, Kind::GuardPath);
        assert_eq!(r.violations[0].symbol, "ml::main");
        assert!(
            r.summary().contains("guard path: `ml::main` uses avx"),
            "{}",
            r.summary()
        );
    }

    #[test]
    fn kernels_beyond_what_the_guard_checks_fail() {
        // An avx2 build whose guard forgot avx2: its kernels are unguarded.
        let r = audit(Arch::X86_64, &parse_objdump(X86_DUMP), &x86_baselines(&["sse4_1"]));
        assert!(!r.ok);
        assert!(r
            .violations
            .iter()
            .all(|v| v.rule == Kind::Kernel && v.symbol == "legacy_ml::kernels::avx2::matvec_q8"));
        assert!(r.summary().contains("kernel beyond its guard:"), "{}", r.summary());
        // A scalar build has no kernels and a guard that checks nothing.
        let r = audit(Arch::X86_64, &parse_objdump(X86_DUMP), &x86_baselines(&[]));
        assert!(!r.ok);
    }

    #[test]
    fn xgetbv_outside_the_guard_is_not_excused() {
        let dump = X86_DUMP.replace("<legacy_ml::guard::detect::xcr0>", "<legacy_ml::model::load>");
        let r = audit(
            Arch::X86_64,
            &parse_objdump(&dump),
            &x86_baselines(&["avx", "avx2", "fma"]),
        );
        assert!(!r.ok);
        assert_eq!(r.violations[0].symbol, "legacy_ml::model::load");
        assert_eq!(r.violations[0].feature, "xsave");
    }

    #[test]
    fn arm_dumps_parse_and_audit() {
        let dump = "
00010450 <main>:
   10450:\te92d4800 \tpush\t{fp, lr}
   10454:\tf2800050 \tvmov.i32\tq0, #0\t@ 0x00000000
00010500 <legacy_ml::kernels::neon::matvec_q8>:
   10500:\tf3b00000 \tvmull.s8\tq0, d0, d0
   10504:\t00000000 \t.word\t0x00000000
";
        let f = parse_objdump(dump);
        assert_eq!(f[0].insns.len(), 2);
        assert_eq!(f[1].insns.len(), 1);
        let b = Baselines {
            target: vec![],
            floor: vec![],
            row: vec!["neon".into()],
            guard: vec!["neon".into()],
        };
        let r = audit(Arch::Arm, &f, &b);
        assert!(!r.ok);
        assert_eq!(r.violations.len(), 1);
        assert_eq!(r.violations[0].symbol, "main");
        assert_eq!(r.violations[0].feature, "neon");
    }

    #[test]
    fn outline_atomics_are_a_reported_exception() {
        let dump = "
0000000000400100 <__aarch64_ldadd8_acq_rel>:
  400100:\tf8e00020 \tldaddal\tx0, x0, [x1]
";
        let b = Baselines {
            target: vec!["asimd".into()],
            floor: vec!["asimd".into()],
            row: vec!["asimd".into()],
            guard: vec![],
        };
        let r = audit(Arch::Aarch64, &parse_objdump(dump), &b);
        assert!(r.ok, "{}", r.summary());
        assert_eq!(r.exceptions.len(), 1);
    }

    /// A mingw-w64 PE `ml.exe` as `x86_64-w64-mingw32-objdump -d -C -M
    /// intel` prints it (abridged from the win-avx2 row's build).
    const PE_DUMP: &str = "
ml.exe:     file format pei-x86-64


Disassembly of section .text:

0000000140001010 <pre_c_init>:
   140001010:\t48 83 ec 28          \tsub    rsp,0x28
0000000140001180 <__tmainCRTStartup>:
   140001180:\t41 54                \tpush   r12
   1400012c4:\t41 0f 44 c8          \tcmove  ecx,r8d
   1400013a9:\te8 32 fd 01 00       \tcall   1400210e0 <main>
00000001400014d0 <mainCRTStartup>:
   1400014d0:\t48 83 ec 28          \tsub    rsp,0x28
00000001400014d4 <.l_start>:
   1400014d4:\te8 a7 fc ff ff       \tcall   140001180 <__tmainCRTStartup>
00000001400139e0 <ml::main>:
   1400139e0:\t48 83 ec 08          \tsub    rsp,0x8
   1400149b4:\te8 e7 79 09 00       \tcall   1400ac3a0 <legacy_ml::guard::guard>
00000001400210e0 <main>:
   1400210e0:\t48 83 ec 28          \tsub    rsp,0x28
0000000140050000 <legacy_ml::kernels::avx2::matvec_q8>:
   140050000:\tc5 fd fe c1          \tvpaddd ymm0,ymm0,ymm1
000000014016c240 <_pei386_runtime_relocator>:
   14016c240:\t55                   \tpush   rbp
000000014016c300 <__main>:
   14016c300:\t8b 05 00 00 00 00    \tmov    eax,DWORD PTR [rip+0x0]
000000014016c400 <__mingw_TLScallback>:
   14016c400:\t53                   \tpush   rbx
";

    #[test]
    fn pe_start_up_code_is_on_the_guard_path() {
        for s in [
            "mainCRTStartup",
            "WinMainCRTStartup",
            "__tmainCRTStartup",
            ".l_start",
            "pre_c_init",
            "__main",
            "_pei386_runtime_relocator",
            "__dyn_tls_init",
            "__mingw_TLScallback",
            "___chkstk_ms",
        ] {
            assert_eq!(kind(s), Kind::GuardPath, "{s}");
            assert!(is_c_startup(s), "{s}");
        }
        // Windows API thunks and the CRT's library calls are ordinary code.
        for s in ["CreateFileMappingW", "memcpy", "ProcessPrng", ".text"] {
            assert_eq!(kind(s), Kind::Other, "{s}");
        }
        let f = parse_objdump(PE_DUMP);
        assert_eq!(f.len(), 10);
        assert_eq!(guard_path_missing(&f), None);
        let r = audit(Arch::X86_64, &f, &x86_baselines(&["avx", "avx2", "fma"]));
        assert!(r.ok, "{}", r.summary());
        for s in ["mainCRTStartup", "__tmainCRTStartup", "main", "ml::main", "__main"] {
            assert!(
                r.guard_path_functions.iter().any(|g| g == s),
                "{s}: {:?}",
                r.guard_path_functions
            );
        }
        assert_eq!(r.kernel_functions, ["legacy_ml::kernels::avx2::matvec_q8"]);
    }

    #[test]
    fn isa_instructions_in_pe_start_up_code_fail() {
        for (sym, insn) in [
            ("__tmainCRTStartup", "41 54                \tpush   r12"),
            ("_pei386_runtime_relocator", "55                   \tpush   rbp"),
            ("__mingw_TLScallback", "53                   \tpush   rbx"),
        ] {
            let dump = PE_DUMP.replace(insn, VMOVDQU);
            let r = audit(
                Arch::X86_64,
                &parse_objdump(&dump),
                &x86_baselines(&["avx", "avx2", "fma"]),
            );
            assert!(!r.ok, "{sym}");
            assert_eq!(r.violations[0].rule, Kind::GuardPath, "{sym}");
            assert_eq!(r.violations[0].symbol, sym);
            assert_eq!(r.violations[0].feature, "avx");
        }
    }

    #[test]
    fn a_dump_without_entry_point_or_main_proves_nothing() {
        let f = parse_objdump(PE_DUMP);
        assert_eq!(guard_path_missing(&f), None);
        assert_eq!(guard_path_missing(&parse_objdump(X86_DUMP)), None);
        // Start-up code under names the tables do not know.
        let renamed = PE_DUMP
            .replace("<mainCRTStartup>", "<_mainCRTStartup_v2>")
            .replace("<main>:", "<_main_v2>:")
            .replace("<ml::main>:", "<ml::entry>:");
        let why = guard_path_missing(&parse_objdump(&renamed)).expect("must be noticed");
        assert!(why.contains("no entry point (_start, mainCRTStartup"), "{why}");
        assert!(why.contains("and no `main`"), "{why}");
        let no_main = PE_DUMP
            .replace("<main>:", "<_main_v2>:")
            .replace("<ml::main>:", "<ml::entry>:");
        let why = guard_path_missing(&parse_objdump(&no_main)).unwrap();
        assert!(!why.contains("entry point") && why.contains("has no `main`"), "{why}");
    }

    #[test]
    fn windows_x86_64_has_a_higher_floor_and_memchr_dispatches_itself() {
        assert_eq!(target_baseline("x86_64-unknown-linux-gnu"), ["sse2"]);
        assert_eq!(target_baseline("x86_64-pc-windows-gnu"), ["sse2", "sse3", "cx16"]);
        assert_eq!(target_baseline("x86_64-pc-windows-msvc"), ["sse2", "sse3", "cx16"]);
        let dump = PE_DUMP.replace("48 83 ec 08          \tsub    rsp,0x8", "f3 41 0f 16 c0\tmovshdup xmm0,xmm8")
            + "0000000140160000 <<memchr::arch::x86_64::avx2::packedpair::Finder>::find_impl>:\n   140160000:\tc4 a1 7d 74 14 1a    \tvpcmpeqb ymm2,ymm0,YMMWORD PTR [rdx+r11*1]\n";
        let windows = Baselines::for_row(
            "x86_64-pc-windows-gnu",
            &[],
            vec!["avx".into(), "avx2".into(), "fma".into()],
        );
        assert_eq!(windows.floor, windows.target);
        let r = audit(Arch::X86_64, &parse_objdump(&dump), &windows);
        assert!(r.ok, "{}", r.summary());
        assert!(
            r.exceptions.iter().any(|e| e.starts_with("avx2 `<memchr::")),
            "{:?}",
            r.exceptions
        );
        // The same SSE3 in ml::main of a Linux build breaks its floor.
        let r = audit(
            Arch::X86_64,
            &parse_objdump(&dump),
            &x86_baselines(&["avx", "avx2", "fma"]),
        );
        assert!(!r.ok);
        assert_eq!(
            (r.violations[0].symbol.as_str(), r.violations[0].feature.as_str()),
            ("ml::main", "sse3")
        );
        // memchr's name excuses only its AVX2 searcher, not other code.
        let dump = dump.replace("memchr::arch::x86_64::avx2::", "memchr::arch::x86_64::sse2::");
        assert!(!audit(Arch::X86_64, &parse_objdump(&dump), &windows).ok);

        // As iced-x86 names them: memchr's dispatched `find_avx2` entry
        // points and the out-of-line _xgetbv pass; the same AVX2 in a
        // memchr function not named find_avx2 does not.
        let named = PE_DUMP.to_string()
            + "0000000140170000 <memchr::arch::x86_64::memchr::count_raw::find_avx2>:\n   140170000:\tc5 fd 74 14 1a       \tvpcmpeqb ymm2,ymm0,YMMWORD PTR [rdx+rbx*1]\n"
            + "0000000140171000 <core::core_arch::x86::xsave::_xgetbv>:\n   140171000:\t0f 01 d0             \txgetbv\n";
        let r = audit(Arch::X86_64, &parse_objdump(&named), &windows);
        assert!(r.ok, "{}", r.summary());
        assert_eq!(r.exceptions.len(), 2, "{:?}", r.exceptions);
        let renamed = named.replace("count_raw::find_avx2", "count_raw::find_sse2");
        let r = audit(Arch::X86_64, &parse_objdump(&renamed), &windows);
        assert_eq!(r.violations.len(), 1, "{}", r.summary());
    }

    /// A function of instruction texts (no encodings), for any arch.
    fn text_fn(name: &str, insns: &[&str]) -> Function {
        Function {
            name: name.into(),
            data: false,
            insns: insns
                .iter()
                .enumerate()
                .map(|(i, t)| Insn {
                    addr: i as u64 * 4,
                    bytes: String::new(),
                    text: t.to_string(),
                })
                .collect(),
        }
    }

    /// An x86 function of encodings (the text is the bytes: only they count).
    fn x86_fn(name: &str, insns: &[&str]) -> Function {
        let mut f = text_fn(name, insns);
        for i in &mut f.insns {
            i.bytes = i.text.clone();
        }
        f
    }

    /// Bytes that decode to nothing pass only under a symbol typed as data
    /// (mingw-w64's `__CTOR_LIST__` in `.text`), and are reported there.
    #[test]
    fn undecodable_bytes_are_a_finding_outside_data_symbols() {
        let b = x86_baselines(&[]);
        let start = x86_fn("_start", &["31 ed"]);
        let main = x86_fn("main", &["55"]);
        let mut ctors = x86_fn("__CTOR_LIST__", &["ff", "ff"]);
        let r = audit(Arch::X86_64, &[start.clone(), main.clone(), ctors.clone()], &b);
        assert!(!r.ok);
        assert_eq!(
            (
                r.violations[0].symbol.as_str(),
                r.violations[0].feature.as_str(),
                r.violations[0].count
            ),
            ("__CTOR_LIST__", "x86:undecodable", 2)
        );
        ctors.data = true;
        let r = audit(Arch::X86_64, &[start, main, ctors], &b);
        assert!(r.ok, "{}", r.summary());
        assert!(
            r.exceptions
                .iter()
                .any(|e| e.starts_with("x86:undecodable `__CTOR_LIST__`")),
            "{:?}",
            r.exceptions
        );
    }

    #[test]
    fn glibc_lock_elision_is_excused_only_by_name() {
        let b = Baselines::for_row("i686-unknown-linux-gnu", &[], vec![]);
        let check = x86_fn("legacy_ml::guard::early::sse2_check", &["0f a2"]);
        let xbegin = ["c7 f8 00 00 00 00"];
        let r = audit(Arch::X86, &[check.clone(), x86_fn("__lll_lock_elision", &xbegin)], &b);
        assert!(r.ok, "{}", r.summary());
        assert!(r.exceptions.iter().any(|e| e.starts_with("rtm `__lll_lock_elision`")));
        let r = audit(Arch::X86, &[check, x86_fn("legacy_ml::ops::matvec", &xbegin)], &b);
        assert_eq!(r.violations[0].feature, "rtm");
    }

    fn armv7_neon_row() -> Baselines {
        Baselines {
            target: vec!["vfpd32".into()],
            floor: vec!["vfpd32".into()],
            row: vec!["vfpd32".into(), "neon".into()],
            guard: vec!["neon".into()],
        }
    }

    /// i686: Rust assumes SSE2 everywhere, so `main` may use it; the
    /// pre-main check and the C start-up code may not, and a binary
    /// without the check fails.
    #[test]
    fn i686_start_up_and_pre_main_check_stay_below_sse2() {
        let b = Baselines::for_row("i686-unknown-linux-gnu", &[], vec![]);
        assert_eq!(b.floor, Vec::<String>::new());
        let main = x86_fn("main", &["55", "f3 0f 7e 86 54 1c 00 00"]);
        let check = x86_fn(
            "legacy_ml::guard::early::sse2_check",
            &["53", "0f a2", "e8 00 00 00 00"],
        );
        let start = x86_fn(
            "__libc_start_main_impl",
            &["55", "0f 45 c2", "dd 04 24", "0f ae 00", "0f 31"],
        );
        let with = audit(Arch::X86, &[main.clone(), check.clone(), start.clone()], &b);
        assert!(with.ok, "{}", with.summary());
        assert!(with.summary().contains("bare ISA"), "{}", with.summary());
        let without = audit(Arch::X86, &[main.clone(), start.clone()], &b);
        assert!(!without.ok, "an i686 binary without the pre-main check must fail");
        assert!(
            without.summary().contains("legacy_ml::guard::early"),
            "{}",
            without.summary()
        );
        let dirty_check = x86_fn("legacy_ml::guard::early::sse2_check", &["0f a2", "66 0f d6 04 24"]);
        let bad = audit(Arch::X86, &[main.clone(), dirty_check, start], &b);
        assert!(!bad.ok && bad.summary().contains("sse2_check"), "{}", bad.summary());
        let dirty_start = x86_fn("update_active.constprop.0", &["0f 57 c0"]);
        let bad = audit(Arch::X86, &[main, check, dirty_start], &b);
        assert!(!bad.ok && bad.summary().contains("update_active"), "{}", bad.summary());
    }

    #[test]
    fn armv6_builds_stay_within_armv6k_and_vfpv2() {
        let b = Baselines::for_row("arm-unknown-linux-musleabihf", &[], vec![]);
        assert_eq!(b.target, ["v6", "v6k", "vfp"]);
        let ok = [
            text_fn(
                "std::rt::lang_start_internal",
                &["ldrexd sl, [r1]", "vadd.f64 d0, d1, d2"],
            ),
            text_fn("__a_barrier_v7", &["dmb ish"]),
            text_fn("libunwind::Registers_arm::saveVFPv3(void*)", &["vstmia r0, {d16-d31}"]),
        ];
        let r = audit(Arch::Arm, &ok, &b);
        assert!(r.ok, "{}", r.summary());
        assert_eq!(r.exceptions.len(), 2, "{:?}", r.exceptions);
        // What an ARMv7 build has everywhere is a violation here, even
        // where the ARMv7 target allows it.
        let v7 = [
            text_fn("main", &["movw r0, #4660"]),
            text_fn(
                "legacy_ml::ops::matvec",
                &["vmov.f64 d0, #1.000000e+00", "veor d16, d16, d16"],
            ),
            text_fn("__a_barrier_v6", &["dmb ish"]),
        ];
        let r = audit(Arch::Arm, &v7, &b);
        let got: Vec<(&str, &str)> = r
            .violations
            .iter()
            .map(|v| (v.symbol.as_str(), v.feature.as_str()))
            .collect();
        assert!(got.contains(&("main", "v7")), "{got:?}");
        assert!(got.contains(&("legacy_ml::ops::matvec", "vfpv3")), "{got:?}");
        assert!(got.contains(&("legacy_ml::ops::matvec", "vfpd32")), "{got:?}");
        assert!(got.contains(&("legacy_ml::ops::matvec", "neon")), "{got:?}");
        assert!(got.contains(&("__a_barrier_v6", "v7")), "{got:?}");
        assert_eq!(r.violations[0].rule, Kind::GuardPath);
        let armv7 = Baselines::for_row("armv7-unknown-linux-gnueabihf", &[], vec![]);
        let r = audit(Arch::Arm, &v7[..1], &armv7);
        assert!(r.ok, "{}", r.summary());
    }

    #[test]
    fn crate_wide_neon_needs_the_pre_main_check() {
        let main = text_fn("main", &["push {r4, lr}", "vld1.64 {d16-d17}, [r4]"]);
        let without = audit(Arch::Arm, std::slice::from_ref(&main), &armv7_neon_row());
        assert!(!without.ok, "NEON in main without a pre-main check must fail");
        let check = text_fn(
            "legacy_ml::guard::early::neon_check",
            &["push {r4, lr}", "bl 1000 <getauxval@plt>"],
        );
        let with = audit(Arch::Arm, &[main.clone(), check], &armv7_neon_row());
        assert!(with.ok, "{}", with.summary());
        let dirty = text_fn("legacy_ml::guard::early::neon_check", &["vld1.64 {d16-d17}, [r4]"]);
        let bad = audit(Arch::Arm, &[main, dirty], &armv7_neon_row());
        assert!(!bad.ok, "NEON in the pre-main check itself must fail");
        assert!(bad.summary().contains("neon_check"), "{}", bad.summary());
    }
}
