//! `harness`: legacy-ml's build/verification matrix.
//!
//! `cargo run -p harness -- matrix` builds every row of matrix.toml for its
//! target, runs the runtime's test binaries and `ml logits` on each of the
//! row's CPUs (natively or under qemu-user), compares with the scalar
//! golden, checks that CPUs lacking the ISA are refused cleanly, audits the
//! disassembly, and writes report/report.{md,json,html}.
//!
//! The modules live in the library (`src/lib.rs`) so that tests and the
//! fuzz targets (`fuzz/`) can reach matrix.toml parsing; this is the CLI.

use clap::{Parser, Subcommand};
use harness::builder::BuilderKind;
use harness::commands;
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "harness", about = "legacy-ml build/verification matrix", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build and verify every row of matrix.toml; write report/.
    Matrix(commands::matrix::MatrixArgs),
    /// Print what the matrix needs here, what is present and what is missing.
    Doctor {
        #[arg(long, value_enum, default_value_t = BuilderKind::Auto)]
        builder: BuilderKind,
        /// Re-measure the qemu CPU-model table with the built scalar rows.
        #[arg(long)]
        probe_cpus: bool,
    },
    /// Merge several report.json files (e.g. one per CI job) into one report.
    Merge {
        /// Output directory.
        #[arg(long, default_value = "report")]
        out: PathBuf,
        #[arg(required = true)]
        reports: Vec<PathBuf>,
    },
    /// Audit one built binary's disassembly (the matrix does this per row).
    Audit {
        binary: PathBuf,
        #[arg(long, default_value = "x86_64-unknown-linux-gnu")]
        target: String,
        /// Features the binary's guard checks (as `ml isa` prints them).
        #[arg(long, value_delimiter = ',')]
        guard: Vec<String>,
        /// The rustflags it was built with.
        #[arg(long, allow_hyphen_values = true)]
        rustflags: Vec<String>,
        #[arg(long, short)]
        verbose: bool,
    },
    /// List the matrix's row names (--json: a JSON array for CI).
    Rows {
        #[arg(long)]
        json: bool,
        /// Only the Windows rows (the nightly windows-latest job's).
        #[arg(long, conflicts_with = "no_windows")]
        windows: bool,
        /// Every row but the Windows ones.
        #[arg(long)]
        no_windows: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Matrix(a) => commands::matrix::run(a),
        Command::Doctor { builder, probe_cpus } => commands::doctor::run(builder, probe_cpus).map(|()| true),
        Command::Merge { out, reports } => commands::merge::run(&reports, &out),
        Command::Audit {
            binary,
            target,
            guard,
            rustflags,
            verbose,
        } => commands::audit::run(&binary, &target, &guard, &rustflags, verbose),
        Command::Rows {
            json,
            windows,
            no_windows,
        } => {
            let which = match (windows, no_windows) {
                (true, _) => commands::rows::Which::Windows,
                (_, true) => commands::rows::Which::NotWindows,
                _ => commands::rows::Which::All,
            };
            commands::rows::run(json, which).map(|()| true)
        }
    };
    match result {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    }
}
