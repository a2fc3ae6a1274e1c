//! `harness doctor`: what the matrix needs on this machine, what is there
//! and what is missing (with how to install it), the host CPU, the runtime's
//! tiers, and (with `--probe-cpus`) a re-measurement of the qemu CPU table.

use crate::builder::{self, BuilderKind};
use crate::config::{Host, Matrix};
use crate::isa;
use crate::runner::Runner;
use crate::setup;
use anyhow::Result;
use xshell::Shell;

pub fn run(builder: BuilderKind, probe_cpus: bool) -> Result<()> {
    let root = super::matrix::root_dir();
    let sh = Shell::new()?;
    sh.change_dir(&root);
    let host = Host::detect();
    println!("repo root:     {}", root.display());
    println!("host:          {} ({})", isa::host_cpu_name(), std::env::consts::ARCH);
    let tier_feats: Vec<&str> = isa::TIERS
        .iter()
        .flat_map(|t| t.needs_x86.iter().chain(t.needs_aarch64).chain(t.needs_arm))
        .copied()
        .collect();
    let relevant: Vec<&String> = host
        .features
        .iter()
        .filter(|f| tier_feats.contains(&f.as_str()))
        .collect();
    println!(
        "host features: {}",
        relevant.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")
    );
    let (kind, note) = builder.resolve(&sh);
    println!("builder:       {note}");
    println!();
    println!("toolchain:");
    let m = match Matrix::load(&root.join("matrix.toml"), &host) {
        Ok(m) => {
            println!("  matrix.toml: valid, {} rows", m.rows.len());
            m
        }
        Err(e) => {
            println!("  matrix.toml: INVALID: {e:#}");
            return Ok(());
        }
    };
    for (tool, ver) in setup::tool_versions(&sh, &m) {
        println!("  {tool:<28} {ver}");
    }
    let feats = super::matrix::runtime_features(&root).unwrap_or_default();
    println!();
    println!("runtime tiers (runtime/Cargo.toml features):");
    for t in isa::TIERS {
        let have = t.feature.is_none_or(|f| feats.iter().any(|x| x == f));
        println!(
            "  {:<13} {:<18} {}",
            t.name,
            t.feature.unwrap_or("(default)"),
            if have {
                "implemented"
            } else {
                "not yet (rows compile-only)"
            }
        );
    }
    let host_triple = super::matrix::host_triple(&sh)?;
    let targets = setup::installed_targets(&sh);
    println!();
    println!("per row ({} builder):", kind.name());
    let mut any_missing = false;
    for row in &m.rows {
        let needs = setup::needs(&sh, row, &m, kind, &host_triple, &targets);
        let missing: Vec<String> = needs.iter().filter(|n| !n.present).map(|n| n.missing_line()).collect();
        if missing.is_empty() {
            println!(
                "  {:<22} ok ({})",
                row.name,
                needs.iter().map(|n| n.what.as_str()).collect::<Vec<_>>().join(", ")
            );
        } else {
            any_missing = true;
            println!("  {:<22} {}", row.name, missing.join("; "));
        }
    }
    if m.rows.iter().any(|r| r.is_windows()) && !cfg!(windows) {
        println!();
        println!("Windows rows (run under Wine here, on this host's CPU):");
        for (triple, spec) in m.target.iter().filter(|(t, _)| crate::config::is_windows_triple(t)) {
            let wine = spec.wine.clone().unwrap_or_default();
            println!(
                "  {triple}: wine {}, linker {}, objdump {}",
                if setup::which(&wine).is_some() {
                    wine.as_str()
                } else {
                    "MISSING (apt-get install wine64)"
                },
                spec.linker.as_deref().unwrap_or("(default)"),
                spec.objdump
            );
        }
        let dir = crate::wine::dir(&root);
        let prefix = dir.join("prefix");
        println!(
            "  prefix {}: {}",
            prefix.display(),
            if prefix.join("system.reg").exists() {
                "created"
            } else {
                "created by the first matrix run"
            }
        );
        println!(
            "  stand-in bcryptprimitives.dll ({}, built with {}): {}",
            crate::wine::STANDIN_SOURCE,
            crate::wine::MINGW_GCC,
            if setup::which(crate::wine::MINGW_GCC).is_none() {
                "cannot be built: the mingw-w64 gcc is missing (apt-get install gcc-mingw-w64-x86-64)"
            } else if dir.join("bcryptprimitives.dll").exists() {
                "built and installed in the prefix (Wine lacks the DLL)"
            } else {
                "built and installed by the matrix if Wine lacks the DLL (Wine 8 does)"
            }
        );
    }
    if any_missing {
        println!("\n`harness matrix` installs the missing pieces itself when run as root with apt-get (or reports the rows unavailable).");
    }
    if probe_cpus {
        println!();
        println!("qemu CPU table check (qemu/cpus.toml against ml isa of each built scalar row under every model of its arch):");
        for row in m.rows.iter().filter(|r| r.tier == "scalar" && !r.is_windows()) {
            let ml = builder::target_dir(&root, &row.name)
                .join(&row.target)
                .join("release/ml");
            if !ml.exists() {
                println!(
                    "  {:<22} not built yet (run `harness matrix --only {}` first)",
                    row.name, row.name
                );
                continue;
            }
            let Some(spec) = m.target.get(&row.target) else {
                continue;
            };
            let arch = row.arch();
            for model in isa::cpu_models()
                .iter()
                .filter(|c| c.arch == arch || (arch == isa::Arch::X86 && c.arch == isa::Arch::X86_64))
            {
                let below = isa::below_floor(&row.target, model);
                if !below.is_empty() {
                    // Nothing of that build runs there, `ml isa` included.
                    println!(
                        "  {:<8} {:<22} {:<45} below {}'s floor (lacks {})",
                        arch.name(),
                        model.model,
                        "-",
                        row.target,
                        below.join(" ")
                    );
                    continue;
                }
                let sysroot = if row.target == host_triple {
                    None
                } else {
                    spec.sysroot.clone()
                };
                let r = Runner::Qemu {
                    bin: spec.qemu.clone(),
                    cpu: model.model.clone(),
                    cpu_arg: isa::qemu_cpu_arg(arch, &model.model),
                    sysroot,
                };
                let seen = match r.run(&sh, &ml, &["isa".to_string()], &[], 60) {
                    Ok(o) => match o.stdout.lines().find_map(|l| l.strip_prefix("host features:")) {
                        Some(v) => v
                            .split_whitespace()
                            .filter(|f| *f != "(none)")
                            .map(String::from)
                            .collect::<Vec<_>>(),
                        // Below the target's floor (i686 on a Pentium II/III)
                        // the pre-main check refuses even `ml isa` and says
                        // what the CPU has.
                        None => crate::outcome::parse_guard(&o.stderr)
                            .map(|g| g.has)
                            .unwrap_or_default(),
                    },
                    Err(_) => vec![],
                };
                let want = &model.features;
                let verdict = if seen == *want {
                    format!("matches ({})", model.note)
                } else {
                    format!("DIFFERS: table {:?}", want)
                };
                println!(
                    "  {:<8} {:<22} {:<45} {verdict}",
                    arch.name(),
                    model.model,
                    seen.join(" ")
                );
            }
        }
    }
    Ok(())
}
