//! Running a built binary on a cell's CPU: natively, or under qemu-user
//! with `-cpu <model>` (and `-L <sysroot>` for the guest's loader). Every
//! run goes through coreutils `timeout`, which re-raises a child's fatal
//! signal, so a SIGILL stays visible as signal 4.

use crate::outcome::RunOutput;
use anyhow::{Context, Result};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
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
        }
    }

    /// How the cell really ran, for the report: `native` or `qemu:<model>`.
    pub fn how(&self) -> String {
        match self {
            Runner::Native => "native".into(),
            Runner::Qemu { cpu, .. } => format!("qemu:{cpu}"),
        }
    }

    /// The command line, for the report and for cross's
    /// CARGO_TARGET_<TRIPLE>_RUNNER.
    pub fn command_line(&self) -> String {
        let p = self.prefix();
        if p.is_empty() {
            "(native)".into()
        } else {
            p.join(" ")
        }
    }

    /// Runs `exe` under `timeout -k 10 <secs>` in a process group of its
    /// own, and kills whatever is left of that group once `timeout` exits:
    /// a process the run forked and that outlived it would otherwise hold
    /// the output pipes open, and reading them would never end. (Seen: a
    /// qemu-user guest test that spawns `ml` forked a qemu that deadlocked
    /// before its exec; `timeout` stopped the test but the TERM it sent the
    /// group stayed blocked in the deadlocked child.)
    pub fn run(
        &self,
        sh: &Shell,
        exe: &Path,
        args: &[String],
        env: &[(String, String)],
        timeout_secs: u64,
    ) -> Result<RunOutput> {
        let what = || format!("run {} {}", self.command_line(), exe.display());
        let mut c = Command::new("timeout");
        c.args(["-k", "10", &timeout_secs.to_string()])
            .args(self.prefix())
            .arg(exe)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(sh.current_dir())
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let start = Instant::now();
        let mut child = c.spawn().with_context(what)?;
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let status = child.wait().with_context(what)?;
        let seconds = start.elapsed().as_secs_f64();
        // The group outlives its leader while any member lives, so its id
        // cannot have been reused; with no member left this is a no-op.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", child.id())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let text =
            |h: std::thread::JoinHandle<Vec<u8>>| String::from_utf8_lossy(&h.join().unwrap_or_default()).into_owned();
        let code = status.code();
        Ok(RunOutput {
            code,
            signal: status.signal(),
            timed_out: code == Some(124) && seconds + 1.0 >= timeout_secs as f64,
            seconds,
            stdout: text(stdout),
            stderr: text(stderr),
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
