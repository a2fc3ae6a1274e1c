//! The CPU guard (DESIGN.md §6): what this build requires, the message shape, and
//! (given a runner for a CPU that lacks the tier) a clean rejection.
//!
//! `ML_TEST_REJECT_RUNNER`: a runner command for a CPU this build must
//! refuse, e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu cortex-a53" for
//! the neon-dotprod build, "qemu-arm -L /usr/arm-linux-gnueabihf -cpu
//! cortex-a15,neon=off" for ARMv7 NEON. `ML_TEST_REJECT_MISSING`: the
//! feature(s) the message must name. Without them that test only reports
//! that it was skipped.

use legacy_ml::guard;
use legacy_ml::kernels;

#[test]
fn the_host_passes_and_needs_what_the_tier_binds() {
    guard::guard();
    assert_eq!(guard::required_features(), kernels::REQUIRED_FEATURES);
    assert_eq!(guard::build_tier(), kernels::TIER);
    assert!(guard::check().is_ok());
    assert!(guard::missing_features().is_empty());
    let host = guard::host_features();
    for f in kernels::REQUIRED_FEATURES {
        assert!(host.contains(f), "guard passed but the host lacks {f}: {host:?}");
    }
}

/// ARMv7 NEON: the `.init_array` check prints, without formatting (it must
/// not loop), exactly what `check()` would print for a CPU without NEON, and
/// exits with the Isa code.
#[cfg(all(target_arch = "arm", target_os = "linux", feature = "isa-neon"))]
#[test]
fn armv7_early_check_says_what_check_says() {
    use guard::early;
    guard::guard();
    assert_eq!(kernels::REQUIRED_FEATURES, ["neon"]);
    assert_eq!(early::EXIT_CODE, legacy_ml::ErrorKind::Isa.exit_code());
    for (has, msg) in [("vfpv4", early::MESSAGE_VFPV4), ("", early::MESSAGE_NONE)] {
        let want = format!(
            "error: this build needs {}; missing: {}; this CPU has: {has}\n",
            kernels::TIER,
            kernels::REQUIRED_FEATURES.join(" ")
        );
        assert_eq!(msg, want);
    }
    // The constructor is the one the linker kept in this binary.
    let f: extern "C" fn() = early::NEON_CHECK;
    f(); // NEON present (the guard passed): returns.
}

/// 32-bit x86: the `.init_array` check refuses CPUs without SSE2 (the
/// Pentium III and older) with the guard's exit code and a message in the
/// guard's shape naming sse2, and lets this CPU through. The matrix's
/// pentium2/pentium3 cells run it for real.
#[cfg(all(target_arch = "x86", target_os = "linux"))]
#[test]
fn i686_early_check_names_sse2() {
    use guard::early;
    guard::guard();
    assert_eq!(early::EXIT_CODE, legacy_ml::ErrorKind::Isa.exit_code());
    for (has, msg) in [("sse", early::MESSAGE_SSE), ("", early::MESSAGE_NONE)] {
        assert!(msg.starts_with("error: this build needs "), "{msg}");
        assert!(
            msg.ends_with(&format!("; missing: sse2; this CPU has: {has}\n")),
            "{msg}"
        );
    }
    assert!(guard::host_features().contains(&"sse2"));
    // The constructor is the one the linker kept in this binary.
    let f: extern "C" fn() = early::SSE2_CHECK;
    f(); // SSE2 present (the guard passed): returns.
}

#[cfg(feature = "cli")]
#[test]
fn a_cpu_without_the_tier_is_refused_with_exit_7() {
    guard::guard();
    let Ok(runner) = std::env::var("ML_TEST_REJECT_RUNNER") else {
        println!("skipped: ML_TEST_REJECT_RUNNER is not set");
        return;
    };
    let mut parts = runner.split_whitespace();
    let mut cmd = std::process::Command::new(parts.next().expect("empty ML_TEST_REJECT_RUNNER"));
    let out_file = std::env::temp_dir().join(format!("legacy-ml-guard-{}.mlb", std::process::id()));
    cmd.args(parts)
        .arg(env!("CARGO_BIN_EXE_ml"))
        .args(["gen", "--out"])
        .arg(&out_file);
    let o = cmd.output().expect("start the reject runner");
    let _ = std::fs::remove_file(&out_file);
    let stderr = String::from_utf8_lossy(&o.stderr);
    println!("{runner}: {:?}\n{stderr}", o.status);
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(o.status.signal(), None, "killed by a signal (4 = SIGILL): {stderr}");
    }
    // Windows has no signals: an illegal instruction ends the process with
    // the exception code STATUS_ILLEGAL_INSTRUCTION as its exit code.
    #[cfg(windows)]
    assert_ne!(
        o.status.code(),
        Some(0xC000_001Du32 as i32),
        "died of an illegal instruction: {stderr}"
    );
    assert_eq!(o.status.code(), Some(7), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error: this build needs "))
        .unwrap_or_else(|| panic!("no guard message in {stderr:?}"));
    let (tier, rest) = line["error: this build needs ".len()..]
        .split_once("; missing: ")
        .expect("message shape");
    assert_eq!(tier, kernels::TIER);
    let (missing, _has) = rest.split_once("; this CPU has:").expect("message shape");
    let missing: Vec<&str> = missing.split_whitespace().collect();
    assert!(!missing.is_empty(), "{line}");
    for m in &missing {
        assert!(kernels::REQUIRED_FEATURES.contains(m), "{m} is not required: {line}");
    }
    if let Ok(want) = std::env::var("ML_TEST_REJECT_MISSING") {
        for w in want.split_whitespace() {
            assert!(missing.contains(&w), "{line} does not name {w}");
        }
    }
}
