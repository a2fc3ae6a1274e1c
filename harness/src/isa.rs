//! What each ISA tier needs and what each CPU model has.
//!
//! Feature names are the ones the runtime's guard prints (`ml isa`, the
//! `missing:` list): Linux /proc/cpuinfo flags on x86 (with `sse3` for
//! cpuinfo's `pni`), HWCAP names on ARM (`asimd`, `asimddp`, `sve`, `neon`).
//! The qemu model table (qemu/cpus.toml, compiled in) was measured by
//! running `ml isa` under each model with QEMU 7.2 (TCG);
//! `harness doctor --probe-cpus` re-measures it and flags drift.

use serde::{Deserialize, Serialize};

/// CPU architecture of a target triple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    X86_64,
    X86,
    Aarch64,
    Arm,
}

impl Arch {
    pub fn from_triple(triple: &str) -> Option<Arch> {
        let head = triple.split('-').next().unwrap_or("");
        match head {
            "x86_64" => Some(Arch::X86_64),
            "i386" | "i586" | "i686" => Some(Arch::X86),
            "aarch64" => Some(Arch::Aarch64),
            h if h.starts_with("armv7") || h.starts_with("thumbv7") || h == "arm" => Some(Arch::Arm),
            _ => None,
        }
    }

    /// `x86` or `arm`: which instruction-set family the tier features belong to.
    pub fn family(self) -> Family {
        match self {
            Arch::X86_64 | Arch::X86 => Family::X86,
            Arch::Aarch64 | Arch::Arm => Family::Arm,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::X86 => "x86",
            Arch::Aarch64 => "aarch64",
            Arch::Arm => "arm",
        }
    }

    /// The architecture of the machine the harness runs on.
    pub fn host() -> Option<Arch> {
        Arch::from_triple(std::env::consts::ARCH).or(if std::env::consts::ARCH == "x86" {
            Some(Arch::X86)
        } else {
            None
        })
    }

    /// Whether a binary of this arch runs natively on `host`.
    pub fn runs_natively_on(self, host: Arch) -> bool {
        // An i686 binary could run on an x86-64 kernel, but only with a
        // 32-bit loader installed at /lib; rows use qemu-i386 instead.
        self == host
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    X86,
    Arm,
}

/// One ISA tier of DESIGN.md §3.
#[derive(Debug)]
pub struct Tier {
    pub name: &'static str,
    /// The runtime cargo feature selecting it (None: scalar, the default).
    pub feature: Option<&'static str>,
    /// The architectures it exists on.
    pub arches: &'static [Arch],
    /// Features a CPU must have to run it, per arch (guard names).
    pub needs_x86: &'static [&'static str],
    pub needs_aarch64: &'static [&'static str],
    pub needs_arm: &'static [&'static str],
}

impl Tier {
    /// What a CPU needs to run this tier's build for `arch`: the tier's own
    /// features and those the Rust target assumes of every CPU
    /// (`target_needs`).
    pub fn needs(&self, arch: Arch) -> Vec<&'static str> {
        let own = match arch {
            Arch::X86_64 | Arch::X86 => self.needs_x86,
            Arch::Aarch64 => self.needs_aarch64,
            Arch::Arm => self.needs_arm,
        };
        let mut all = target_needs(arch).to_vec();
        all.extend(own.iter().filter(|f| !all.contains(f)).collect::<Vec<_>>());
        all
    }
}

/// Features every build for `arch` needs, whatever its tier, that some CPU
/// the matrix runs lacks: Rust's i686 targets use SSE2 in all code, and
/// the Pentium II and III have none (their builds exit 7 from a pre-main
/// check, `legacy_ml::guard::early`).
pub fn target_needs(arch: Arch) -> &'static [&'static str] {
    match arch {
        Arch::X86 => &["sse2"],
        _ => &[],
    }
}

const X86: &[Arch] = &[Arch::X86_64, Arch::X86];

/// Spec §3's tiers. `needs` is the minimum a CPU must have; the runtime's
/// guard may check more (the harness reads the binary's own list from
/// `ml isa` and uses that for the audit).
pub const TIERS: &[Tier] = &[
    Tier {
        name: "scalar",
        feature: None,
        arches: &[Arch::X86_64, Arch::X86, Arch::Aarch64, Arch::Arm],
        needs_x86: &[],
        needs_aarch64: &[],
        needs_arm: &[],
    },
    Tier {
        name: "sse2",
        feature: Some("isa-sse2"),
        arches: X86,
        needs_x86: &["sse2"],
        needs_aarch64: &[],
        needs_arm: &[],
    },
    Tier {
        name: "sse41",
        feature: Some("isa-sse41"),
        arches: X86,
        needs_x86: &["ssse3", "sse4_1"],
        needs_aarch64: &[],
        needs_arm: &[],
    },
    Tier {
        name: "avx2",
        feature: Some("isa-avx2"),
        arches: X86,
        needs_x86: &["avx", "avx2", "fma"],
        needs_aarch64: &[],
        needs_arm: &[],
    },
    Tier {
        name: "avxvnni",
        feature: Some("isa-avxvnni"),
        arches: X86,
        needs_x86: &["avx2", "fma", "avx_vnni"],
        needs_aarch64: &[],
        needs_arm: &[],
    },
    Tier {
        name: "avx512vnni",
        feature: Some("isa-avx512vnni"),
        arches: X86,
        needs_x86: &["avx512f", "avx512bw", "avx512_vnni"],
        needs_aarch64: &[],
        needs_arm: &[],
    },
    Tier {
        name: "neon",
        feature: Some("isa-neon"),
        arches: &[Arch::Aarch64, Arch::Arm],
        needs_x86: &[],
        needs_aarch64: &["asimd"],
        needs_arm: &["neon"],
    },
    Tier {
        name: "neon-dotprod",
        feature: Some("isa-neon-dotprod"),
        arches: &[Arch::Aarch64],
        needs_x86: &[],
        needs_aarch64: &["asimd", "asimddp"],
        needs_arm: &[],
    },
    Tier {
        name: "sve",
        feature: Some("isa-sve"),
        arches: &[Arch::Aarch64],
        needs_x86: &[],
        needs_aarch64: &["sve"],
        needs_arm: &[],
    },
];

pub fn tier(name: &str) -> Option<&'static Tier> {
    TIERS.iter().find(|t| t.name == name)
}

/// A qemu `-cpu` model and the tier-relevant features a guest sees under
/// QEMU 7.2 TCG (the model's features minus what TCG cannot emulate): one
/// `[[cpu]]` of qemu/cpus.toml.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuModel {
    pub arch: Arch,
    pub model: String,
    pub features: Vec<String>,
    /// What it has of the targets' own floors (`isa::arm_floor`) beyond
    /// `features`: on ARM the architecture level (`v6`, `v6k`, `v7`,
    /// `thumb2`) and the VFP generation and register bank (`vfp` = VFPv2,
    /// `vfpv3`, `vfpd32`). Not in `features`: the guard does not report them.
    #[serde(default)]
    pub base: Vec<String>,
    /// Features of the model that TCG cannot emulate and drops anyway, each
    /// with a `qemu: warning: TCG doesn't support requested feature` line
    /// on stderr. Turning them off explicitly changes nothing the guest sees
    /// but keeps stderr clean for tests that check it (tests/it/cli.rs wants
    /// one-line errors).
    #[serde(default)]
    pub tcg_off: Vec<String>,
    pub note: String,
}

impl CpuModel {
    fn has(&self, feature: &str) -> bool {
        self.features.iter().chain(&self.base).any(|f| f == feature)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CpuTable {
    cpu: Vec<CpuModel>,
}

/// The model table, in the repository as data so that adding a model is
/// one `[[cpu]]` there (and a line of qemu/README.md).
pub const CPU_TABLE: &str = include_str!("../../qemu/cpus.toml");

/// Parses a cpus.toml text; a model named twice for one arch is an error.
pub fn parse_cpu_table(text: &str) -> anyhow::Result<Vec<CpuModel>> {
    let t: CpuTable = toml::from_str(text)?;
    for (i, m) in t.cpu.iter().enumerate() {
        if t.cpu[..i].iter().any(|o| o.arch == m.arch && o.model == m.model) {
            anyhow::bail!("{} model `{}` listed twice", m.arch.name(), m.model);
        }
    }
    Ok(t.cpu)
}

/// The qemu-user CPU models the matrix may name (qemu/cpus.toml). Both x86
/// arches share the x86-64 models (qemu-i386 accepts the same names);
/// qemu32, pentium2 and pentium3 are i386-only.
pub fn cpu_models() -> &'static [CpuModel] {
    static TABLE: std::sync::OnceLock<Vec<CpuModel>> = std::sync::OnceLock::new();
    // The file is compiled in and a unit test parses it: an error here is a
    // broken build, not a user's mistake.
    TABLE.get_or_init(|| parse_cpu_table(CPU_TABLE).unwrap_or_else(|e| panic!("qemu/cpus.toml: {e:#}")))
}

/// The ARM part of `audit::target_baseline`: what every binary of a 32-bit
/// ARM target may use anywhere (its code generation's floor, beside any
/// tier), in the names of `CpuModel::base`. `armv7-unknown-linux-gnueabihf`
/// is ARMv7-A with Thumb-2 and VFPv3-D32 (Rust's code uses d16-d31;
/// Debian's armhf C library is Thumb-2); `arm-unknown-linux-*eabihf` is
/// ARMv6K with VFPv2 (the Raspberry Pi 1 and Zero's ARM1176JZF-S): LLVM's
/// 64-bit atomics there are `ldrexd`/`strexd` (ARMv6K), in std's start-up
/// too, so a plain ARMv6 (ARM1136 r0) is below it.
pub fn arm_floor(triple: &str) -> &'static [&'static str] {
    if arm_v6(triple) {
        &["v6", "v6k", "vfp"]
    } else {
        &["v7", "thumb2", "vfpv3", "vfpd32"]
    }
}

/// An ARMv6 triple (`arm-unknown-linux-gnueabihf`, `…-musleabihf`), not ARMv7.
pub fn arm_v6(triple: &str) -> bool {
    triple.split('-').next() == Some("arm")
}

/// What a CPU model lacks of what a binary for `triple` runs before any
/// check of this project can (`audit::target_floor`): a CPU lacking some is
/// *below the floor* of that target, where nothing can refuse it cleanly.
/// (On i686 that floor is the bare ISA: a pre-main check refuses CPUs
/// without SSE2 with exit 7.)
pub fn below_floor(triple: &str, m: &CpuModel) -> Vec<String> {
    crate::audit::target_floor(triple)
        .into_iter()
        .filter(|f| !m.has(f))
        .collect()
}

pub fn cpu_model(arch: Arch, model: &str) -> Option<&'static CpuModel> {
    // qemu-i386 accepts every x86-64 model name too (it runs them 32-bit).
    let models = cpu_models();
    models.iter().find(|m| m.arch == arch && m.model == model).or_else(|| {
        if arch == Arch::X86 {
            models.iter().find(|m| m.arch == Arch::X86_64 && m.model == model)
        } else {
            None
        }
    })
}

/// The `-cpu` argument for a model (see `CpuModel::tcg_off`). Under
/// qemu-i386, the x86-64 models also ask for `syscall` and `lm`, which a
/// 32-bit guest cannot have.
pub fn qemu_cpu_arg(arch: Arch, model: &str) -> String {
    if arch.family() != Family::X86 {
        return model.to_string();
    }
    let mut off: Vec<&str> = Vec::new();
    // Only the x86-64 models carry syscall and lm; the 32-bit ones
    // (qemu32, pentium2, pentium3) and max need nothing turned off.
    let x86_64_model = cpu_models().iter().find(|c| c.arch == Arch::X86_64 && c.model == model);
    if arch == Arch::X86 && x86_64_model.is_some() && model != "max" {
        off.extend(["syscall", "lm"]);
    }
    if let Some(m) = cpu_model(arch, model) {
        off.extend(m.tcg_off.iter().map(String::as_str));
    }
    if off.is_empty() {
        model.to_string()
    } else {
        let off: Vec<String> = off.iter().map(|f| format!("-{f}")).collect();
        format!("{model},{}", off.join(","))
    }
}

/// The `needs` a CPU with `have` lacks.
pub fn missing<'a>(needs: &[&'a str], have: &[String]) -> Vec<&'a str> {
    needs.iter().copied().filter(|n| !have.iter().any(|h| h == n)).collect()
}

/// The host's tier-relevant features, from /proc/cpuinfo (never assumed);
/// where there is none (a Windows host), from CPUID through std.
pub fn host_features() -> Vec<String> {
    match std::fs::read_to_string("/proc/cpuinfo") {
        Ok(text) => host_features_from_cpuinfo(&text),
        Err(_) => host_features_from_cpuid(),
    }
}

#[cfg(target_arch = "x86_64")]
fn host_features_from_cpuid() -> Vec<String> {
    let mut out = Vec::new();
    macro_rules! probe {
        ($($f:tt => $name:expr),* $(,)?) => {
            $(if std::arch::is_x86_feature_detected!($f) {
                out.push($name.to_string());
            })*
        };
    }
    probe!(
        "sse2" => "sse2", "sse3" => "sse3", "ssse3" => "ssse3", "sse4.1" => "sse4_1",
        "sse4.2" => "sse4_2", "avx" => "avx", "fma" => "fma", "avx2" => "avx2",
        "avxvnni" => "avx_vnni", "avx512f" => "avx512f", "avx512bw" => "avx512bw",
        "avx512vl" => "avx512vl", "avx512vnni" => "avx512_vnni",
    );
    out
}

#[cfg(not(target_arch = "x86_64"))]
fn host_features_from_cpuid() -> Vec<String> {
    Vec::new()
}

/// Parses the first processor's flags (x86 `flags`, ARM `Features`) into
/// guard names.
pub fn host_features_from_cpuinfo(text: &str) -> Vec<String> {
    let line = text
        .lines()
        .find(|l| {
            let key = l.split(':').next().unwrap_or("").trim();
            key == "flags" || key == "Features"
        })
        .unwrap_or("");
    let flags = line.split_once(':').map(|(_, v)| v).unwrap_or("");
    let mut out: Vec<String> = Vec::new();
    for f in flags.split_whitespace() {
        let name = match f {
            "pni" => "sse3",
            other => other,
        };
        if !out.iter().any(|o| o == name) {
            out.push(name.to_string());
        }
    }
    out
}

/// The host CPU's model name, for the report.
pub fn host_cpu_name() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with("model name") || l.starts_with("CPU part"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triples_map_to_arches() {
        assert_eq!(Arch::from_triple("x86_64-unknown-linux-gnu"), Some(Arch::X86_64));
        assert_eq!(Arch::from_triple("i686-unknown-linux-gnu"), Some(Arch::X86));
        assert_eq!(Arch::from_triple("aarch64-unknown-linux-gnu"), Some(Arch::Aarch64));
        assert_eq!(Arch::from_triple("armv7-unknown-linux-gnueabihf"), Some(Arch::Arm));
        assert_eq!(Arch::from_triple("riscv64gc-unknown-linux-gnu"), None);
    }

    #[test]
    fn cpuinfo_flags_use_guard_names() {
        let info = "processor\t: 0\nflags\t\t: fpu sse2 pni ssse3 sse4_1 avx2 avx512_vnni\nprocessor\t: 1\n";
        let f = host_features_from_cpuinfo(info);
        assert!(f.contains(&"sse3".to_string()));
        assert!(f.contains(&"avx512_vnni".to_string()));
        assert!(!f.contains(&"avx_vnni".to_string()));
        assert_eq!(missing(&["avx2", "avx_vnni"], &f), vec!["avx_vnni"]);
    }

    #[test]
    fn tcg_unsupported_features_are_turned_off() {
        assert_eq!(qemu_cpu_arg(Arch::X86_64, "Nehalem"), "Nehalem");
        assert_eq!(qemu_cpu_arg(Arch::X86, "Nehalem"), "Nehalem,-syscall,-lm");
        assert_eq!(
            qemu_cpu_arg(Arch::X86_64, "Haswell"),
            "Haswell,-pcid,-x2apic,-tsc-deadline,-hle,-invpcid,-rtm"
        );
        assert_eq!(qemu_cpu_arg(Arch::X86, "qemu32"), "qemu32");
        assert_eq!(qemu_cpu_arg(Arch::X86, "pentium2"), "pentium2");
        assert_eq!(qemu_cpu_arg(Arch::Aarch64, "max,sve=off"), "max,sve=off");
        assert_eq!(
            qemu_cpu_arg(Arch::X86, "Skylake-Server"),
            "Skylake-Server,-syscall,-lm,-pcid,-x2apic,-tsc-deadline,-hle,-invpcid,-rtm,-avx512f,-avx512dq,-rdseed,-avx512cd,-avx512bw,-avx512vl,-3dnowprefetch,-xsavec"
        );
        assert_eq!(
            qemu_cpu_arg(Arch::X86_64, "SandyBridge"),
            "SandyBridge,-x2apic,-tsc-deadline"
        );
    }

    #[test]
    fn the_cpu_table_parses_and_names_each_model_once() {
        let models = parse_cpu_table(CPU_TABLE).unwrap();
        assert!(models.len() >= 30, "{}", models.len());
        let haswell = cpu_model(Arch::X86, "Haswell").unwrap();
        assert_eq!(haswell.arch, Arch::X86_64);
        assert_eq!(
            haswell.features,
            ["sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "fma", "avx2"]
        );
        assert!(cpu_model(Arch::X86_64, "qemu32").is_none());
        assert_eq!(cpu_model(Arch::Arm, "arm1176").unwrap().base, ["v6", "v6k", "vfp"]);
        let twice = "[[cpu]]\narch = \"arm\"\nmodel = \"a\"\nfeatures = []\nnote = \"\"\n";
        let e = parse_cpu_table(&twice.repeat(2)).unwrap_err().to_string();
        assert!(e.contains("arm model `a` listed twice"), "{e}");
        let e = parse_cpu_table(&twice.replace("note", "notes"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `notes`"), "{e}");
    }

    #[test]
    fn every_i686_build_needs_sse2() {
        for t in TIERS.iter().filter(|t| t.arches.contains(&Arch::X86)) {
            assert!(t.needs(Arch::X86).contains(&"sse2"), "{}", t.name);
        }
        assert!(tier("scalar").unwrap().needs(Arch::X86_64).is_empty());
        assert_eq!(tier("sse41").unwrap().needs(Arch::X86), ["sse2", "ssse3", "sse4_1"]);
    }

    #[test]
    fn arm_floors_tell_armv6_from_armv7() {
        let m = |name| cpu_model(Arch::Arm, name).unwrap();
        let v7 = "armv7-unknown-linux-gnueabihf";
        let v6 = "arm-unknown-linux-musleabihf";
        assert!(arm_v6(v6) && arm_v6("arm-unknown-linux-gnueabihf") && !arm_v6(v7));
        assert_eq!(below_floor(v7, m("arm1176")), vec!["v7", "thumb2", "vfpv3", "vfpd32"]);
        assert!(below_floor(v6, m("arm1176")).is_empty());
        assert!(below_floor(v6, m("cortex-a7")).is_empty());
        assert!(below_floor(v7, m("cortex-a15,neon=off")).is_empty());
        assert_eq!(below_floor(v6, m("arm926")), vec!["v6", "v6k"]);
        // Every x86 and AArch64 model has its target's floor (the Pentium
        // II and III are below Rust's i686 baseline, not below what runs
        // before the pre-main check that refuses them).
        for c in cpu_models().iter().filter(|c| c.arch != Arch::Arm) {
            let triple = match c.arch {
                Arch::Aarch64 => "aarch64-unknown-linux-gnu",
                Arch::X86 => "i686-unknown-linux-gnu",
                _ => "x86_64-unknown-linux-gnu",
            };
            assert!(below_floor(triple, c).is_empty(), "{}", c.model);
        }
    }

    #[test]
    fn every_tier_has_needs_on_its_arches() {
        for t in TIERS {
            for &a in t.arches {
                let own = match a.family() {
                    Family::X86 => t.needs_x86,
                    Family::Arm if a == Arch::Aarch64 => t.needs_aarch64,
                    Family::Arm => t.needs_arm,
                };
                assert_eq!(own.is_empty(), t.name == "scalar", "{} on {:?}", t.name, a);
                assert!(own.iter().all(|f| t.needs(a).contains(f)), "{} on {:?}", t.name, a);
            }
        }
    }
}
