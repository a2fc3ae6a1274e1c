//! `harness rows`: the row names, one a line or as a JSON array (for a CI
//! strategy matrix).

use crate::config::{Host, Matrix};
use anyhow::Result;

pub fn run(json: bool) -> Result<()> {
    let root = super::matrix::root_dir();
    let m = Matrix::load(&root.join("matrix.toml"), &Host::detect())?;
    let names: Vec<&str> = m.rows.iter().map(|r| r.name.as_str()).collect();
    if json {
        println!("{}", serde_json::to_string(&names)?);
    } else {
        for n in names {
            println!("{n}");
        }
    }
    Ok(())
}
