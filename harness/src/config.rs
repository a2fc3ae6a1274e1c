//! matrix.toml: the rows, their targets and the CPUs each runs on.
//!
//! Loading is strict: unknown keys, duplicate names and impossible rows
//! (a tier on an arch it does not exist on, a CPU model qemu does not have,
//! an expectation the CPU's features contradict) are errors naming the row.

use crate::isa::{self, Arch, Family};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    #[serde(default)]
    pub settings: Settings,
    /// Per target triple: how to link, run and disassemble its binaries.
    #[serde(default)]
    pub target: BTreeMap<String, TargetSpec>,
    #[serde(default, rename = "row")]
    pub rows: Vec<Row>,
}

#[derive(Debug, Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Golden snapshots (insta files, JSON body) relative to the repo root.
    #[serde(default = "default_golden")]
    pub golden: Vec<String>,
    /// End-to-end limit: max |Δ| / max |golden| per step.
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
    /// Per process run (a test binary, an `ml` call), in seconds.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

fn default_golden() -> Vec<String> {
    vec![
        "golden/logits_q8_0.snap".into(),
        "golden/logits_q4_0.snap".into(),
        "golden/logits_stories260k_q8_0.snap".into(),
        "golden/logits_q8_0_long_batched.snap".into(),
    ]
}
fn default_tolerance() -> f64 {
    1e-3
}
fn default_timeout() -> u64 {
    600
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            golden: default_golden(),
            tolerance: default_tolerance(),
            timeout_secs: default_timeout(),
        }
    }
}

#[derive(Debug, Deserialize, Serialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// Cross linker (cargo builder: CARGO_TARGET_<TRIPLE>_LINKER).
    pub linker: Option<String>,
    /// qemu-user binary for this target (none for Windows targets).
    #[serde(default)]
    pub qemu: String,
    /// Windows targets: the Wine loader that runs their `native` cells on a
    /// Linux x86-64 host (the CPU is the host's). On a Windows host they
    /// run natively.
    pub wine: Option<String>,
    /// Guest root for the dynamic loader (qemu -L).
    pub sysroot: Option<String>,
    /// binutils objdump that reads this target's binaries.
    pub objdump: String,
    /// Debian packages providing the linker, sysroot, qemu and objdump.
    #[serde(default)]
    pub apt: Vec<String>,
    /// Arguments the linker command needs before rustc's own (e.g. `python3`
    /// with `-m ziglang cc -target …`): cargo takes a linker path only, so
    /// the cargo builder writes a wrapper that runs `linker linker_args…`.
    #[serde(default)]
    pub linker_args: Vec<String>,
    /// Build std from the toolchain's rust-src (`-Zbuild-std`, with
    /// RUSTC_BOOTSTRAP=1 on stable) instead of a rustup target, for targets
    /// whose rust-std cannot be installed here. Cargo builder only.
    #[serde(default)]
    pub build_std: bool,
    /// rustflags every row of this target gets before its own (e.g.
    /// `-Clink-self-contained=no`: with build-std there are no rustup
    /// self-contained C start-up objects; the linker brings its own).
    /// Cargo builder only.
    #[serde(default)]
    pub rustflags: Vec<String>,
    /// PyPI packages (pinned, `name==version`) the linker needs; installed
    /// with `python3 -m pip install` when missing.
    #[serde(default)]
    pub pip: Vec<String>,
}

#[derive(Debug, Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Row {
    pub name: String,
    /// Spec §3 tier: scalar, sse2, sse41, avx2, avxvnni, avx512vnni, neon,
    /// neon-dotprod, sve.
    pub tier: String,
    pub target: String,
    /// Extra runtime features beside the tier: `threads`, `asm`.
    #[serde(default)]
    pub features: Vec<String>,
    /// Extra rustflags for this row only (e.g. ARMv7 `-Ctarget-feature=+neon`).
    #[serde(default)]
    pub rustflags: Vec<String>,
    /// The whole row is compile-only, with this reason (e.g. a tier not
    /// implemented yet). The cells keep the expectations they will have.
    pub compile_only: Option<String>,
    pub cpus: Vec<Cell>,
}

#[derive(Debug, Deserialize, Serialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Cell {
    /// `native`, or a qemu `-cpu` model of the row target's qemu binary.
    /// A compile-only cell may name a CPU class that nothing here has.
    pub cpu: String,
    pub expect: Expect,
    /// Required for compile-only, not allowed otherwise.
    pub reason: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Expect {
    /// Kernel tests and the golden pass.
    Pass,
    /// The guard exits 7 naming the missing feature.
    Reject,
    /// Built (and audited) but not run here.
    CompileOnly,
    /// `native` only: pass where this host has what the tier needs, else
    /// reject; resolved to one of them when the matrix is loaded. For the
    /// tiers whose support differs between x86-64 hosts.
    Host,
    /// A qemu CPU below the target's own floor (`isa::below_floor`, e.g.
    /// an ARMv6 core for an ARMv7 build), where the C library's start-up
    /// code faults before any check can run. The process must die of
    /// SIGILL with qemu's trace showing the fault outside the executable's
    /// code and no instruction of the executable run (a `reason` is
    /// required).
    BelowFloor,
}

impl Expect {
    pub fn name(self) -> &'static str {
        match self {
            Expect::Pass => "pass",
            Expect::Reject => "reject",
            Expect::CompileOnly => "compile-only",
            Expect::Host => "host",
            Expect::BelowFloor => "below-floor",
        }
    }
}

/// Where a cell runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    Native,
    Qemu(String),
    /// Compile-only cells naming a CPU nothing here has.
    Nowhere(String),
}

impl Cell {
    /// Native, a qemu model known for `arch`, or (compile-only cells only,
    /// checked by validation) a CPU class nothing here has.
    pub fn place(&self, arch: Arch) -> Place {
        if self.cpu == "native" {
            Place::Native
        } else if isa::cpu_model(arch, &self.cpu).is_some() || self.expect != Expect::CompileOnly {
            Place::Qemu(self.cpu.clone())
        } else {
            Place::Nowhere(self.cpu.clone())
        }
    }

    /// Grid column label: `native`, `qemu:<model>`, or the compile-only label.
    pub fn label(&self, arch: Arch) -> String {
        match self.place(arch) {
            Place::Native => "native".into(),
            Place::Qemu(m) => format!("qemu:{m}"),
            Place::Nowhere(l) => l,
        }
    }
}

impl Row {
    pub fn arch(&self) -> Arch {
        Arch::from_triple(&self.target).expect("validated")
    }
    pub fn tier(&self) -> &'static isa::Tier {
        isa::tier(&self.tier).expect("validated")
    }
    /// A Windows target (PE binaries): its `native` cells run under Wine on
    /// a Linux host, and it has no qemu cells.
    pub fn is_windows(&self) -> bool {
        is_windows_triple(&self.target)
    }
    /// Whether this row's binaries run on the host CPU without qemu: same
    /// arch, or an i686 build linked statically (`+crt-static`: it needs no
    /// 32-bit loader) on an x86-64 host.
    pub fn runs_natively_on(&self, host: Arch) -> bool {
        let arch = self.arch();
        arch.runs_natively_on(host)
            || (arch == Arch::X86
                && host == Arch::X86_64
                && rustflag_target_features(&self.rustflags)
                    .iter()
                    .any(|f| f == "crt-static"))
    }

    /// All runtime cargo features for this row (tier first).
    pub fn cargo_features(&self) -> Vec<String> {
        let mut f: Vec<String> = self.tier().feature.map(|s| s.to_string()).into_iter().collect();
        f.extend(self.features.iter().cloned());
        f
    }
}

pub fn is_windows_triple(triple: &str) -> bool {
    triple.contains("-windows-")
}

/// What validation knows about the machine (so tests can fake one).
#[derive(Debug, Clone)]
pub struct Host {
    pub arch: Option<Arch>,
    pub features: Vec<String>,
}

impl Host {
    pub fn detect() -> Host {
        Host {
            arch: Arch::host(),
            features: isa::host_features(),
        }
    }
}

const EXTRA_FEATURES: &[&str] = &["threads", "asm"];

const X86_TARGET_FEATURES: &[&str] = &[
    "sse",
    "sse2",
    "sse3",
    "ssse3",
    "sse4.1",
    "sse4.2",
    "popcnt",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "bmi1",
    "bmi2",
    "lzcnt",
    "avxvnni",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512dq",
    "avx512vnni",
    "movbe",
    "xsave",
    "cmpxchg16b",
    "aes",
    "pclmulqdq",
];
const ARM_TARGET_FEATURES: &[&str] = &[
    "neon", "dotprod", "sve", "sve2", "v7", "v8", "vfp2", "vfp3", "vfp4", "d32", "thumb2", "fp-armv8", "fp16", "i8mm",
    "lse", "rcpc", "crc", "aes", "sha2", "bf16", "fullfp16",
];

impl Matrix {
    pub fn load(path: &Path, host: &Host) -> Result<Matrix> {
        let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        Matrix::parse(&text, host).with_context(|| format!("{} is invalid", path.display()))
    }

    pub fn parse(text: &str, host: &Host) -> Result<Matrix> {
        let mut m: Matrix = toml::from_str(text)?;
        m.resolve_native(host, false)?;
        m.validate(host)?;
        Ok(m)
    }

    /// Sets `native` cells to pass or reject by this host's CPU: the cells
    /// that say `expect = "host"` and, with `all`, every native pass/reject
    /// cell too. Returns the pass/reject cells it changed.
    fn resolve_native(&mut self, host: &Host, all: bool) -> Result<Vec<String>> {
        let (mut changed, mut errors) = (Vec::new(), Vec::new());
        for row in &mut self.rows {
            // A row with an unknown target or tier: validate names it.
            let (Some(arch), Some(tier)) = (Arch::from_triple(&row.target), isa::tier(&row.tier)) else {
                continue;
            };
            let needs = tier.needs(arch);
            let native_ok = host.arch.is_some_and(|h| row.runs_natively_on(h));
            for cell in &mut row.cpus {
                if cell.expect == Expect::Host && (cell.cpu != "native" || !native_ok) {
                    errors.push(format!(
                        "row `{}`: cpu `{}`: expect = \"host\" fits only a `native` cell that this host can run",
                        row.name, cell.cpu
                    ));
                    continue;
                }
                let follow = cell.expect == Expect::Host
                    || (all && cell.cpu == "native" && cell.expect != Expect::CompileOnly && native_ok);
                if !follow {
                    continue;
                }
                let want = if isa::missing(&needs, &host.features).is_empty() {
                    Expect::Pass
                } else {
                    Expect::Reject
                };
                if cell.expect != Expect::Host && want != cell.expect {
                    changed.push(format!(
                        "{}: native {} → {} (this host's CPU)",
                        row.name,
                        cell.expect.name(),
                        want.name()
                    ));
                }
                cell.expect = want;
            }
        }
        if !errors.is_empty() {
            bail!("{}", errors.join("\n"));
        }
        Ok(changed)
    }

    /// Loads with every `native` pass/reject cell re-derived from this
    /// host's /proc/cpuinfo (pass if it has what the tier needs, else
    /// reject): for CI runners whose CPU is not the reference machine's.
    /// Returns the cells it changed, for the report.
    pub fn load_native_from_host(path: &Path, host: &Host) -> Result<(Matrix, Vec<String>)> {
        let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        Matrix::parse_native_from_host(&text, host).with_context(|| format!("{} is invalid", path.display()))
    }

    /// [`Matrix::load_native_from_host`] on the text of a matrix.toml.
    pub fn parse_native_from_host(text: &str, host: &Host) -> Result<(Matrix, Vec<String>)> {
        let mut m: Matrix = toml::from_str(text)?;
        let changed = m.resolve_native(host, true)?;
        m.validate(host)?;
        Ok((m, changed))
    }

    pub fn row(&self, name: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.name == name)
    }

    pub fn validate(&self, host: &Host) -> Result<()> {
        let mut errors: Vec<String> = Vec::new();
        if !(self.settings.tolerance > 0.0 && self.settings.tolerance < 1.0) {
            errors.push(format!(
                "settings.tolerance must be in (0, 1), got {}",
                self.settings.tolerance
            ));
        }
        if self.settings.golden.is_empty() {
            errors.push("settings.golden lists no snapshot".into());
        }
        if self.rows.is_empty() {
            errors.push("no [[row]]".into());
        }
        for (triple, t) in &self.target {
            if Arch::from_triple(triple).is_none() {
                errors.push(format!("[target.{triple}]: unknown architecture"));
            }
            if (t.qemu.is_empty() && t.wine.is_none()) || t.objdump.is_empty() {
                errors.push(format!("[target.{triple}]: qemu (or wine) and objdump must be named"));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for row in &self.rows {
            if !seen.insert(row.name.as_str()) {
                errors.push(format!("row `{}`: duplicate name", row.name));
            }
            for e in row_errors(row, &self.target, host) {
                errors.push(format!("row `{}`: {e}", row.name));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            bail!("{}", errors.join("\n"))
        }
    }
}

fn row_errors(row: &Row, targets: &BTreeMap<String, TargetSpec>, host: &Host) -> Vec<String> {
    let mut errs = Vec::new();
    if row.name.is_empty() || !row.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        errs.push("name must be non-empty [A-Za-z0-9._-] (it names the row's target dir)".to_string());
    }
    let Some(arch) = Arch::from_triple(&row.target) else {
        errs.push(format!("target `{}`: unknown architecture", row.target));
        return errs;
    };
    if !targets.contains_key(&row.target) {
        errs.push(format!(
            "target `{}` has no [target.{}] table (linker, qemu, objdump)",
            row.target, row.target
        ));
    }
    let Some(tier) = isa::tier(&row.tier) else {
        let names: Vec<_> = isa::TIERS.iter().map(|t| t.name).collect();
        errs.push(format!("unknown tier `{}` (one of {})", row.tier, names.join(", ")));
        return errs;
    };
    if arch == Arch::Arm && isa::arm_v6(&row.target) && tier.feature.is_some() {
        errs.push(format!(
            "impossible: tier `{}` needs more than `{}`'s ARMv6 floor allows (no NEON there): only scalar",
            tier.name, row.target
        ));
        return errs;
    }
    if !tier.arches.contains(&arch) {
        errs.push(format!(
            "impossible: tier `{}` ({}) does not exist on {} (`{}`)",
            tier.name,
            tier.feature.unwrap_or("scalar"),
            arch.name(),
            row.target
        ));
        return errs;
    }
    for f in &row.features {
        if !EXTRA_FEATURES.contains(&f.as_str()) {
            errs.push(format!(
                "feature `{f}`: only {} go in `features` (the ISA goes in `tier`)",
                EXTRA_FEATURES.join(", ")
            ));
        }
    }
    for tf in rustflag_target_features(&row.rustflags) {
        let other_family = match arch.family() {
            Family::X86 => ARM_TARGET_FEATURES.contains(&tf.as_str()) && !X86_TARGET_FEATURES.contains(&tf.as_str()),
            Family::Arm => X86_TARGET_FEATURES.contains(&tf.as_str()) && !ARM_TARGET_FEATURES.contains(&tf.as_str()),
        };
        if other_family {
            errs.push(format!(
                "impossible: rustflags target feature `{tf}` does not exist on {}",
                arch.name()
            ));
        }
    }
    if row.compile_only.as_deref().is_some_and(|r| r.trim().is_empty()) {
        errs.push("compile_only needs a reason".to_string());
    }
    if row.cpus.is_empty() {
        errs.push("no cpus".to_string());
    }
    let needs = tier.needs(arch);
    let mut cpus_seen = std::collections::HashSet::new();
    for cell in &row.cpus {
        let c = &cell.cpu;
        if !cpus_seen.insert(c.as_str()) {
            errs.push(format!("cpu `{c}` listed twice"));
        }
        match (cell.expect, &cell.reason) {
            (Expect::CompileOnly, None) => errs.push(format!("cpu `{c}`: compile-only needs a reason")),
            (Expect::CompileOnly, Some(r)) if r.trim().is_empty() => {
                errs.push(format!("cpu `{c}`: compile-only needs a reason"))
            }
            (Expect::BelowFloor, None) => errs.push(format!("cpu `{c}`: below-floor needs a reason")),
            (Expect::BelowFloor, Some(r)) if r.trim().is_empty() => {
                errs.push(format!("cpu `{c}`: below-floor needs a reason"))
            }
            (Expect::Pass | Expect::Reject, Some(_)) => errs.push(format!(
                "cpu `{c}`: `reason` is only for compile-only and below-floor cells"
            )),
            _ => {}
        }
        if cell.expect == Expect::Reject && needs.is_empty() {
            errs.push(format!(
                "impossible: cpu `{c}` expects reject, but tier `{}` needs no CPU feature",
                tier.name
            ));
            continue;
        }
        let have: Vec<String> = match cell.place(arch) {
            Place::Nowhere(_) => continue,
            Place::Native => {
                let Some(host_arch) = host.arch else {
                    errs.push(format!(
                        "cpu `native`: unknown host architecture `{}`",
                        std::env::consts::ARCH
                    ));
                    continue;
                };
                if cell.expect == Expect::BelowFloor {
                    errs.push(
                        "cpu `native`: below-floor is for qemu models (the host runs its own target)".to_string(),
                    );
                    continue;
                }
                if !row.runs_natively_on(host_arch) {
                    if cell.expect != Expect::CompileOnly {
                        errs.push(format!(
                            "impossible: cpu `native` cannot run {} binaries on this {} host",
                            arch.name(),
                            host_arch.name()
                        ));
                    }
                    continue;
                }
                host.features.clone()
            }
            Place::Qemu(model) if row.is_windows() => {
                if cell.expect != Expect::CompileOnly {
                    errs.push(format!(
                        "cpu `{model}`: a Windows row runs only `native` (under Wine on a Linux host): qemu-user cannot run PE binaries"
                    ));
                }
                continue;
            }
            Place::Qemu(model) => match isa::cpu_model(arch, &model) {
                Some(m) => {
                    let below = isa::below_floor(&row.target, m);
                    match (cell.expect, below.is_empty()) {
                        (Expect::BelowFloor, true) => errs.push(format!(
                            "impossible: cpu `{model}` expects below-floor, but it has all of {}'s floor ({})",
                            row.target,
                            crate::audit::target_floor(&row.target).join(" ")
                        )),
                        (Expect::Pass | Expect::Reject, false) => errs.push(format!(
                            "impossible: cpu `{model}` expects {}, but it is below {}'s floor (lacks {}): expect below-floor",
                            cell.expect.name(),
                            row.target,
                            below.join(" ")
                        )),
                        _ => {}
                    }
                    if cell.expect == Expect::BelowFloor {
                        continue;
                    }
                    m.features.clone()
                }
                None => {
                    if cell.expect != Expect::CompileOnly {
                        errs.push(format!(
                            "cpu `{model}`: not a known {} qemu model (add it to qemu/cpus.toml and qemu/README.md)",
                            arch.name()
                        ));
                    }
                    continue;
                }
            },
        };
        let missing = isa::missing(&needs, &have);
        let what = if c == "native" { "this host" } else { c.as_str() };
        match cell.expect {
            Expect::Pass if !missing.is_empty() => errs.push(format!(
                "impossible: cpu `{c}` expects pass, but {what} lacks {} (tier `{}` needs {})",
                missing.join(" "),
                tier.name,
                needs.join(" ")
            )),
            Expect::Reject if missing.is_empty() => errs.push(format!(
                "impossible: cpu `{c}` expects reject, but {what} has everything tier `{}` needs ({}), so it runs there",
                tier.name,
                needs.join(" ")
            )),
            _ => {}
        }
    }
    errs
}

/// Target features a row's rustflags enable (`-Ctarget-feature=+a,+b` or
/// `-C target-feature=+a`).
pub fn rustflag_target_features(flags: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut prev_c = false;
    for f in flags {
        let spec = if let Some(s) = f.strip_prefix("-Ctarget-feature=") {
            Some(s)
        } else if prev_c {
            f.strip_prefix("target-feature=")
        } else {
            None
        };
        prev_c = f == "-C";
        if let Some(spec) = spec {
            for part in spec.split(',') {
                if let Some(name) = part.strip_prefix('+') {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zen4() -> Host {
        let f = "sse2 sse3 ssse3 sse4_1 sse4_2 avx fma avx2 avx512f avx512bw avx512vl avx512_vnni";
        Host {
            arch: Some(Arch::X86_64),
            features: f.split(' ').map(String::from).collect(),
        }
    }

    const TARGETS: &str = r#"
[target.x86_64-unknown-linux-gnu]
qemu = "qemu-x86_64"
objdump = "objdump"
[target.aarch64-unknown-linux-gnu]
linker = "aarch64-linux-gnu-gcc"
qemu = "qemu-aarch64"
sysroot = "/usr/aarch64-linux-gnu"
objdump = "aarch64-linux-gnu-objdump"
"#;

    fn parse(rows: &str) -> Result<Matrix> {
        Matrix::parse(&format!("{TARGETS}\n{rows}"), &zen4())
    }

    fn err(rows: &str) -> String {
        format!("{:#}", parse(rows).expect_err("must be rejected"))
    }

    #[test]
    fn a_good_row_loads() {
        let m = parse(
            r#"
[[row]]
name = "avx2"
tier = "avx2"
target = "x86_64-unknown-linux-gnu"
cpus = [
  { cpu = "native", expect = "pass" },
  { cpu = "Haswell", expect = "pass" },
  { cpu = "Nehalem", expect = "reject" },
]
"#,
        )
        .unwrap();
        assert_eq!(m.rows[0].cargo_features(), vec!["isa-avx2"]);
        assert_eq!(m.rows[0].cpus[1].label(Arch::X86_64), "qemu:Haswell");
        assert_eq!(m.settings.tolerance, 1e-3);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = err(r#"
[[row]]
name = "scalar"
tier = "scalar"
target = "x86_64-unknown-linux-gnu"
cpu_list = []
cpus = [{ cpu = "native", expect = "pass" }]
"#);
        assert!(e.contains("unknown field `cpu_list`"), "{e}");
        let e = err(r#"
[[row]]
name = "scalar"
tier = "scalar"
target = "x86_64-unknown-linux-gnu"
cpus = [{ cpu = "native", expect = "pass", expected = "pass" }]
"#);
        assert!(e.contains("unknown field `expected`"), "{e}");
    }

    #[test]
    fn duplicate_names_are_errors() {
        let e = err(r#"
[[row]]
name = "scalar"
tier = "scalar"
target = "x86_64-unknown-linux-gnu"
cpus = [{ cpu = "native", expect = "pass" }]
[[row]]
name = "scalar"
tier = "sse2"
target = "x86_64-unknown-linux-gnu"
cpus = [{ cpu = "native", expect = "pass" }, { cpu = "native", expect = "pass" }]
"#);
        assert!(e.contains("row `scalar`: duplicate name"), "{e}");
        assert!(e.contains("cpu `native` listed twice"), "{e}");
    }

    #[test]
    fn x86_tier_on_arm_is_impossible() {
        let e = err(r#"
[[row]]
name = "avx2-arm"
tier = "avx2"
target = "aarch64-unknown-linux-gnu"
cpus = [{ cpu = "max", expect = "pass" }]
"#);
        assert!(e.contains("row `avx2-arm`: impossible: tier `avx2`"), "{e}");
        let e = err(r#"
[[row]]
name = "neon-x86"
tier = "scalar"
target = "x86_64-unknown-linux-gnu"
rustflags = ["-Ctarget-feature=+neon"]
cpus = [{ cpu = "native", expect = "pass" }]
"#);
        assert!(
            e.contains("row `neon-x86`: impossible: rustflags target feature `neon`"),
            "{e}"
        );
    }

    #[test]
    fn reject_on_a_cpu_that_runs_the_tier_is_impossible() {
        // This host has AVX-512 VNNI: a reject there can never happen.
        let e = err(r#"
[[row]]
name = "avx512vnni"
tier = "avx512vnni"
target = "x86_64-unknown-linux-gnu"
cpus = [{ cpu = "native", expect = "reject" }, { cpu = "Haswell", expect = "pass" }]
"#);
        assert!(
            e.contains("row `avx512vnni`: impossible: cpu `native` expects reject, but this host has everything"),
            "{e}"
        );
        assert!(
            e.contains("cpu `Haswell` expects pass, but Haswell lacks avx512f avx512bw avx512_vnni"),
            "{e}"
        );
    }

    #[test]
    fn scalar_cannot_be_rejected_and_models_must_exist() {
        let e = err(r#"
[[row]]
name = "s"
tier = "scalar"
target = "aarch64-unknown-linux-gnu"
cpus = [{ cpu = "cortex-a53", expect = "reject" }, { cpu = "cortex-x9", expect = "pass" }, { cpu = "native", expect = "pass" }]
"#);
        assert!(
            e.contains("cpu `cortex-a53` expects reject, but tier `scalar` needs no CPU feature"),
            "{e}"
        );
        assert!(e.contains("cpu `cortex-x9`: not a known aarch64 qemu model"), "{e}");
        assert!(e.contains("cpu `native` cannot run aarch64 binaries"), "{e}");
    }

    #[test]
    fn compile_only_needs_a_reason_and_only_it_has_one() {
        let e = err(r#"
[[row]]
name = "avxvnni"
tier = "avxvnni"
target = "x86_64-unknown-linux-gnu"
cpus = [{ cpu = "AVX-VNNI hardware", expect = "compile-only" }, { cpu = "Haswell", expect = "reject", reason = "x" }]
"#);
        assert!(
            e.contains("cpu `AVX-VNNI hardware`: compile-only needs a reason"),
            "{e}"
        );
        assert!(
            e.contains("cpu `Haswell`: `reason` is only for compile-only and below-floor cells"),
            "{e}"
        );
    }

    #[test]
    fn unknown_target_table_and_extra_features() {
        let e = err(r#"
[[row]]
name = "s"
tier = "scalar"
target = "armv7-unknown-linux-gnueabihf"
features = ["isa-neon", "threads"]
cpus = [{ cpu = "cortex-a7", expect = "pass" }]
"#);
        assert!(e.contains("has no [target.armv7-unknown-linux-gnueabihf] table"), "{e}");
        assert!(e.contains("feature `isa-neon`: only threads, asm"), "{e}");
    }

    const ARM_TARGETS: &str = r#"
[target.armv7-unknown-linux-gnueabihf]
linker = "arm-linux-gnueabihf-gcc"
qemu = "qemu-arm"
objdump = "arm-linux-gnueabihf-objdump"
[target.arm-unknown-linux-musleabihf]
linker = "python3"
linker_args = ["-m", "ziglang", "cc"]
pip = ["ziglang==0.17.1"]
build_std = true
rustflags = ["-Clink-self-contained=no"]
qemu = "qemu-arm"
objdump = "arm-linux-gnueabihf-objdump"
"#;

    #[test]
    fn below_floor_is_for_cpus_below_the_targets_floor_and_only_them() {
        let ok = parse(&format!(
            r#"{ARM_TARGETS}
[[row]]
name = "v7"
tier = "scalar"
target = "armv7-unknown-linux-gnueabihf"
cpus = [{{ cpu = "cortex-a7", expect = "pass" }}, {{ cpu = "arm1176", expect = "below-floor", reason = "ld.so is Thumb-2" }}]
[[row]]
name = "v6"
tier = "scalar"
target = "arm-unknown-linux-musleabihf"
cpus = [{{ cpu = "arm1176", expect = "pass" }}, {{ cpu = "cortex-a7", expect = "pass" }}]
"#
        ))
        .unwrap();
        assert_eq!(ok.rows[0].cpus[1].expect, Expect::BelowFloor);
        assert!(ok.target["arm-unknown-linux-musleabihf"].build_std);
        let e = err(&format!(
            r#"{ARM_TARGETS}
[[row]]
name = "v7"
tier = "scalar"
target = "armv7-unknown-linux-gnueabihf"
cpus = [
  {{ cpu = "arm1176", expect = "pass" }},
  {{ cpu = "cortex-a7", expect = "below-floor", reason = "x" }},
  {{ cpu = "arm11mpcore", expect = "below-floor" }},
]
[[row]]
name = "v6-neon"
tier = "neon"
target = "arm-unknown-linux-musleabihf"
cpus = [{{ cpu = "arm1176", expect = "reject" }}]
"#
        ));
        assert!(
            e.contains("cpu `arm1176` expects pass, but it is below armv7-unknown-linux-gnueabihf's floor (lacks v7 thumb2 vfpv3 vfpd32): expect below-floor"),
            "{e}"
        );
        assert!(
            e.contains("cpu `cortex-a7` expects below-floor, but it has all of armv7-unknown-linux-gnueabihf's floor"),
            "{e}"
        );
        assert!(e.contains("cpu `arm11mpcore`: below-floor needs a reason"), "{e}");
        assert!(
            e.contains("row `v6-neon`: impossible: tier `neon` needs more than"),
            "{e}"
        );
        let e = err(r#"
[[row]]
name = "s"
tier = "scalar"
target = "x86_64-unknown-linux-gnu"
cpus = [{ cpu = "native", expect = "below-floor", reason = "x" }, { cpu = "qemu64", expect = "below-floor", reason = "x" }]
"#);
        assert!(e.contains("cpu `native`: below-floor is for qemu models"), "{e}");
        assert!(e.contains("cpu `qemu64` expects below-floor, but it has all of"), "{e}");
    }

    #[test]
    fn rustflags_features_are_parsed_in_both_spellings() {
        let f = rustflag_target_features(&[
            "-C".into(),
            "target-feature=+neon,-d32".into(),
            "-Ctarget-feature=+v7".into(),
        ]);
        assert_eq!(f, vec!["neon", "v7"]);
    }

    #[test]
    fn native_cells_can_follow_the_host() {
        let dir = std::env::temp_dir().join(format!("harness-native-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("matrix.toml");
        std::fs::write(
            &path,
            format!(
                "{TARGETS}\n[[row]]\nname = \"avx512vnni\"\ntier = \"avx512vnni\"\ntarget = \"x86_64-unknown-linux-gnu\"\ncpus = [{{ cpu = \"native\", expect = \"pass\" }}]\n"
            ),
        )
        .unwrap();
        // A Haswell-class runner: `pass` on native is impossible there...
        let haswell = Host {
            arch: Some(Arch::X86_64),
            features: isa::cpu_model(Arch::X86_64, "Haswell").unwrap().features.clone(),
        };
        let e = format!("{:#}", Matrix::load(&path, &haswell).unwrap_err());
        assert!(e.contains("expects pass, but this host lacks"), "{e}");
        // ...unless native cells follow the host, which is reported.
        let (m, changed) = Matrix::load_native_from_host(&path, &haswell).unwrap();
        assert_eq!(m.rows[0].cpus[0].expect, Expect::Reject);
        assert_eq!(changed, vec!["avx512vnni: native pass → reject (this host's CPU)"]);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn expect_host_follows_the_hosts_cpu_on_native_cells_only() {
        let row = |cpu: &str| {
            format!(
                "{TARGETS}\n[[row]]\nname = \"avxvnni\"\ntier = \"avxvnni\"\ntarget = \"x86_64-unknown-linux-gnu\"\ncpus = [{{ cpu = \"{cpu}\", expect = \"host\" }}]\n"
            )
        };
        let host_like = |model: &str| Host {
            arch: Some(Arch::X86_64),
            features: isa::cpu_model(Arch::X86_64, model).unwrap().features.clone(),
        };
        // Haswell lacks AVX-VNNI: the native cell expects the guard's reject.
        let m = Matrix::parse(&row("native"), &host_like("Haswell")).unwrap();
        assert_eq!(m.rows[0].cpus[0].expect, Expect::Reject);
        // A host with everything the tier needs runs it.
        let mut rich = host_like("Haswell");
        rich.features.push("avx_vnni".to_string());
        let m = Matrix::parse(&row("native"), &rich).unwrap();
        assert_eq!(m.rows[0].cpus[0].expect, Expect::Pass);
        // A qemu model has fixed features: `host` means nothing there.
        let e = format!("{:#}", Matrix::parse(&row("Haswell"), &rich).unwrap_err());
        assert!(e.contains("fits only a `native` cell"), "{e}");
    }

    #[test]
    fn windows_rows_run_native_cells_only_and_their_target_names_wine() {
        let win = r#"
[target.x86_64-pc-windows-gnu]
linker = "x86_64-w64-mingw32-gcc"
wine = "/usr/lib/wine/wine64"
objdump = "x86_64-w64-mingw32-objdump"
"#;
        let m = parse(&format!(
            "{win}\n[[row]]\nname = \"w\"\ntier = \"avx512vnni\"\ntarget = \"x86_64-pc-windows-gnu\"\ncpus = [{{ cpu = \"native\", expect = \"host\" }}]\n"
        ))
        .unwrap();
        let row = &m.rows[0];
        assert!(row.is_windows());
        assert!(!m.row("w").unwrap().cargo_features().is_empty());
        // The CPU under Wine is the host's: this Zen 4 runs the tier.
        assert_eq!(row.cpus[0].expect, Expect::Pass);
        assert_eq!(m.target["x86_64-pc-windows-gnu"].qemu, "");
        // qemu-user cannot run a PE binary.
        let e = err(&format!(
            "{win}\n[[row]]\nname = \"w\"\ntier = \"sse2\"\ntarget = \"x86_64-pc-windows-gnu\"\ncpus = [{{ cpu = \"Haswell\", expect = \"pass\" }}]\n"
        ));
        assert!(e.contains("cpu `Haswell`: a Windows row runs only `native`"), "{e}");
        // A target table needs a way to run its binaries.
        let e = err(&format!(
            "{}\n[[row]]\nname = \"w\"\ntier = \"sse2\"\ntarget = \"x86_64-pc-windows-gnu\"\ncpus = [{{ cpu = \"native\", expect = \"pass\" }}]\n",
            win.replace("wine = \"/usr/lib/wine/wine64\"\n", "")
        ));
        assert!(e.contains("qemu (or wine) and objdump must be named"), "{e}");
    }

    #[test]
    fn a_static_i686_row_runs_natively_on_x86_64() {
        let m = parse(
            r#"
[target.i686-unknown-linux-gnu]
linker = "i686-linux-gnu-gcc"
qemu = "qemu-i386"
objdump = "objdump"
[[row]]
name = "i686"
tier = "scalar"
target = "i686-unknown-linux-gnu"
rustflags = ["-Ctarget-feature=+crt-static"]
cpus = [{ cpu = "native", expect = "pass" }, { cpu = "qemu32", expect = "pass" }]
"#,
        )
        .unwrap();
        assert!(m.rows[0].runs_natively_on(Arch::X86_64));
        let e = err(r#"
[target.i686-unknown-linux-gnu]
linker = "i686-linux-gnu-gcc"
qemu = "qemu-i386"
objdump = "objdump"
[[row]]
name = "i686-dyn"
tier = "scalar"
target = "i686-unknown-linux-gnu"
cpus = [{ cpu = "native", expect = "pass" }]
"#);
        assert!(
            e.contains("cpu `native` cannot run x86 binaries on this x86_64 host"),
            "{e}"
        );
    }

    #[test]
    fn the_repository_matrix_is_valid_on_a_zen4_host() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../matrix.toml");
        let m = Matrix::load(&path, &zen4()).unwrap();
        for tier in isa::TIERS {
            assert!(
                m.rows.iter().any(|r| r.tier == tier.name),
                "no row for tier {}",
                tier.name
            );
        }
    }
}
