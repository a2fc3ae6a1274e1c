//! Running a built binary on a cell's CPU: natively, under qemu-user with
//! `-cpu <model>` (and `-L <sysroot>` for the guest's loader), or, for a
//! Windows build on a Linux host, under Wine (on the host's CPU). On Unix
//! every run goes through coreutils `timeout`, which re-raises a child's
//! fatal signal, so a SIGILL stays visible as signal 4.

use crate::outcome::RunOutput;
use anyhow::{Context, Result};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use xshell::Shell;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runner {
    Native,
    /// `cpu` is the model name; `cpu_arg` what `-cpu` gets (the model,
    /// possibly with TCG-unsupported features turned off).
    Qemu {
        bin: String,
        cpu: String,
        cpu_arg: String,
        sysroot: Option<String>,
    },
    /// A PE binary under Wine: `bin` is the loader (Debian's wine64 is
    /// /usr/lib/wine/wine64, not on PATH), `prefix` the WINEPREFIX the
    /// harness prepared (`crate::wine`).
    Wine {
        bin: String,
        prefix: PathBuf,
    },
}

impl Runner {
    /// The argv that precedes the binary.
    pub fn prefix(&self) -> Vec<String> {
        match self {
            Runner::Native => vec![],
            Runner::Qemu {
                bin, cpu_arg, sysroot, ..
            } => {
                let mut v = vec![bin.clone()];
                if let Some(root) = sysroot {
                    v.push("-L".into());
                    v.push(root.clone());
                }
                v.push("-cpu".into());
                v.push(cpu_arg.clone());
                v
            }
            Runner::Wine { bin, .. } => vec![bin.clone()],
        }
    }

    /// The environment the runner itself needs.
    pub fn env(&self) -> Vec<(String, String)> {
        match self {
            Runner::Wine { prefix, .. } => crate::wine::env(prefix),
            Runner::Qemu { bin, .. } => match qemu_glibc_tunables(bin) {
                Some(t) => vec![("GLIBC_TUNABLES".into(), t.into())],
                None => vec![],
            },
            Runner::Native => vec![],
        }
    }

    /// What a test binary that starts `ml` itself must put before it
    /// (`ML_TEST_RUNNER`): the qemu command, or nothing where the test
    /// binary's own processes run where it does (natively, or inside Wine,
    /// where a Windows process starts another Windows program itself).
    pub fn test_runner(&self) -> String {
        match self {
            Runner::Native | Runner::Wine { .. } => String::new(),
            Runner::Qemu { .. } => self.command_line(),
        }
    }

    /// How the cell really ran, for the report: `native` or `qemu:<model>`.
    pub fn how(&self) -> String {
        match self {
            Runner::Native => "native".into(),
            Runner::Qemu { cpu, .. } => format!("qemu:{cpu}"),
            Runner::Wine { .. } => "wine".into(),
        }
    }

    /// The command line, for the report and for cross's
    /// CARGO_TARGET_<TRIPLE>_RUNNER.
    pub fn command_line(&self) -> String {
        let p = self.prefix();
        match self {
            _ if p.is_empty() => "(native)".into(),
            Runner::Wine { prefix, .. } => format!("WINEPREFIX={} {}", prefix.display(), p.join(" ")),
            _ => p.join(" "),
        }
    }

    /// Runs `exe` under `timeout -k 10 <secs>` in a process group of its
    /// own, and kills whatever is left of that group once `timeout` exits:
    /// a process the run forked and that outlived it would otherwise hold
    /// the output pipes open, and reading them would never end. (Seen: a
    /// qemu-user guest test that spawns `ml` forked a qemu that deadlocked
    /// before its exec; `timeout` stopped the test but the TERM it sent the
    /// group stayed blocked in the deadlocked child.)
    #[cfg(unix)]
    pub fn run(
        &self,
        sh: &Shell,
        exe: &Path,
        args: &[String],
        env: &[(String, String)],
        timeout_secs: u64,
    ) -> Result<RunOutput> {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let what = || format!("run {} {}", self.command_line(), exe.display());
        let mut c = Command::new("timeout");
        c.args(["-k", "10", &timeout_secs.to_string()])
            .args(self.prefix())
            .arg(exe)
            .args(args)
            .envs(self.env().into_iter().chain(env.iter().cloned()))
            .current_dir(sh.current_dir())
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let start = Instant::now();
        let mut child = c.spawn().with_context(what)?;
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hang_watch = matches!(self, Runner::Qemu { .. }).then(|| {
            let finished = finished.clone();
            let group = child.id();
            std::thread::spawn(move || watch_for_a_hang(group, &finished, HUNG_AFTER_SECS))
        });
        let status = child.wait().with_context(what)?;
        finished.store(true, std::sync::atomic::Ordering::SeqCst);
        let hung = hang_watch.is_some_and(|w| w.join().unwrap_or(false));
        let seconds = start.elapsed().as_secs_f64();
        // The group outlives its leader while any member lives, so its id
        // cannot have been reused; with no member left this is a no-op.
        kill_group(child.id());
        let text =
            |h: std::thread::JoinHandle<Vec<u8>>| String::from_utf8_lossy(&h.join().unwrap_or_default()).into_owned();
        let code = status.code();
        let mut stderr = text(stderr);
        if hung {
            stderr.push_str(&format!(
                "\nharness: the run's processes used no CPU for {HUNG_AFTER_SECS} s: stopped as hung\n"
            ));
        }
        Ok(RunOutput {
            code,
            signal: status.signal(),
            timed_out: hung || (code == Some(124) && seconds + 1.0 >= timeout_secs as f64),
            seconds,
            stdout: text(stdout),
            stderr,
        })
    }

    /// Windows hosts (the nightly windows-latest job): no coreutils
    /// `timeout` and no process groups; a watchdog thread kills the child
    /// at the deadline. An illegal instruction ends the process with
    /// STATUS_ILLEGAL_INSTRUCTION, which `RunOutput::sigill` recognises.
    #[cfg(not(unix))]
    pub fn run(
        &self,
        sh: &Shell,
        exe: &Path,
        args: &[String],
        env: &[(String, String)],
        timeout_secs: u64,
    ) -> Result<RunOutput> {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let what = || format!("run {} {}", self.command_line(), exe.display());
        let prefix = self.prefix();
        let mut c = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        c.args(args)
            .envs(self.env().into_iter().chain(env.iter().cloned()))
            .current_dir(sh.current_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let start = Instant::now();
        let mut child = c.spawn().with_context(what)?;
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let done = Arc::new(AtomicBool::new(false));
        let fired = Arc::new(AtomicBool::new(false));
        let pid = child.id();
        let watchdog = {
            let (done, fired) = (done.clone(), fired.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + std::time::Duration::from_secs(timeout_secs);
                while !done.load(Ordering::SeqCst) {
                    if Instant::now() >= deadline {
                        fired.store(true, Ordering::SeqCst);
                        let _ = Command::new("taskkill")
                            .args(["/F", "/T", "/PID", &pid.to_string()])
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .status();
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            })
        };
        let status = child.wait().with_context(what)?;
        done.store(true, Ordering::SeqCst);
        let _ = watchdog.join();
        let seconds = start.elapsed().as_secs_f64();
        let text =
            |h: std::thread::JoinHandle<Vec<u8>>| String::from_utf8_lossy(&h.join().unwrap_or_default()).into_owned();
        Ok(RunOutput {
            code: status.code(),
            signal: None,
            timed_out: fired.load(Ordering::SeqCst),
            seconds,
            stdout: text(stdout),
            stderr: text(stderr),
        })
    }
}

/// What the guest's glibc is told under qemu-user (qemu passes its own
/// environment on to the guest, and to the qemu a guest test starts `ml`
/// under). glibc picks its memcpy, memset, strlen, … by the CPU at start-up,
/// and qemu 7.2's TCG runs some of those variants about ten times slower
/// than the baseline ones: the AVX2 ones on an emulated Haswell or `max`,
/// the A64FX ones on `a64fx`. They made three quarters of such a cell's time
/// (an x86 cell's test binaries 73 s → 21 s, one memory-bound test 6.1 s →
/// 0.5 s). Only glibc's choice changes: the runtime's kernels, its guard
/// (which reads CPUID or AT_HWCAP itself) and what the CPU model offers
/// stay as they were, and the instruction counts of every tier are taken
/// with the same setting (qemu/README.md, "The guest's glibc").
pub fn qemu_glibc_tunables(qemu_bin: &str) -> Option<&'static str> {
    let name = Path::new(qemu_bin).file_name()?.to_str()?;
    match name {
        // Not qemu-i386: i386 glibc has no AVX2 variants to avoid, and the
        // static i686 test binaries died of SIGSEGV under qemu-i386 with
        // the setting.
        "qemu-x86_64" => Some("glibc.cpu.hwcaps=-AVX2,-AVX_Fast_Unaligned_Load"),
        "qemu-aarch64" => Some("glibc.cpu.name=generic"),
        _ => None,
    }
}

/// Seconds a qemu run's process group may use no CPU at all before it
/// counts as hung. qemu-user 7.2 now and then deadlocks in a guest's fork
/// (a test starting `ml`), and then waited out the whole timeout (300 s)
/// before its binary ran again; every process of a live run, emulated
/// code all of it, uses CPU all the time.
#[cfg(unix)]
const HUNG_AFTER_SECS: u64 = 60;

/// Watches process group `group` until `finished`; if its processes' CPU
/// time (and which processes there are) stays the same for `after_secs`,
/// kills the group and returns true.
#[cfg(unix)]
fn watch_for_a_hang(group: u32, finished: &std::sync::atomic::AtomicBool, after_secs: u64) -> bool {
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    let mut last = group_cpu(group);
    let mut since = Instant::now();
    while !finished.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(500));
        let now = group_cpu(group);
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= Duration::from_secs(after_secs) && !finished.load(Ordering::SeqCst) {
            kill_group(group);
            return true;
        }
    }
    false
}

/// SIGKILL to every process of process group `group`.
#[cfg(unix)]
fn kill_group(group: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The processes of process group `group` (pids, sorted) and their CPU
/// clock ticks, their waited-for children's included, from /proc.
#[cfg(unix)]
fn group_cpu(group: u32) -> (Vec<u32>, u64) {
    let mut pids = Vec::new();
    let mut ticks = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some(t) = stat_ticks_in_group(&stat, group) {
            pids.push(pid);
            ticks += t;
        }
    }
    pids.sort_unstable();
    (pids, ticks)
}

/// utime + stime + cutime + cstime of a /proc/PID/stat line, if its
/// process group is `group`. The command name (field 2) may hold spaces
/// and parentheses, so the fields are counted from its last ')'.
#[cfg(unix)]
fn stat_ticks_in_group(stat: &str, group: u32) -> Option<u64> {
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // From the state (field 3): pgrp is field 5, utime to cstime 14–17.
    if fields.get(2)?.parse::<u32>().ok()? != group {
        return None;
    }
    fields.get(11..15)?.iter().map(|f| f.parse::<u64>().ok()).sum()
}

/// Reads a child's pipe to its end on a thread of its own, so that neither
/// pipe can fill up and block the child while the other is read.
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut bytes);
        }
        bytes
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn wine_runs_its_children_itself() {
        let w = Runner::Wine {
            bin: "/usr/lib/wine/wine64".into(),
            prefix: PathBuf::from("/t/_wine/prefix"),
        };
        assert_eq!(w.prefix(), vec!["/usr/lib/wine/wine64"]);
        assert_eq!(w.how(), "wine");
        assert_eq!(w.command_line(), "WINEPREFIX=/t/_wine/prefix /usr/lib/wine/wine64");
        // A test binary inside Wine starts ml.exe as a Windows process.
        assert_eq!(w.test_runner(), "");
        assert!(w
            .env()
            .contains(&("WINEPREFIX".to_string(), "/t/_wine/prefix".to_string())));
    }

    #[test]
    fn qemu_prefix_carries_sysroot_and_model() {
        let r = Runner::Qemu {
            bin: "qemu-aarch64".into(),
            cpu: "max,sve=off".into(),
            cpu_arg: "max,sve=off".into(),
            sysroot: Some("/usr/aarch64-linux-gnu".into()),
        };
        assert_eq!(
            r.command_line(),
            "qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu max,sve=off"
        );
        assert_eq!(r.how(), "qemu:max,sve=off");
        assert_eq!(Runner::Native.prefix(), Vec::<String>::new());
    }

    #[test]
    fn a_stat_line_gives_its_groups_cpu_ticks() {
        let line = "4242 (qemu-x86_64 (x)) S 1 4240 4240 0 -1 4194560 100 0 0 0 350 25 7 3 20 0 3 0 1 2 3";
        assert_eq!(stat_ticks_in_group(line, 4240), Some(350 + 25 + 7 + 3));
        assert_eq!(stat_ticks_in_group(line, 4242), None);
        assert_eq!(stat_ticks_in_group("4242 (short) S 1 4240", 4240), None);
        assert_eq!(stat_ticks_in_group("garbage", 4240), None);
    }

    /// A process that sleeps uses no CPU: the watch stops it as hung.
    #[test]
    fn a_run_using_no_cpu_is_stopped_as_hung() {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("sleep").arg("600").process_group(0).spawn().unwrap();
        let finished = std::sync::atomic::AtomicBool::new(false);
        let t = Instant::now();
        let (pids, _) = group_cpu(child.id());
        assert_eq!(pids, [child.id()]);
        assert!(watch_for_a_hang(child.id(), &finished, 2));
        assert!(t.elapsed().as_secs() >= 2);
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9));
    }

    /// A process that computes for longer than the limit is left alone.
    #[test]
    fn a_busy_run_is_not_stopped() {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("timeout")
            .args(["4", "sh", "-c", "while :; do :; done"])
            .process_group(0)
            .spawn()
            .unwrap();
        let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = {
            let (finished, group) = (finished.clone(), child.id());
            std::thread::spawn(move || watch_for_a_hang(group, &finished, 2))
        };
        let status = child.wait().unwrap();
        finished.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(!watch.join().unwrap());
        assert_eq!(status.code(), Some(124), "timeout ended it, not the watch");
    }

    #[test]
    fn qemu_tells_the_guests_glibc_to_keep_to_its_baseline_routines() {
        let qemu = |bin: &str| Runner::Qemu {
            bin: bin.into(),
            cpu: "max".into(),
            cpu_arg: "max".into(),
            sysroot: None,
        };
        let tunables = |bin: &str| {
            qemu(bin)
                .env()
                .into_iter()
                .find(|(k, _)| k == "GLIBC_TUNABLES")
                .map(|(_, v)| v)
        };
        assert_eq!(
            tunables("/usr/bin/qemu-x86_64").as_deref(),
            Some("glibc.cpu.hwcaps=-AVX2,-AVX_Fast_Unaligned_Load")
        );
        assert_eq!(tunables("qemu-aarch64").as_deref(), Some("glibc.cpu.name=generic"));
        assert_eq!(tunables("qemu-i386"), None);
        assert_eq!(tunables("qemu-arm"), None);
        assert!(Runner::Native.env().is_empty());
    }

    #[test]
    fn a_fatal_signal_survives_timeout() {
        // `kill -ILL $$` in a child shell stands in for a guest SIGILL.
        let sh = Shell::new().unwrap();
        let o = Runner::Native
            .run(
                &sh,
                Path::new("/bin/sh"),
                &["-c".into(), "kill -ILL $$".into()],
                &[],
                30,
            )
            .unwrap();
        assert!(o.sigill(), "{o:?}");
        let o = Runner::Native
            .run(&sh, Path::new("/bin/sh"), &["-c".into(), "exit 7".into()], &[], 30)
            .unwrap();
        assert_eq!(o.code, Some(7));
        assert!(!o.sigill());
    }

    #[test]
    fn a_process_left_behind_holding_the_output_is_killed_not_waited_for() {
        // The shell exits at once; the background sleep keeps its stdout.
        // Without the group kill, reading the output would take 120 s.
        let sh = Shell::new().unwrap();
        let start = Instant::now();
        let o = Runner::Native
            .run(
                &sh,
                Path::new("/bin/sh"),
                &["-c".into(), "sleep 120 & echo started".into()],
                &[],
                600,
            )
            .unwrap();
        assert_eq!(o.code, Some(0), "{o:?}");
        assert_eq!(o.stdout, "started\n");
        assert!(start.elapsed().as_secs() < 60, "took {:?}", start.elapsed());
    }
}
