//! `ml`: the legacy-ml command line.
//!
//! Exit codes: 0 ok, 2 usage, 3 Io, 4 Format, 5 Shape, 6 NoMem, 7 Isa.

mod cli;

use clap::Parser;
use legacy_ml::core::isa;

fn main() {
    let args = cli::Cli::parse();
    // The library treats a bad ML_PACK as unset; here a typo is an error,
    // as a bad ML_LOAD is.
    if let Err(e) = isa::pack_override() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    // The guard runs before anything can reach a kernel. `ml isa` only
    // reports, so it is the one command allowed to run on a CPU the build
    // does not support.
    if !matches!(args.command, cli::Command::Isa) {
        isa::guard();
    }
    if let Err(e) = cli::run(args) {
        eprintln!("error: {e}");
        std::process::exit(e.kind.exit_code());
    }
}
