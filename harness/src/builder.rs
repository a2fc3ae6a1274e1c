//! Building a row: `cargo` (rustup target + Debian cross linker; runs here)
//! or `cross` (a container per target; runs where a container engine does,
//! e.g. GitHub Actions). Each row gets its own target dir,
//! `target/matrix/<row>`, so one row's flags never rebuild another's.
//!
//! Per row: `ml` once in release (the binary the e2e runs and the audit
//! reads) and the runtime's test binaries once in the test profile.

use crate::config::{Row, TargetSpec};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum BuilderKind {
    /// cross when a container engine answers, else cargo.
    Auto,
    Cargo,
    Cross,
}

impl BuilderKind {
    pub fn name(self) -> &'static str {
        match self {
            BuilderKind::Auto => "auto",
            BuilderKind::Cargo => "cargo",
            BuilderKind::Cross => "cross",
        }
    }

    /// Resolves `auto`: cross only if it is installed and docker or podman
    /// actually answers.
    pub fn resolve(self, sh: &Shell) -> (BuilderKind, String) {
        match self {
            BuilderKind::Auto => {
                let cross = crate::setup::which("cross").is_some();
                let engine = ["docker", "podman"].iter().find(|e| {
                    crate::setup::which(e).is_some()
                        && cmd!(sh, "{e} info")
                            .quiet()
                            .ignore_stdout()
                            .ignore_stderr()
                            .run()
                            .is_ok()
                });
                match (cross, engine) {
                    (true, Some(e)) => (BuilderKind::Cross, format!("auto → cross ({e} answers)")),
                    (false, _) => (BuilderKind::Cargo, "auto → cargo (cross is not installed)".into()),
                    (true, None) => (BuilderKind::Cargo, "auto → cargo (no container engine answers)".into()),
                }
            }
            k => (k, k.name().into()),
        }
    }
}

/// One runtime test binary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestExe {
    /// e.g. `tests/it/main.rs`, `lib`, `bin ml`.
    pub name: String,
    pub path: PathBuf,
}

pub struct RowBuild<'a> {
    pub root: &'a Path,
    pub row: &'a Row,
    pub spec: &'a TargetSpec,
    pub host_triple: &'a str,
    pub kind: BuilderKind,
}

/// `CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_<WHAT>`.
pub fn target_env(triple: &str, what: &str) -> String {
    format!(
        "CARGO_TARGET_{}_{what}",
        triple.to_ascii_uppercase().replace(['-', '.'], "_")
    )
}

impl RowBuild<'_> {
    pub fn target_dir(&self) -> PathBuf {
        target_dir(self.root, &self.row.name)
    }

    pub fn program(&self) -> &'static str {
        match self.kind {
            BuilderKind::Cross => "cross",
            _ => "cargo",
        }
    }

    /// The environment a build of this row needs.
    pub fn env(&self) -> Vec<(String, String)> {
        let t = &self.row.target;
        let mut env = Vec::new();
        match self.kind {
            BuilderKind::Cross => {
                // cross passes CARGO_* through to its container.
                env.push(("CARGO_INCREMENTAL".into(), "0".into()));
                env.push((target_env(t, "RUSTFLAGS"), self.row.rustflags.join(" ")));
                env.push((
                    "CROSS_CONFIG".into(),
                    self.root.join("ci/Cross.toml").display().to_string(),
                ));
            }
            _ => {
                if let Some(linker) = &self.spec.linker {
                    if t != self.host_triple {
                        let l = if self.spec.linker_args.is_empty() {
                            linker.clone()
                        } else {
                            linker_wrapper(self.root, t).display().to_string()
                        };
                        env.push((target_env(t, "LINKER"), l));
                    }
                }
                if self.spec.build_std {
                    // -Zbuild-std on the stable toolchain the other rows
                    // use, with its own rust-src: a nightly would bring a
                    // compiler (and a std) that changes from day to day.
                    env.push(("RUSTC_BOOTSTRAP".into(), "1".into()));
                }
                // One-shot builds: incremental state would only cost disk
                // (~300 MB per row).
                env.push(("CARGO_INCREMENTAL".into(), "0".into()));
                // Exactly the target's and the row's flags, whatever
                // RUSTFLAGS the caller has.
                let flags: Vec<&str> = self
                    .spec
                    .rustflags
                    .iter()
                    .chain(&self.row.rustflags)
                    .map(String::as_str)
                    .collect();
                env.push(("CARGO_ENCODED_RUSTFLAGS".into(), flags.join("\u{1f}")));
            }
        }
        env
    }

    pub fn common_args(&self) -> Vec<String> {
        let mut a = vec![
            "-p".to_string(),
            "runtime".into(),
            "--target".into(),
            self.row.target.clone(),
            "--target-dir".into(),
            self.target_dir().display().to_string(),
        ];
        let f = self.row.cargo_features();
        if !f.is_empty() {
            a.push("--features".into());
            a.push(f.join(","));
        }
        if self.spec.build_std && self.kind != BuilderKind::Cross {
            a.push("-Zbuild-std".into());
        }
        a
    }

    /// Writes the linker wrapper (`linker linker_args… "$@"`) when the
    /// target's linker needs arguments of its own.
    fn prepare_linker(&self) -> Result<()> {
        let (Some(linker), false) = (&self.spec.linker, self.spec.linker_args.is_empty()) else {
            return Ok(());
        };
        if self.kind == BuilderKind::Cross {
            return Ok(());
        }
        let path = linker_wrapper(self.root, &self.row.target);
        let dir = path.parent().expect("a file in a dir");
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let words: Vec<String> = std::iter::once(linker)
            .chain(&self.spec.linker_args)
            .map(|w| sh_quote(w))
            .collect();
        let text = format!(
            "#!/bin/sh\n# Written by the harness from matrix.toml's [target.{}] linker and linker_args.\nexec {} \"$@\"\n",
            self.row.target,
            words.join(" ")
        );
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        // A /bin/sh script runs where there is one: the nightly Windows job
        // builds only the Windows rows, which need no wrapper.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("chmod {}", path.display()))?;
        }
        Ok(())
    }

    /// Builds `ml` in release; returns its path.
    pub fn build_ml(&self, sh: &Shell) -> Result<PathBuf> {
        self.prepare_linker()?;
        let prog = self.program();
        let args = self.common_args();
        let mut c = cmd!(sh, "{prog} build --release --bin ml {args...}")
            .quiet()
            .ignore_status();
        for (k, v) in self.env() {
            c = c.env(k, v);
        }
        let out = c.output().with_context(|| format!("run {prog} build"))?;
        if !out.status.success() {
            bail!(
                "{prog} build failed: {}",
                tail(&String::from_utf8_lossy(&out.stderr), 12)
            );
        }
        let ml = self
            .target_dir()
            .join(&self.row.target)
            .join("release")
            .join(exe_name("ml", &self.row.target));
        if !ml.exists() {
            bail!("{prog} build succeeded but {} is missing", ml.display());
        }
        Ok(ml)
    }

    /// Builds the runtime's test binaries (test profile) without running them.
    pub fn build_tests(&self, sh: &Shell) -> Result<Vec<TestExe>> {
        self.prepare_linker()?;
        let prog = self.program();
        let args = self.common_args();
        let mut c = cmd!(
            sh,
            "{prog} test --no-run --message-format=json-render-diagnostics {args...}"
        )
        .quiet()
        .ignore_status();
        for (k, v) in self.env() {
            c = c.env(k, v);
        }
        let out = c.output().with_context(|| format!("run {prog} test --no-run"))?;
        if !out.status.success() {
            bail!(
                "{prog} test --no-run failed: {}",
                tail(&String::from_utf8_lossy(&out.stderr), 12)
            );
        }
        let exes = test_executables(&String::from_utf8_lossy(&out.stdout));
        if exes.is_empty() {
            bail!("{prog} test --no-run listed no test executable");
        }
        Ok(exes)
    }
}

impl RowBuild<'_> {
    /// cross only: `cross <sub> … ` with the cell's qemu command as
    /// CARGO_TARGET_<TRIPLE>_RUNNER (cross itself passes no `-cpu`).
    pub fn cross_exec(
        &self,
        sh: &Shell,
        runner: &crate::runner::Runner,
        sub: &[&str],
        trailing: &[String],
        env: &[(String, String)],
        timeout_secs: u64,
    ) -> Result<crate::outcome::RunOutput> {
        let args = self.common_args();
        let secs = timeout_secs.to_string();
        let mut c = cmd!(sh, "timeout -k 10 {secs} cross {sub...} {args...} -- {trailing...}")
            .quiet()
            .ignore_status();
        for (k, v) in self.env().into_iter().chain(env.iter().cloned()) {
            c = c.env(k, v);
        }
        if let crate::runner::Runner::Qemu { bin, cpu_arg: cpu, .. } = runner {
            // Inside cross's image the loader prefix is already configured.
            c = c.env(target_env(&self.row.target, "RUNNER"), format!("{bin} -cpu {cpu}"));
            c = c.env("ML_TEST_RUNNER", format!("{bin} -cpu {cpu}"));
        }
        let start = std::time::Instant::now();
        let out = c.output().context("run cross")?;
        let seconds = start.elapsed().as_secs_f64();
        let code = out.status.code();
        Ok(crate::outcome::RunOutput {
            code,
            signal: exit_signal(&out.status),
            timed_out: code == Some(124) && seconds + 1.0 >= timeout_secs as f64,
            seconds,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// The signal that ended a process (Unix; Windows has none).
#[cfg(unix)]
pub fn exit_signal(status: &std::process::ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(status)
}

#[cfg(not(unix))]
pub fn exit_signal(_: &std::process::ExitStatus) -> Option<i32> {
    None
}

/// A row whose build succeeded: its target dir can seed another row's.
#[derive(Debug, Clone)]
pub struct BuiltRow {
    /// Also the name of its target dir (`target_dir`).
    pub name: String,
    pub target: String,
    pub rustflags: Vec<String>,
}

/// Seeds a row's empty target dir from an already-built one, so identical
/// dependencies are not compiled again: a full copy from a row with the same
/// triple and rustflags (only the runtime crate, whose features differ, is
/// then rebuilt, under its own hash), else only the host artifacts (proc
/// macros, build scripts) of any built row. Returns what it did.
pub fn seed(sh: &Shell, root: &Path, row: &Row, built: &[BuiltRow]) -> Option<String> {
    let dst = target_dir(root, &row.name);
    if dst.exists() {
        return None;
    }
    let same = built
        .iter()
        .find(|b| shares_target_dir_kind(row, &b.target, &b.rustflags));
    let src_row = same.or_else(|| built.first())?;
    let src = target_dir(root, &src_row.name);
    if !src.exists() {
        return None;
    }
    if same.is_some() {
        cmd!(sh, "cp -a {src} {dst}").quiet().run().ok()?;
        Some(format!("seeded from {} (same target and rustflags)", src_row.name))
    } else {
        std::fs::create_dir_all(&dst).ok()?;
        let mut copied = Vec::new();
        for host_dir in ["release", "debug"] {
            let s = src.join(host_dir);
            if s.exists() {
                cmd!(sh, "cp -a {s} {dst}").quiet().run().ok()?;
                copied.push(host_dir);
            }
        }
        Some(format!(
            "host artifacts ({}) seeded from {}",
            copied.join(", "),
            src_row.name
        ))
    }
}

/// Whether a row builds for this triple with these rustflags: then its
/// target dir can seed (or be seeded from) the row's.
pub fn shares_target_dir_kind(row: &Row, triple: &str, rustflags: &[String]) -> bool {
    row.target == triple && row.rustflags == rustflags
}

/// Removes a finished row's target dir; says what it freed.
pub fn remove_target_dir(dir: &Path) -> Option<String> {
    if !dir.exists() {
        return None;
    }
    let bytes = dir_bytes(dir);
    Some(match std::fs::remove_dir_all(dir) {
        Ok(()) => format!("removed, {} MB freed (--keep-target-dirs keeps it)", bytes / 1_000_000),
        Err(e) => format!("could not remove {}: {e}", dir.display()),
    })
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// A binary's file name on `triple`: `ml.exe` on Windows.
pub fn exe_name(name: &str, triple: &str) -> String {
    if crate::config::is_windows_triple(triple) {
        format!("{name}.exe")
    } else {
        name.to_string()
    }
}

pub fn target_dir(root: &Path, row: &str) -> PathBuf {
    root.join("target/matrix").join(row)
}

/// The generated linker wrapper of a target (see `TargetSpec::linker_args`).
pub fn linker_wrapper(root: &Path, triple: &str) -> PathBuf {
    root.join("target/matrix/_linkers").join(triple)
}

/// One word for /bin/sh, single-quoted unless it is plainly safe.
fn sh_quote(w: &str) -> String {
    if !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_=./,:+".contains(c)) {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// Test executables from `cargo test --no-run --message-format=json`.
pub fn test_executables(json_lines: &str) -> Vec<TestExe> {
    let mut out: Vec<TestExe> = Vec::new();
    for line in json_lines.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" || v["profile"]["test"] != true {
            continue;
        }
        let Some(exe) = v["executable"].as_str() else { continue };
        let kind = v["target"]["kind"][0].as_str().unwrap_or("");
        let name = v["target"]["name"].as_str().unwrap_or("");
        let src = v["target"]["src_path"].as_str().unwrap_or("");
        let label = match kind {
            "test" => src
                .rsplit_once("/tests/")
                .map(|(_, f)| format!("tests/{f}"))
                .unwrap_or_else(|| format!("tests/{name}")),
            "lib" => "lib (unit tests)".to_string(),
            other => format!("{other} {name} (unit tests)"),
        };
        if !out.iter().any(|e| e.path == Path::new(exe)) {
            out.push(TestExe {
                name: label,
                path: PathBuf::from(exe),
            });
        }
    }
    out
}

pub fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_follow_cargo() {
        assert_eq!(
            target_env("aarch64-unknown-linux-gnu", "RUNNER"),
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER"
        );
        assert_eq!(
            target_env("armv7-unknown-linux-gnueabihf", "LINKER"),
            "CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_LINKER"
        );
    }

    #[test]
    fn the_linker_wrapper_and_build_std_come_from_the_target_table() {
        let row: Row = toml::from_str(
            r#"
name = "scalar-armv6"
tier = "scalar"
target = "arm-unknown-linux-musleabihf"
rustflags = ["-Cdebuginfo=1"]
cpus = [{ cpu = "arm1176", expect = "pass" }]
"#,
        )
        .unwrap();
        let spec = TargetSpec {
            linker: Some("python3".into()),
            linker_args: vec!["-m".into(), "ziglang".into(), "cc".into(), "-mcpu=arm1176jzf_s".into()],
            build_std: true,
            rustflags: vec!["-Clink-self-contained=no".into()],
            ..Default::default()
        };
        let root = std::env::temp_dir().join(format!("harness-linker-{}", std::process::id()));
        let rb = RowBuild {
            root: &root,
            row: &row,
            spec: &spec,
            host_triple: "x86_64-unknown-linux-gnu",
            kind: BuilderKind::Cargo,
        };
        let env = rb.env();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let wrapper = linker_wrapper(&root, "arm-unknown-linux-musleabihf");
        assert_eq!(
            get("CARGO_TARGET_ARM_UNKNOWN_LINUX_MUSLEABIHF_LINKER"),
            Some(wrapper.display().to_string())
        );
        assert_eq!(get("RUSTC_BOOTSTRAP").as_deref(), Some("1"));
        assert_eq!(
            get("CARGO_ENCODED_RUSTFLAGS").as_deref(),
            Some("-Clink-self-contained=no\u{1f}-Cdebuginfo=1")
        );
        assert!(rb.common_args().contains(&"-Zbuild-std".to_string()));
        rb.prepare_linker().unwrap();
        let text = std::fs::read_to_string(&wrapper).unwrap();
        assert!(
            text.ends_with("exec python3 -m ziglang cc -mcpu=arm1176jzf_s \"$@\"\n"),
            "{text}"
        );
        // cross brings its own toolchain: none of it applies.
        let cross = RowBuild {
            kind: BuilderKind::Cross,
            ..rb
        };
        assert!(!cross.common_args().contains(&"-Zbuild-std".to_string()));
        assert!(cross.env().iter().all(|(k, _)| k != "RUSTC_BOOTSTRAP"));
        std::fs::remove_dir_all(&root).ok();
        assert_eq!(sh_quote("a b'c"), r"'a b'\''c'");
    }

    #[test]
    fn picks_test_executables_from_cargo_json() {
        let json = r#"{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"ml","src_path":"/r/runtime/src/main.rs"},"profile":{"test":false},"executable":"/t/debug/ml"}
{"reason":"compiler-artifact","target":{"kind":["test"],"name":"golden","src_path":"/r/runtime/tests/golden.rs"},"profile":{"test":true},"executable":"/t/debug/deps/golden-1"}
{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"legacy_ml","src_path":"/r/runtime/src/lib.rs"},"profile":{"test":true},"executable":"/t/debug/deps/legacy_ml-2"}
{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"serde","src_path":"/x"},"profile":{"test":false},"executable":null}
{"reason":"build-finished","success":true}"#;
        let e = test_executables(json);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].name, "tests/golden.rs");
        assert_eq!(e[1].name, "lib (unit tests)");
    }
}
