//! `harness merge`: several rows' report.json (e.g. one per CI job) into one
//! report.{md,json,html}.

use crate::report::{self, Report};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

pub fn merge(reports: Vec<Report>) -> Result<Report> {
    let mut it = reports.into_iter();
    let Some(mut out) = it.next() else {
        bail!("nothing to merge")
    };
    for r in it {
        out.ok &= r.ok;
        out.elapsed_secs = out.elapsed_secs.max(r.elapsed_secs);
        for (tool, ver) in r.toolchain {
            if !out.toolchain.iter().any(|(t, v)| *t == tool && *v == ver) {
                out.toolchain.push((tool, ver));
            }
        }
        for s in r.setup {
            if !out.setup.contains(&s) {
                out.setup.push(s);
            }
        }
        if !out.builder.contains(&r.builder) {
            out.builder = format!("{}, {}", out.builder, r.builder);
        }
        if out.mode != r.mode {
            out.mode = format!("{} + {}", out.mode, r.mode);
        }
        for (target, note) in r.target_notes {
            out.target_notes.entry(target).or_insert(note);
        }
        for row in r.rows {
            if out.rows.iter().any(|x| x.name == row.name) {
                bail!("row {} appears in two reports", row.name);
            }
            out.rows.push(row);
        }
    }
    out.generated_utc = report::utc_now();
    Ok(out)
}

pub fn run(files: &[PathBuf], out: &Path) -> Result<bool> {
    let reports = files.iter().map(|f| report::read(f)).collect::<Result<Vec<_>>>()?;
    let merged = merge(reports)?;
    report::write_all(out, &merged)?;
    println!("{}", report::grid_markdown(&merged));
    println!(
        "merged {} reports ({} rows) into {}: {}",
        files.len(),
        merged.rows.len(),
        out.display(),
        if merged.ok { "PASS" } else { "FAIL" }
    );
    Ok(merged.ok)
}
