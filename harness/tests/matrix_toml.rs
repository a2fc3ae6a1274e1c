//! matrix.toml parsing through the harness library, as the `matrix_toml`
//! fuzz target drives it (fuzz/README.md): a bad config is an error naming
//! what is wrong, never a panic, and the text-based entry points agree with
//! the file-based ones.

use harness::config::{Expect, Host, Matrix};
use harness::isa::Arch;
use std::path::Path;

fn zen4() -> Host {
    Host {
        arch: Some(Arch::X86_64),
        features: "sse2 sse3 ssse3 sse4_1 sse4_2 avx fma avx2 avx512f avx512bw avx512vl avx512_vnni"
            .split(' ')
            .map(String::from)
            .collect(),
    }
}

fn haswell() -> Host {
    Host {
        arch: Some(Arch::X86_64),
        features: "sse2 sse3 ssse3 sse4_1 sse4_2 avx fma avx2"
            .split(' ')
            .map(String::from)
            .collect(),
    }
}

const X86: &str = "[target.x86_64-unknown-linux-gnu]\nqemu = \"qemu-x86_64\"\nobjdump = \"objdump\"\n";

fn err(text: &str, host: &Host) -> String {
    let plain = format!("{:#}", Matrix::parse(text, host).expect_err("must be rejected"));
    let native = format!(
        "{:#}",
        Matrix::parse_native_from_host(text, host).expect_err("must be rejected")
    );
    assert_eq!(plain, native, "the two parsers disagree");
    plain
}

#[test]
fn the_repository_matrix_follows_the_host_from_text_as_from_the_file() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../matrix.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let (from_text, changed_text) = Matrix::parse_native_from_host(&text, &haswell()).unwrap();
    let (from_file, changed_file) = Matrix::load_native_from_host(&path, &haswell()).unwrap();
    assert_eq!(changed_text, changed_file);
    assert_eq!(from_text.rows.len(), from_file.rows.len());
    // The AVX-512 VNNI and AVX-VNNI rows' native cells say `host`: on a
    // Haswell host both become reject on either path (not a change to
    // report, since the file asked for it); on a Zen 4, AVX-512 VNNI passes
    // and AVX-VNNI (which Zen 4 lacks) rejects.
    let native = |m: &Matrix, row: &str| {
        m.row(row)
            .and_then(|r| r.cpus.iter().find(|c| c.cpu == "native"))
            .map(|c| c.expect)
    };
    let plain = Matrix::parse(&text, &haswell()).unwrap();
    for m in [&from_text, &plain] {
        assert_eq!(native(m, "avx512vnni"), Some(Expect::Reject));
        assert_eq!(native(m, "avxvnni"), Some(Expect::Reject));
    }
    assert!(!changed_text.iter().any(|c| c.starts_with("avx")), "{changed_text:?}");
    let zen = Matrix::parse(&text, &zen4()).unwrap();
    assert_eq!(native(&zen, "avx512vnni"), Some(Expect::Pass));
    assert_eq!(native(&zen, "avxvnni"), Some(Expect::Reject));
}

#[test]
fn native_from_host_still_reports_a_pass_or_reject_it_overrides() {
    let text = format!(
        "{X86}[[row]]\nname = \"v\"\ntier = \"avx512vnni\"\ntarget = \"x86_64-unknown-linux-gnu\"\ncpus = [{{ cpu = \"native\", expect = \"pass\" }}]\n"
    );
    let (m, changed) = Matrix::parse_native_from_host(&text, &haswell()).unwrap();
    assert_eq!(m.rows[0].cpus[0].expect, Expect::Reject);
    assert_eq!(changed, vec!["v: native pass → reject (this host's CPU)"]);
}

#[test]
fn an_unknown_architecture_is_an_error_on_both_paths() {
    // parse_native_from_host skips rows it cannot place before validating;
    // validation must still name them rather than a later `expect` panic.
    let text = format!(
        "{X86}[[row]]\nname = \"m\"\ntier = \"scalar\"\ntarget = \"mips-unknown-linux-gnu\"\ncpus = [{{ cpu = \"native\", expect = \"pass\" }}]\n"
    );
    let e = err(&text, &zen4());
    assert!(
        e.contains("row `m`: target `mips-unknown-linux-gnu`: unknown architecture"),
        "{e}"
    );
    let e = err(
        &text,
        &Host {
            arch: None,
            features: vec![],
        },
    );
    assert!(e.contains("unknown architecture"), "{e}");
}

#[test]
fn malformed_settings_and_rows_are_errors() {
    for (text, needle) in [
        ("", "no [[row]]"),
        ("[[row]]\n", "missing field `name`"),
        (
            "[settings]\ntolerance = nan\n",
            "settings.tolerance must be in (0, 1), got NaN",
        ),
        (
            "[settings]\ntolerance = 1.0\n",
            "settings.tolerance must be in (0, 1), got 1",
        ),
        ("[settings]\ngolden = []\n", "settings.golden lists no snapshot"),
        ("[settings]\ntimeout_secs = -1\n", "invalid value"),
        (
            "[[row]]\nname = \"a\"\ntier = \"scalar\"\ntarget = \"x86_64-unknown-linux-gnu\"\ncpus = []\n",
            "no cpus",
        ),
        (
            "[target.sparc-sun-solaris]\nqemu = \"\"\nobjdump = \"\"\n",
            "[target.sparc-sun-solaris]: unknown architecture",
        ),
        ("row = 3\n", "invalid type"),
        ("[[row]\n", "invalid table header"),
    ] {
        let e = err(&format!("{text}\n{X86}"), &zen4());
        assert!(e.contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn a_row_name_that_is_not_a_directory_name_is_an_error() {
    for name in ["", "../up", "a/b", "rows with spaces", "ünïcode"] {
        let text = format!(
            "{X86}[[row]]\nname = \"{name}\"\ntier = \"scalar\"\ntarget = \"x86_64-unknown-linux-gnu\"\ncpus = [{{ cpu = \"native\", expect = \"pass\" }}]\n"
        );
        let e = err(&text, &zen4());
        assert!(e.contains("name must be non-empty [A-Za-z0-9._-]"), "{name:?}: {e}");
    }
}
