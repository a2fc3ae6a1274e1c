//! Running a built binary on a cell's CPU: natively, or under qemu-user
//! with `-cpu <model>` (and `-L <sysroot>` for the guest's loader). Every
//! run goes through coreutils `timeout`, which re-raises a child's fatal
//! signal, so a SIGILL stays visible as signal 4.

use crate::outcome::RunOutput;
use anyhow::{Context, Result};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Instant;
use xshell::{cmd, Shell};

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

    pub fn run(
        &self,
        sh: &Shell,
        exe: &Path,
        args: &[String],
        env: &[(String, String)],
        timeout_secs: u64,
    ) -> Result<RunOutput> {
        let prefix = self.prefix();
        let secs = timeout_secs.to_string();
        let mut c = cmd!(sh, "timeout -k 10 {secs} {prefix...} {exe} {args...}")
            .quiet()
            .ignore_status();
        for (k, v) in env {
            c = c.env(k, v);
        }
        let start = Instant::now();
        let out = c
            .output()
            .with_context(|| format!("run {} {}", self.command_line(), exe.display()))?;
        let seconds = start.elapsed().as_secs_f64();
        let code = out.status.code();
        Ok(RunOutput {
            code,
            signal: out.status.signal(),
            timed_out: code == Some(124) && seconds + 1.0 >= timeout_secs as f64,
            seconds,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
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
}
