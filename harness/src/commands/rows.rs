//! `harness rows`: the row names, one a line or as a JSON array (for a CI
//! strategy matrix). The nightly workflow runs the Windows rows on a
//! Windows runner (`--windows`) and the others one job each
//! (`--no-windows`).

use crate::config::{Host, Matrix};
use anyhow::Result;

/// Which rows to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    All,
    Windows,
    NotWindows,
}

pub fn run(json: bool, which: Which) -> Result<()> {
    let root = super::matrix::root_dir();
    let m = Matrix::load(&root.join("matrix.toml"), &Host::detect())?;
    let names: Vec<&str> = m
        .rows
        .iter()
        .filter(|r| match which {
            Which::All => true,
            Which::Windows => r.is_windows(),
            Which::NotWindows => !r.is_windows(),
        })
        .map(|r| r.name.as_str())
        .collect();
    if json {
        println!("{}", serde_json::to_string(&names)?);
    } else {
        for n in names {
            println!("{n}");
        }
    }
    Ok(())
}
