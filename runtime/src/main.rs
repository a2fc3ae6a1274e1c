//! `ml`: the legacy-ml command line.
//!
//! Exit codes: 0 ok, 2 usage, 3 Io, 4 Format, 5 Shape, 6 NoMem, 7 Isa.
//!
//! Streams: stdout that cannot be written is an Io error (exit 3, one
//! line), except a closed pipe (`ml info m.mlb | head -c 1`), which ends
//! the command quietly with exit 0 (SIGPIPE stays ignored, as Rust sets it,
//! so the write fails with EPIPE). Diagnostics on stderr are best effort:
//! a failing stderr (`2>/dev/full`) changes no outcome.

/// `eprintln!` that never panics: a failing stderr is ignored.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `writeln!` into a `String` (formatting into memory cannot fail).
macro_rules! outln {
    ($out:expr $(, $($arg:tt)*)?) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out $(, $($arg)*)?);
    }};
}

mod cli;

use clap::Parser;
use legacy_ml::guard;
use legacy_ml::model::streaming;

fn main() {
    let args = cli::Cli::parse();
    // The library treats a bad ML_PACK as unset; here a typo is an error,
    // as a bad ML_LOAD is.
    if let Err(e) = streaming::pack_override() {
        note!("error: {e}");
        std::process::exit(2);
    }
    // The guard runs before anything can reach a kernel. `ml isa` only
    // reports, so it is the one command allowed to run on a CPU the build
    // does not support.
    if !matches!(args.command, cli::Command::Isa) {
        guard::guard();
    }
    if let Err(e) = cli::run(args) {
        // The reader of stdout has gone: nothing is left to say to it.
        if cli::stdout_closed() {
            std::process::exit(0);
        }
        note!("error: {e}");
        std::process::exit(e.kind.exit_code());
    }
}
