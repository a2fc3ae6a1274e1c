//! How a process ended, and what that means for a cell's expectation.
//! Death by an illegal instruction is a failure whatever the row expects:
//! SIGILL (signal 4, or qemu's "uncaught target signal 4") on Unix, and on
//! Windows, which has no signals, the exception STATUS_ILLEGAL_INSTRUCTION
//! (0xC000001D: the process's exit code on Windows; under Wine, whose exit
//! status keeps only its low byte, 29, Wine prints "Unhandled illegal
//! instruction").

use crate::report::TestRun;
use serde::{Deserialize, Serialize};

/// One finished process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunOutput {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub seconds: f64,
    #[serde(skip)]
    pub stdout: String,
    #[serde(skip)]
    pub stderr: String,
}

pub const EXIT_ISA: i32 = 7;
const SIGILL: i32 = 4;
/// Windows' exception code for an illegal instruction, as an exit code.
pub const STATUS_ILLEGAL_INSTRUCTION: u32 = 0xC000_001D;

impl RunOutput {
    pub fn sigill(&self) -> bool {
        self.signal == Some(SIGILL)
            || self.code == Some(128 + SIGILL)
            || self.stderr.contains("uncaught target signal 4")
            || self.stderr.contains("SIGILL")
            || self.windows_illegal_instruction()
    }

    /// An illegal instruction on Windows or under Wine.
    fn windows_illegal_instruction(&self) -> bool {
        self.code == Some(STATUS_ILLEGAL_INSTRUCTION as i32)
            || self.stderr.contains("Unhandled illegal instruction")
            || self.stderr.contains("STATUS_ILLEGAL_INSTRUCTION")
            || self.stderr.to_ascii_lowercase().contains("0xc000001d")
    }

    pub fn describe(&self) -> String {
        if self.windows_illegal_instruction() {
            "died of an illegal instruction (Windows exception 0xC000001D, the SIGILL of Windows): an instruction this CPU lacks ran".into()
        } else if self.sigill() {
            "killed by SIGILL (signal 4): an instruction this CPU lacks ran".into()
        } else if self.timed_out {
            format!("timed out after {:.0}s", self.seconds)
        } else if let Some(s) = self.signal {
            format!("killed by signal {s}")
        } else {
            format!("exit {}", self.code.unwrap_or(-1))
        }
    }

    /// The first `error` line of stderr and the last few lines, for a
    /// failure message.
    pub fn stderr_tail(&self, lines: usize) -> String {
        let v: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.contains("TCG doesn't support requested feature"))
            .collect();
        let start = v.len().saturating_sub(lines);
        let mut out: Vec<&str> = Vec::new();
        if let Some(e) = v[..start]
            .iter()
            .find(|l| l.contains("error") || l.contains("panicked"))
        {
            out.push(e);
        }
        out.extend(&v[start..]);
        out.join(" | ")
    }
}

/// The guard's message: `error: this build needs <tier>; missing: <f…>; this CPU has: <f…>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardMessage {
    pub tier: String,
    pub missing: Vec<String>,
    pub has: Vec<String>,
}

pub fn parse_guard(stderr: &str) -> Option<GuardMessage> {
    let line = stderr
        .lines()
        .find(|l| l.contains("this build needs") && l.contains("missing:"))?;
    let rest = &line[line.find("this build needs")? + "this build needs".len()..];
    let mut parts = rest.split(';');
    let tier = parts.next()?.trim().to_string();
    let missing = parts
        .next()?
        .trim()
        .strip_prefix("missing:")?
        .split_whitespace()
        .map(String::from)
        .collect();
    let has = parts
        .next()
        .and_then(|p| p.trim().strip_prefix("this CPU has:"))
        .map(|h| {
            h.split_whitespace()
                .filter(|f| *f != "(none)")
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    Some(GuardMessage { tier, missing, has })
}

/// A `reject` cell: the build must refuse cleanly (exit 7) and name a
/// feature the CPU lacks. `expected_missing` is what the tier needs and the
/// CPU model lacks (by the harness's tables); one of them must be named.
pub fn check_reject(o: &RunOutput, expected_missing: &[&str]) -> Result<GuardMessage, String> {
    if o.sigill() {
        return Err(o.describe());
    }
    if o.timed_out || o.signal.is_some() {
        return Err(o.describe());
    }
    match o.code {
        Some(0) => return Err("ran (exit 0) instead of being rejected: the guard let it through".into()),
        Some(EXIT_ISA) => {}
        Some(c) => return Err(format!("exit {c}, expected the guard's exit 7: {}", o.stderr_tail(2))),
        None => return Err(o.describe()),
    }
    let Some(g) = parse_guard(&o.stderr) else {
        return Err(format!(
            "exit 7 but no guard message naming the missing feature: {}",
            o.stderr_tail(2)
        ));
    };
    if g.missing.is_empty() {
        return Err("the guard's message names no missing feature".into());
    }
    if !expected_missing.is_empty() && !g.missing.iter().any(|m| expected_missing.contains(&m.as_str())) {
        return Err(format!(
            "the guard named {} but this CPU lacks {}",
            g.missing.join(" "),
            expected_missing.join(" ")
        ));
    }
    Ok(g)
}

/// A run that must complete: SIGILL, a guard rejection or any non-zero exit
/// is a failure.
pub fn check_ran(o: &RunOutput) -> Result<(), String> {
    if o.sigill() || o.timed_out || o.signal.is_some() {
        return Err(o.describe());
    }
    match o.code {
        Some(0) => Ok(()),
        Some(EXIT_ISA) => match parse_guard(&o.stderr) {
            Some(g) => Err(format!(
                "rejected by the guard on a CPU expected to run it (missing: {})",
                g.missing.join(" ")
            )),
            None => Err(format!("exit 7: {}", o.stderr_tail(2))),
        },
        Some(c) => Err(format!("exit {c}: {}", o.stderr_tail(3))),
        None => Err(o.describe()),
    }
}

/// The tests libtest reports as FAILED, each with its captured output
/// (the `---- <name> stdout ----` block).
pub fn failed_test_blocks(stdout: &str) -> Vec<(String, String)> {
    let names: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test ").and_then(|r| r.strip_suffix(" ... FAILED")))
        .map(String::from)
        .collect();
    names
        .into_iter()
        .map(|name| {
            let header = format!("---- {name} stdout ----");
            let block = stdout
                .split_once(&header)
                .map(|(_, rest)| {
                    let end = [rest.find("\n---- "), rest.find("\nfailures:\n")]
                        .into_iter()
                        .flatten()
                        .min()
                        .unwrap_or(rest.len());
                    rest[..end].to_string()
                })
                .unwrap_or_default();
            (name, block)
        })
        .collect()
}

/// On a CPU the build must refuse: when every failed test failed only
/// because an `ml` it started was refused by the guard (the guard's
/// message, naming a feature this CPU lacks, is in its output), returns how
/// many. Tests that spawn `ml` cannot pass there, and that refusal is the
/// expected behaviour, not a defect.
pub fn failures_are_guard_refusals(stdout: &str, expected_missing: &[&str]) -> Option<usize> {
    let blocks = failed_test_blocks(stdout);
    if blocks.is_empty() {
        return None;
    }
    let all = blocks.iter().all(|(_, b)| {
        parse_guard(b).is_some_and(|g| {
            !g.missing.is_empty()
                && (expected_missing.is_empty() || g.missing.iter().any(|m| expected_missing.contains(&m.as_str())))
        })
    });
    all.then_some(blocks.len())
}

/// libtest's summary of one test binary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestCounts {
    pub passed: u32,
    pub failed: u32,
    pub ignored: u32,
    /// Lines where a test said it skipped itself (stdarch's rule: on a
    /// `pass` CPU that is a failure).
    pub skipped: Vec<String>,
}

pub fn parse_test_output(stdout: &str, stderr: &str) -> TestCounts {
    let mut c = TestCounts::default();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("test result: ") {
            for part in rest.split(';') {
                let mut w = part.split_whitespace().rev();
                let (Some(what), Some(n)) = (w.next(), w.next()) else {
                    continue;
                };
                let n: u32 = n.parse().unwrap_or(0);
                match what {
                    "passed" => c.passed += n,
                    "failed" => c.failed += n,
                    "ignored" => c.ignored += n,
                    _ => {}
                }
            }
        }
    }
    for line in stdout.lines().chain(stderr.lines()) {
        let t = line.trim().to_ascii_lowercase();
        if t.starts_with("test ") && (t.ends_with(" ok") || t.ends_with(" failed") || t.ends_with(" ignored")) {
            continue;
        }
        if t.starts_with("skip") || t.contains("skipped:") || t.contains("skipping:") {
            c.skipped.push(line.trim().to_string());
        }
    }
    c
}

/// `ml isa` output: (the features the build's guard needs, the features
/// it sees on this CPU).
pub fn parse_isa(stdout: &str) -> (Vec<String>, Vec<String>) {
    let field = |key: &str| -> Vec<String> {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| {
                v.split_whitespace()
                    .filter(|f| *f != "(none)")
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    (field("needs features:"), field("host features:"))
}

/// A test binary on a CPU expected to pass: it must complete with no test
/// failed and none skipped.
pub fn test_run_pass(name: &str, o: &RunOutput) -> TestRun {
    let counts = parse_test_output(&o.stdout, &o.stderr);
    let (ok, detail) = match check_ran(o) {
        Err(e) => (false, format!("{e}{}", failed_tests(&o.stdout))),
        Ok(()) if counts.failed > 0 => (false, format!("{} failed", counts.failed)),
        Ok(()) if !counts.skipped.is_empty() => (
            false,
            format!("a test skipped itself on a CPU expected to pass: {}", counts.skipped[0]),
        ),
        Ok(()) => (true, "ran".to_string()),
    };
    TestRun {
        name: name.to_string(),
        ok,
        detail,
        counts,
        seconds: o.seconds,
    }
}

/// The failed tests' names and the first one's panic message, so that a
/// FAIL cell in the report says why without a rerun.
fn failed_tests(stdout: &str) -> String {
    let v: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test ").and_then(|r| r.strip_suffix(" ... FAILED")))
        .take(5)
        .collect();
    if v.is_empty() {
        return String::new();
    }
    let why = failed_test_blocks(stdout)
        .into_iter()
        .find_map(|(_, block)| first_panic(&block))
        .map(|p| format!(": {p}"))
        .unwrap_or_default();
    format!(" (failed: {}{why})", v.join(", "))
}

/// `panicked at FILE:LINE:COL:` and the message after it, on one line and
/// at most 400 characters.
fn first_panic(block: &str) -> Option<String> {
    let at = block.find("panicked at ")?;
    let text: Vec<&str> = block[at..]
        .lines()
        .take_while(|l| !l.starts_with("note: ") && !l.starts_with("stack backtrace"))
        .take(4)
        .collect();
    let line = text.join(" ");
    Some(match line.char_indices().nth(400) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    })
}

/// On a CPU the build must refuse: each test binary is rejected by the
/// guard (exit 7 naming the feature) or completes without reaching a
/// guarded kernel; SIGILL or any other end fails.
pub fn test_run_reject(name: &str, o: &RunOutput, expected_missing: &[&str]) -> TestRun {
    let counts = parse_test_output(&o.stdout, &o.stderr);
    let (ok, detail) = if o.code == Some(0) && !o.sigill() {
        (true, "ran to completion (reached no guarded kernel)".to_string())
    } else if let Some(n) = (o.code == Some(101) && !o.sigill())
        .then(|| failures_are_guard_refusals(&o.stdout, expected_missing))
        .flatten()
    {
        (true, format!("{n} test(s) failed only because the `ml` they start was refused by the guard (exit 7 naming the missing feature)"))
    } else if o.code == Some(101) && !o.sigill() {
        // Say which failed tests show no guard refusal: those are the real
        // failures (or tests that hide why the `ml` they started failed).
        let blocks = failed_test_blocks(&o.stdout);
        let unexplained: Vec<&str> = blocks
            .iter()
            .filter(|(_, b)| parse_guard(b).is_none())
            .map(|(n, _)| n.as_str())
            .collect();
        (
            false,
            format!(
                "exit 101 instead of the guard's exit 7: {} of {} failed test(s) show no guard refusal in their output: {}",
                unexplained.len(),
                blocks.len(),
                unexplained.iter().take(4).copied().collect::<Vec<_>>().join(", ")
            ),
        )
    } else {
        match check_reject(o, expected_missing) {
            Ok(_) => (true, "rejected".to_string()),
            Err(e) => (false, format!("{e}{}", failed_tests(&o.stdout))),
        }
    };
    TestRun {
        name: name.to_string(),
        ok,
        detail,
        counts,
        seconds: o.seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(code: Option<i32>, signal: Option<i32>, stderr: &str) -> RunOutput {
        RunOutput {
            code,
            signal,
            stderr: stderr.into(),
            ..Default::default()
        }
    }

    const GUARD: &str =
        "error: this build needs avx512vnni; missing: avx512f avx512bw avx512_vnni; this CPU has: sse2 sse3 avx avx2";

    #[test]
    fn a_clean_rejection_is_accepted() {
        let g = check_reject(&out(Some(7), None, GUARD), &["avx512f", "avx512_vnni"]).unwrap();
        assert_eq!(g.tier, "avx512vnni");
        assert_eq!(g.missing, vec!["avx512f", "avx512bw", "avx512_vnni"]);
        assert!(g.has.contains(&"avx2".to_string()));
    }

    #[test]
    fn a_reject_row_that_runs_instead_fails() {
        let e = check_reject(&out(Some(0), None, ""), &["avx_vnni"]).unwrap_err();
        assert!(e.contains("ran (exit 0) instead of being rejected"), "{e}");
    }

    #[test]
    fn sigill_always_fails() {
        // Native: the process dies of signal 4.
        let e = check_reject(&out(None, Some(4), ""), &["avx2"]).unwrap_err();
        assert!(e.contains("SIGILL"), "{e}");
        // qemu-user: it reports the guest's signal, then dies of it.
        let q = out(
            None,
            Some(4),
            "qemu: uncaught target signal 4 (Illegal instruction) - core dumped",
        );
        assert!(check_reject(&q, &["avx2"]).unwrap_err().contains("SIGILL"));
        assert!(check_ran(&q).unwrap_err().contains("SIGILL"));
        // Through a shell or `timeout`: exit 132.
        assert!(check_ran(&out(Some(132), None, "")).unwrap_err().contains("SIGILL"));
        // Windows: the exception code is the exit code; under Wine, whose
        // exit status keeps the low byte (0x1D), Wine's message tells.
        let w = out(Some(0xC000_001Du32 as i32), None, "");
        assert!(check_ran(&w).unwrap_err().contains("0xC000001D"), "{}", w.describe());
        assert!(check_reject(&w, &["avx2"]).is_err());
        let wine = out(
            Some(29),
            None,
            "wine: Unhandled illegal instruction at address 0000000140004860 (thread 0110), starting debugger...",
        );
        assert!(wine.sigill());
        assert!(check_ran(&wine).unwrap_err().contains("illegal instruction"));
        assert!(check_reject(&wine, &["avx2"]).unwrap_err().contains("0xC000001D"));
        // A test binary inside Wine whose `ml` died that way reports it.
        assert!(out(Some(101), None, "exit code: 0xc000001d, STATUS_ILLEGAL_INSTRUCTION").sigill());
        // Exit 29 alone is an ordinary exit code.
        assert!(!out(Some(29), None, "").sigill());
        // Even with exit 7 printed first, a SIGILL trace wins.
        assert!(check_reject(
            &out(Some(7), None, "qemu: uncaught target signal 4 (Illegal instruction)"),
            &[]
        )
        .is_err());
    }

    #[test]
    fn a_rejection_must_name_the_missing_feature() {
        let e = check_reject(&out(Some(7), None, "error: something else"), &["avx2"]).unwrap_err();
        assert!(e.contains("no guard message"), "{e}");
        let e = check_reject(&out(Some(7), None, GUARD), &["avx_vnni"]).unwrap_err();
        assert!(
            e.contains("the guard named avx512f avx512bw avx512_vnni but this CPU lacks avx_vnni"),
            "{e}"
        );
        let e = check_reject(&out(Some(1), None, "boom"), &["avx2"]).unwrap_err();
        assert!(e.contains("exit 1, expected the guard's exit 7"), "{e}");
    }

    #[test]
    fn a_pass_cell_that_is_rejected_fails() {
        let e = check_ran(&out(Some(7), None, GUARD)).unwrap_err();
        assert!(e.contains("rejected by the guard"), "{e}");
        assert!(check_ran(&out(Some(0), None, "")).is_ok());
        assert!(check_ran(&RunOutput {
            timed_out: true,
            code: Some(124),
            ..Default::default()
        })
        .is_err());
    }

    #[test]
    fn spawned_ml_refusals_are_told_apart_from_real_failures() {
        let refused = "test a ... FAILED\ntest b ... ok\ntest c ... FAILED\n\nfailures:\n\n---- a stdout ----\n\nthread 'a' panicked at x.rs:1:1:\nml gen failed: error: this build needs avx2; missing: avx fma avx2; this CPU has: sse2\n\n---- c stdout ----\n\nthread 'c' panicked at x.rs:2:1:\nml gen: error: this build needs avx2; missing: avx2; this CPU has: sse2\n\nfailures:\n    a\n    c\n\ntest result: FAILED. 1 passed; 2 failed;\n";
        assert_eq!(failures_are_guard_refusals(refused, &["avx2"]), Some(2));
        // One real failure among them: not excused.
        let real = refused.replace(
            "ml gen: error: this build needs avx2; missing: avx2; this CPU has: sse2",
            "assertion failed: x == y",
        );
        assert_eq!(failures_are_guard_refusals(&real, &["avx2"]), None);
        // The refusal must name a feature this CPU lacks.
        assert_eq!(failures_are_guard_refusals(refused, &["avx_vnni"]), None);
        assert_eq!(failures_are_guard_refusals("test result: ok. 3 passed\n", &[]), None);
    }

    #[test]
    fn libtest_summaries_and_skips() {
        let stdout = "running 3 tests\ntest a ... ok\ntest skip_bos ... ok\ntest c ... ignored\n\ntest result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.1s\n";
        let c = parse_test_output(stdout, "");
        assert_eq!((c.passed, c.failed, c.ignored), (2, 0, 1));
        assert!(c.skipped.is_empty(), "{:?}", c.skipped);
        let c = parse_test_output(stdout, "SKIPPED: avx512_vnni not available on this CPU\n");
        assert_eq!(c.skipped.len(), 1);
    }

    #[test]
    fn parses_ml_isa() {
        let out = "build tier:        avx2\ntarget:            x86_64\nneeds features:    avx avx2 fma\nhost features:     sse2 sse3\nruns on this CPU:  no\n";
        let (needs, host) = parse_isa(out);
        assert_eq!(needs, vec!["avx", "avx2", "fma"]);
        assert_eq!(host, vec!["sse2", "sse3"]);
        let (needs, _) = parse_isa("needs features:    (none)\n");
        assert!(needs.is_empty());
    }

    #[test]
    fn a_test_binary_that_sigills_on_a_reject_cpu_fails() {
        let o = RunOutput {
            signal: Some(4),
            stderr: "qemu: uncaught target signal 4 (Illegal instruction)".into(),
            ..Default::default()
        };
        let t = test_run_reject("tests/kernels.rs", &o, &["avx2"]);
        assert!(!t.ok);
        assert!(t.detail.contains("SIGILL"), "{}", t.detail);
        let o = RunOutput {
            code: Some(7),
            stderr: "error: this build needs avx2; missing: avx avx2 fma; this CPU has: sse2".into(),
            ..Default::default()
        };
        assert!(test_run_reject("tests/kernels.rs", &o, &["avx2"]).ok);
    }

    #[test]
    fn a_reject_cpu_excuses_only_guard_refusals_of_a_spawned_ml() {
        let stdout = "test a ... FAILED\n\nfailures:\n\n---- a stdout ----\nml gen failed: error: this build needs avx2; missing: avx fma avx2; this CPU has: sse2\n\nfailures:\n    a\n\ntest result: FAILED. 0 passed; 1 failed;\n";
        let o = RunOutput {
            code: Some(101),
            stdout: stdout.into(),
            ..Default::default()
        };
        let t = test_run_reject("tests/cli.rs", &o, &["avx2"]);
        assert!(t.ok, "{}", t.detail);
        let o = RunOutput {
            code: Some(101),
            stdout: stdout.replace("ml gen failed: error: this build needs", "boom"),
            ..Default::default()
        };
        assert!(!test_run_reject("tests/cli.rs", &o, &["avx2"]).ok);
    }

    #[test]
    fn a_test_binary_that_skips_on_a_pass_cpu_fails() {
        let o = RunOutput {
            code: Some(0),
            stdout: "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n".into(),
            stderr: "skipping: avx2 not detected\n".into(),
            ..Default::default()
        };
        let t = test_run_pass("tests/kernels.rs", &o);
        assert!(!t.ok);
        assert!(t.detail.contains("skipped itself"), "{}", t.detail);
        let o = RunOutput {
            code: Some(101),
            stdout: "test a ... FAILED\ntest result: FAILED. 1 passed; 1 failed; 0 ignored\n".into(),
            ..Default::default()
        };
        let t = test_run_pass("tests/kernels.rs", &o);
        assert!(!t.ok);
        assert!(t.detail.contains("failed: a"), "{}", t.detail);
    }

    #[test]
    fn a_failed_test_reports_its_panic_message() {
        let stdout = "test a ... ok\ntest b ... FAILED\n\nfailures:\n\n---- b stdout ----\n\nthread 'b' panicked at tests/it/cli.rs:915:5:\nexit 124, expected 5\nnote: run with `RUST_BACKTRACE=1`\n\nfailures:\n    b\n\ntest result: FAILED. 1 passed; 1 failed;\n";
        let o = RunOutput {
            code: Some(101),
            stdout: stdout.into(),
            ..Default::default()
        };
        let t = test_run_pass("tests/it/main.rs", &o);
        assert!(!t.ok);
        assert!(
            t.detail
                .contains("(failed: b: panicked at tests/it/cli.rs:915:5: exit 124, expected 5)"),
            "{}",
            t.detail
        );
    }
}
