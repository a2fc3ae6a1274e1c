//! What each row needs on this machine, installing what can be installed
//! (rustup targets; Debian packages when apt-get and root are there). What
//! stays missing makes the row `unavailable: missing X (install: …)`.

use crate::builder::BuilderKind;
use crate::config::{Expect, Matrix, Place, Row};
use crate::progress::Progress;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// Finds a program on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.exists().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    let exe = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    std::env::split_paths(&path).map(|d| d.join(&exe)).find(|p| p.is_file())
}

/// One thing a row needs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Need {
    pub what: String,
    pub present: bool,
    /// How to get it.
    pub install: String,
    /// Debian packages that provide it (empty: not an apt thing).
    #[serde(default)]
    pub apt: Vec<String>,
    /// A rustup target to add.
    #[serde(default)]
    pub rustup_target: Option<String>,
    /// A rustup component to add (rust-src, for build-std).
    #[serde(default)]
    pub rustup_component: Option<String>,
    /// PyPI packages (`name==version`) to install with pip.
    #[serde(default)]
    pub pip: Vec<String>,
}

impl Need {
    pub fn missing_line(&self) -> String {
        format!("missing {} (install: {})", self.what, self.install)
    }
}

pub fn installed_targets(sh: &Shell) -> Vec<String> {
    cmd!(sh, "rustup target list --installed")
        .quiet()
        .ignore_stderr()
        .read()
        .map(|s| s.lines().map(|l| l.trim().to_string()).collect())
        .unwrap_or_default()
}

/// Whether a row runs any cell under qemu.
fn uses_qemu(row: &Row) -> bool {
    row.compile_only.is_none()
        && !row.is_windows()
        && row
            .cpus
            .iter()
            .any(|c| c.expect != Expect::CompileOnly && matches!(c.place(row.arch()), Place::Qemu(_)))
}

/// Whether a row runs any cell under Wine here: a Windows row on a host
/// that is not Windows.
fn uses_wine(row: &Row) -> bool {
    row.compile_only.is_none()
        && row.is_windows()
        && !cfg!(windows)
        && row.cpus.iter().any(|c| c.expect != Expect::CompileOnly)
}

/// Everything `row` needs with `builder`.
pub fn needs(
    sh: &Shell,
    row: &Row,
    m: &Matrix,
    builder: BuilderKind,
    host_triple: &str,
    targets: &[String],
) -> Vec<Need> {
    let mut v = Vec::new();
    let spec = m.target.get(&row.target).cloned().unwrap_or_default();
    let apt = spec.apt.clone();
    let apt_hint = |pkgs: &[String]| {
        if pkgs.is_empty() {
            "see qemu/README.md".to_string()
        } else {
            format!("apt-get install {}", pkgs.join(" "))
        }
    };
    if builder == BuilderKind::Cross {
        v.push(Need {
            what: "cross".into(),
            present: which("cross").is_some(),
            install: "cargo install cross --locked, plus docker or podman".into(),
            apt: vec![],
            rustup_target: None,
            ..Default::default()
        });
    } else {
        if row.target != host_triple && spec.build_std {
            v.push(Need {
                what: "rust-src (rustup component: std is built from source for this target)".into(),
                present: has_rust_src(sh),
                install: "rustup component add rust-src".into(),
                rustup_component: Some("rust-src".into()),
                ..Default::default()
            });
        }
        for p in &spec.pip {
            v.push(Need {
                what: format!("python package {p} (the linker)"),
                present: has_pip(sh, p),
                install: format!("python3 -m pip install {p}"),
                pip: vec![p.clone()],
                ..Default::default()
            });
        }
        if row.target != host_triple && !spec.build_std {
            v.push(Need {
                what: format!("rustup target {}", row.target),
                present: targets.iter().any(|t| t == &row.target),
                install: format!("rustup target add {}", row.target),
                apt: vec![],
                rustup_target: Some(row.target.clone()),
                ..Default::default()
            });
        }
        if row.target != host_triple {
            if let Some(linker) = &spec.linker {
                v.push(Need {
                    what: format!("linker {linker}"),
                    present: which(linker).is_some(),
                    install: apt_hint(&apt),
                    apt: apt.clone(),
                    rustup_target: None,
                    ..Default::default()
                });
            }
        }
        if uses_qemu(row) {
            v.push(Need {
                what: spec.qemu.clone(),
                present: which(&spec.qemu).is_some(),
                install: apt_hint(&apt),
                apt: apt.clone(),
                rustup_target: None,
                ..Default::default()
            });
            if let Some(root) = &spec.sysroot {
                v.push(Need {
                    what: format!("sysroot {root}"),
                    present: Path::new(root).join("lib").exists(),
                    install: apt_hint(&apt),
                    apt: apt.clone(),
                    rustup_target: None,
                    ..Default::default()
                });
            }
        }
        if uses_wine(row) {
            let wine = spec.wine.clone().unwrap_or_default();
            v.push(Need {
                what: format!("wine {wine}"),
                present: !wine.is_empty() && which(&wine).is_some(),
                install: apt_hint(&apt),
                apt: apt.clone(),
                rustup_target: None,
                ..Default::default()
            });
            // The stand-in bcryptprimitives.dll (crate::wine) is built with it.
            if spec.linker.as_deref() != Some(crate::wine::MINGW_GCC) {
                v.push(Need {
                    what: format!("{} (the stand-in DLL)", crate::wine::MINGW_GCC),
                    present: which(crate::wine::MINGW_GCC).is_some(),
                    install: apt_hint(&apt),
                    apt: apt.clone(),
                    rustup_target: None,
                    ..Default::default()
                });
            }
        }
        if cfg!(unix) {
            v.push(Need {
                what: "timeout (coreutils)".into(),
                present: which("timeout").is_some(),
                install: "apt-get install coreutils".into(),
                apt: vec!["coreutils".into()],
                rustup_target: None,
                ..Default::default()
            });
        }
    }
    v.push(Need {
        what: spec.objdump.clone(),
        present: which(&spec.objdump).is_some(),
        install: apt_hint(&apt),
        apt,
        rustup_target: None,
        ..Default::default()
    });
    v
}

/// Whether the active toolchain has rust-src (what -Zbuild-std compiles).
fn has_rust_src(sh: &Shell) -> bool {
    cmd!(sh, "rustc --print sysroot")
        .quiet()
        .ignore_stderr()
        .read()
        .is_ok_and(|root| Path::new(root.trim()).join("lib/rustlib/src/rust/library/std").exists())
}

/// Whether pip has `name==version` installed (exactly that version).
fn has_pip(sh: &Shell, spec: &str) -> bool {
    let (name, version) = spec.split_once("==").unwrap_or((spec, ""));
    let code = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))";
    cmd!(sh, "python3 -c {code} {name}")
        .quiet()
        .ignore_stderr()
        .read()
        .is_ok_and(|v| version.is_empty() || v.trim() == version)
}

#[cfg(unix)]
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(not(unix))]
fn is_root() -> bool {
    false
}

/// Installs what the rows miss, where possible. Returns what was done.
pub fn ensure(sh: &Shell, all: &[Vec<Need>], allow_install: bool, progress: &Progress) -> Result<Vec<String>> {
    let mut actions = Vec::new();
    let missing: Vec<&Need> = all.iter().flatten().filter(|n| !n.present).collect();
    if missing.is_empty() {
        return Ok(actions);
    }
    let mut seen = BTreeSet::new();
    let lines: Vec<String> = missing
        .iter()
        .map(|n| n.missing_line())
        .filter(|l| seen.insert(l.clone()))
        .collect();
    progress.step("setup", &format!("missing: {}", lines.join("; ")));
    if !allow_install {
        actions.push("--no-install: nothing installed".into());
        return Ok(actions);
    }
    let targets: BTreeSet<String> = missing.iter().filter_map(|n| n.rustup_target.clone()).collect();
    if !targets.is_empty() {
        if which("rustup").is_some() {
            let t: Vec<String> = targets.into_iter().collect();
            progress.step("setup", &format!("rustup target add {}", t.join(" ")));
            let tr = &t;
            match cmd!(sh, "rustup target add {tr...}").quiet().ignore_stdout().run() {
                Ok(()) => actions.push(format!("rustup target add {}", t.join(" "))),
                Err(e) => actions.push(format!("rustup target add {} failed: {e}", t.join(" "))),
            }
        } else {
            actions.push("rustup not found: cannot add targets".into());
        }
    }
    let components: BTreeSet<String> = missing.iter().filter_map(|n| n.rustup_component.clone()).collect();
    for c in components {
        progress.step("setup", &format!("rustup component add {c}"));
        match cmd!(sh, "rustup component add {c}").quiet().ignore_stdout().run() {
            Ok(()) => actions.push(format!("rustup component add {c}")),
            Err(e) => actions.push(format!("rustup component add {c} failed: {e}")),
        }
    }
    let pip: BTreeSet<String> = missing.iter().flat_map(|n| n.pip.iter().cloned()).collect();
    if !pip.is_empty() {
        let p: Vec<String> = pip.into_iter().collect();
        progress.step("setup", &format!("python3 -m pip install {}", p.join(" ")));
        let pr = &p;
        match cmd!(sh, "python3 -m pip install --quiet {pr...}")
            .quiet()
            .ignore_stdout()
            .run()
        {
            Ok(()) => actions.push(format!("python3 -m pip install {}", p.join(" "))),
            Err(e) => actions.push(format!("python3 -m pip install {} failed: {e}", p.join(" "))),
        }
    }
    let pkgs: BTreeSet<String> = missing.iter().flat_map(|n| n.apt.iter().cloned()).collect();
    if !pkgs.is_empty() {
        let pkgs: Vec<String> = pkgs.into_iter().collect();
        if which("apt-get").is_none() {
            actions.push(format!("apt-get not found: cannot install {}", pkgs.join(" ")));
        } else if !is_root() {
            actions.push(format!("not root: cannot apt-get install {}", pkgs.join(" ")));
        } else {
            progress.step("setup", "apt-get update");
            let upd = cmd!(sh, "apt-get update -qq")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .quiet()
                .ignore_stdout()
                .run();
            if let Err(e) = upd {
                actions.push(format!("apt-get update failed: {e}"));
            }
            progress.step("setup", &format!("apt-get install {}", pkgs.join(" ")));
            let pr = &pkgs;
            match cmd!(sh, "apt-get install -y -qq --no-install-recommends {pr...}")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .quiet()
                .ignore_stdout()
                .run()
            {
                Ok(()) => actions.push(format!("apt-get install {}", pkgs.join(" "))),
                Err(e) => actions.push(format!("apt-get install {} failed: {e}", pkgs.join(" "))),
            }
        }
    }
    Ok(actions)
}

/// Versions of the tools the report records.
pub fn tool_versions(sh: &Shell, m: &Matrix) -> Vec<(String, String)> {
    let mut v = Vec::new();
    let first_line = |prog: &str, args: &[&str]| -> String {
        match cmd!(sh, "{prog} {args...}")
            .quiet()
            .ignore_status()
            .ignore_stderr()
            .read()
        {
            Ok(s) if !s.trim().is_empty() => s.lines().next().unwrap_or("").trim().to_string(),
            _ => "not found".to_string(),
        }
    };
    v.push(("rustc".to_string(), first_line("rustc", &["--version"])));
    v.push(("cargo".to_string(), first_line("cargo", &["--version"])));
    v.push(("rustup".to_string(), first_line("rustup", &["--version"])));
    let mut seen = BTreeSet::new();
    for spec in m.target.values() {
        for tool in [&spec.qemu, &spec.objdump] {
            if !tool.is_empty() && seen.insert(tool.clone()) {
                let ver = if which(tool).is_some() {
                    first_line(tool, &["--version"])
                } else {
                    "not found".into()
                };
                v.push((tool.clone(), ver));
            }
        }
        if let Some(w) = &spec.wine {
            if seen.insert(w.clone()) {
                let ver = if which(w).is_some() {
                    first_line(w, &["--version"])
                } else {
                    "not found".into()
                };
                v.push((w.clone(), ver));
            }
        }
        if let Some(l) = &spec.linker {
            if seen.insert(l.clone()) {
                let ver = if which(l).is_some() {
                    first_line(l, &["--version"])
                } else {
                    "not found".into()
                };
                v.push((l.clone(), ver));
            }
        }
    }
    let cross = if which("cross").is_some() {
        first_line("cross", &["--version"])
    } else {
        "not found".into()
    };
    v.push(("cross".into(), cross));
    v
}
