//! Starting the target `ml` binary from a test: directly, or through the
//! emulator the test binary itself runs under.

use std::process::Command;

/// The target triple this test binary was built for (runtime/build.rs).
const TARGET: &str = env!("LEGACY_ML_TARGET");

/// The command that starts a target binary, split into words; empty to
/// start it directly.
///
/// `ML_TEST_RUNNER` when set, even empty: the harness sets it for every row
/// (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu cortex-a53", or empty
/// natively and under Wine). Otherwise cargo's own
/// `CARGO_TARGET_<TRIPLE>_RUNNER`, which cargo leaves in the environment of
/// the test binary it starts through it, so that a plain `cargo test
/// --target aarch64-unknown-linux-gnu` with a qemu runner starts `ml` the same
/// way. A runner set in `.cargo/config.toml` (`[target.<triple>] runner`)
/// reaches the test binary through no variable and is not seen: set
/// `ML_TEST_RUNNER` as well there. A Windows test binary never takes cargo's
/// runner: under Wine it is a Windows process already, and starts `ml.exe`
/// directly.
pub fn runner() -> Vec<String> {
    runner_from(|name| std::env::var(name).ok())
}

/// cargo's variable for this target: the triple in upper case, `_` for `-`.
fn cargo_runner_var() -> String {
    format!("CARGO_TARGET_{}_RUNNER", TARGET.to_uppercase().replace(['-', '.'], "_"))
}

fn runner_from(var: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let words = |s: String| s.split_whitespace().map(str::to_string).collect();
    if let Some(r) = var("ML_TEST_RUNNER") {
        return words(r);
    }
    if cfg!(windows) {
        return Vec::new();
    }
    var(&cargo_runner_var()).map(words).unwrap_or_default()
}

/// Whether `ml` runs under an emulator. (This and `ml_words` serve the
/// tests that wrap `ml` in `sh`, which are Unix only.)
#[cfg(unix)]
pub fn emulated() -> bool {
    !runner().is_empty()
}

/// The `ml` binary cargo built alongside this test.
pub fn ml_exe() -> &'static str {
    env!("CARGO_BIN_EXE_ml")
}

/// The `ml` command with `args`, through the runner, not started yet.
pub fn ml_command(args: &[&str]) -> Command {
    // This binary may run no kernel before it starts `ml`, but on a CPU the
    // build does not support it must refuse itself (exit 7), not fail
    // because the `ml` it started was refused.
    legacy_ml::guard::guard();
    let mut cmd = match runner().split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg(ml_exe());
            c
        }
        None => Command::new(ml_exe()),
    };
    cmd.args(args);
    cmd
}

/// `runner()` then `ml`: the words to put after a wrapper command such as
/// `sh -c '…; exec "$@"'` or `timeout`.
#[cfg(unix)]
pub fn ml_words() -> Vec<String> {
    let mut w = runner();
    w.push(ml_exe().to_string());
    w
}

#[test]
fn ml_test_runner_wins_and_cargo_runner_is_the_fallback() {
    let cargo = cargo_runner_var();
    assert!(cargo.starts_with("CARGO_TARGET_") && cargo.ends_with("_RUNNER"));
    assert!(
        cargo
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
        "{cargo}"
    );
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        let cargo = cargo.clone();
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name || (*k == "cargo" && name == cargo))
                .map(|(_, v)| v.to_string())
        }
    };
    const QEMU: &str = "qemu-aarch64 -L /usr/aarch64-linux-gnu";
    let qemu = QEMU;
    let words: Vec<String> = qemu.split(' ').map(str::to_string).collect();
    assert_eq!(runner_from(env(&[("ML_TEST_RUNNER", QEMU), ("cargo", "other")])), words);
    // Set but empty: started directly, whatever cargo's runner is.
    assert!(runner_from(env(&[("ML_TEST_RUNNER", " "), ("cargo", QEMU)])).is_empty());
    assert!(runner_from(env(&[])).is_empty());
    let fallback = runner_from(env(&[("cargo", QEMU)]));
    if cfg!(windows) {
        assert!(fallback.is_empty());
    } else {
        assert_eq!(fallback, words);
    }
}
