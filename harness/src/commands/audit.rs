//! `harness audit`: the static guard proof for one binary, outside a
//! matrix run (e.g. a hand-built `ml`).

use crate::audit::{self, Baselines};
use crate::config::{Host, Matrix};
use crate::isa::Arch;
use anyhow::{Context, Result};
use std::path::Path;
use xshell::Shell;

pub fn run(binary: &Path, target: &str, guard: &[String], rustflags: &[String], verbose: bool) -> Result<bool> {
    let root = super::matrix::root_dir();
    let m = Matrix::load(&root.join("matrix.toml"), &Host::detect())?;
    let arch = Arch::from_triple(target).with_context(|| format!("unknown target {target}"))?;
    let objdump = m
        .target
        .get(target)
        .map(|t| t.objdump.clone())
        .unwrap_or_else(|| "objdump".into());
    let sh = Shell::new()?;
    let r = audit::audit_binary(
        &sh,
        &objdump,
        arch,
        binary,
        &Baselines::for_row(target, rustflags, guard.to_vec()),
    )?;
    println!("{}", r.summary());
    for e in &r.exceptions {
        println!("allowed: {e}");
    }
    let shown = if verbose {
        r.violations.len()
    } else {
        r.violations.len().min(20)
    };
    for v in &r.violations[..shown] {
        println!(
            "{} `{}` uses {} ({}×, e.g. `{}` at {})",
            audit::rule_name(v.rule),
            v.symbol,
            v.feature,
            v.count,
            v.example,
            v.addr
        );
    }
    if verbose {
        for k in &r.kernel_functions {
            println!("kernel: {k}");
        }
    }
    Ok(r.ok)
}
