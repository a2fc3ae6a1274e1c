//! Windows rows on a Linux host: their PE binaries run under Wine, on the
//! host's CPU. One Wine prefix serves every Windows row
//! (`target/matrix/_wine/prefix`); creating it takes seconds. Its
//! wineserver and Wine's services run for the whole matrix, started here in
//! a process group of their own: a run's process group is killed when the
//! run ends (`runner.rs`), and services started by a run would die with it
//! and boot again in the next one (seconds per test binary).
//!
//! Wine 8 (Debian 12) has no `bcryptprimitives.dll`, whose `ProcessPrng`
//! Rust's std imports, so no Rust program starts under it (exit 53,
//! c0000135: a DLL is missing). Where the prefix lacks the DLL, the harness
//! compiles a stand-in (`qemu/wine/bcryptprimitives.c`: `ProcessPrng`
//! through `RtlGenRandom`) with mingw and installs it in the prefix's
//! system32 — never beside a built binary, so no build output carries it —
//! and the report says so.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// The stand-in's source, relative to the repository root.
pub const STANDIN_SOURCE: &str = "qemu/wine/bcryptprimitives.c";
const STANDIN_DLL: &str = "bcryptprimitives.dll";
/// The C compiler the stand-in is built with (Debian gcc-mingw-w64-x86-64).
pub const MINGW_GCC: &str = "x86_64-w64-mingw32-gcc";

/// What every Wine run gets: the prefix; no debug channels (Wine's
/// `fixme:` lines would bury the program's stderr, which tests read);
/// no crash debugger (on an unhandled exception winedbg prints a 100-line
/// dump; Wine's one-line "Unhandled illegal instruction" stays); and no
/// Mono/Gecko installers when the prefix is created.
pub fn env(prefix: &Path) -> Vec<(String, String)> {
    vec![
        ("WINEPREFIX".into(), prefix.display().to_string()),
        ("WINEDEBUG".into(), "-all".into()),
        ("WINEDLLOVERRIDES".into(), "mscoree=d;mshtml=d;winedbg.exe=d".into()),
    ]
}

/// Whether a DLL in the prefix is Wine's: wineboot puts a placeholder in
/// system32 for every DLL Wine implements, and Wine's own PE DLLs say so
/// after their DOS header.
fn is_wines_own(dll: &[u8]) -> bool {
    let head = &dll[..dll.len().min(0x100)];
    [&b"Wine placeholder DLL"[..], b"Wine builtin DLL"]
        .iter()
        .any(|sig| head.windows(sig.len()).any(|w| w == *sig))
}

/// The wineserver of the loader's installation (Debian: wineserver64 beside
/// /usr/lib/wine/wine64).
fn server_bin(wine: &str) -> PathBuf {
    let dir = Path::new(wine).parent().unwrap_or(Path::new(""));
    ["wineserver64", "wineserver"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("wineserver"))
}

/// Starts the prefix's wineserver, persistent (until `stop`), in a process
/// group of its own.
fn start_server(wine: &str, prefix: &Path) -> Result<()> {
    let mut c = std::process::Command::new(server_bin(wine));
    c.arg("-p")
        .envs(env(prefix))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut c, 0);
    // It forks into the background; a server already running for the
    // prefix makes it exit non-zero, which is fine.
    c.status().context("start wineserver -p")?;
    Ok(())
}

/// Stops the prefix's wineserver and every Wine process of the prefix.
pub fn stop(wine: &str, prefix: &Path) {
    let _ = std::process::Command::new(server_bin(wine))
        .arg("-k")
        .envs(env(prefix))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// The prepared prefix.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub prefix: PathBuf,
    /// The stand-in DLL's path, when it had to be installed.
    pub standin: Option<PathBuf>,
    /// One line for the report: Wine's version, the prefix, the stand-in.
    pub note: String,
}

pub fn dir(root: &Path) -> PathBuf {
    root.join("target/matrix/_wine")
}

/// Creates the prefix (once) and installs the stand-in DLL where Wine lacks
/// the real one.
pub fn prepare(sh: &Shell, root: &Path, wine: &str) -> Result<Prepared> {
    let dir = dir(root);
    let prefix = dir.join("prefix");
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let version = cmd!(sh, "{wine} --version")
        .quiet()
        .ignore_stderr()
        .read()
        .unwrap_or_else(|_| "unknown version".into());
    let fresh = !prefix.join("system.reg").exists();
    start_server(wine, &prefix)?;
    // Creates the prefix, or starts Wine's services in an existing one.
    let boot: &[&str] = if fresh { &["-i"] } else { &[] };
    let mut c = cmd!(sh, "{wine} wineboot {boot...}")
        .quiet()
        .ignore_stdout()
        .ignore_stderr();
    for (k, v) in env(&prefix) {
        c = c.env(k, v);
    }
    c.run()
        .context("wineboot (create the Wine prefix, start its services)")?;
    // The persistent wineserver writes a new prefix's registry on its own
    // schedule, after `wineboot -i` has returned (seen: system.reg 30 s
    // later on a fresh prefix, where the check below failed at once).
    let registry = prefix.join("system.reg");
    let waited = std::time::Instant::now();
    while !registry.exists() && waited.elapsed() < std::time::Duration::from_secs(120) {
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    if !registry.exists() {
        bail!("wineboot -i left no prefix at {} (waited 120 s)", prefix.display());
    }
    let installed = prefix.join("drive_c/windows/system32").join(STANDIN_DLL);
    if std::fs::read(&installed).is_ok_and(|b| is_wines_own(&b)) {
        return Ok(Prepared {
            prefix: prefix.clone(),
            standin: None,
            note: format!(
                "{version}, prefix {}: Wine has its own {STANDIN_DLL}, no stand-in needed",
                prefix.display()
            ),
        });
    }
    let built = dir.join(STANDIN_DLL);
    let src = root.join(STANDIN_SOURCE);
    let gcc = MINGW_GCC;
    let out = cmd!(sh, "{gcc} -O2 -shared -o {built} {src} -ladvapi32")
        .quiet()
        .ignore_status()
        .output()
        .with_context(|| format!("run {gcc}"))?;
    if !out.status.success() {
        bail!(
            "{gcc} could not build the stand-in {STANDIN_DLL}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    std::fs::copy(&built, &installed).with_context(|| format!("install {}", installed.display()))?;
    Ok(Prepared {
        prefix: prefix.clone(),
        standin: Some(built),
        note: format!(
            "{version}, prefix {}: Wine lacks {STANDIN_DLL} (Rust's std imports ProcessPrng from it), so a stand-in \
             built from {STANDIN_SOURCE} ({gcc}; ProcessPrng through RtlGenRandom) is installed in the prefix's \
             system32 for the test runs only: never beside a built binary, never shipped (Windows 8 and later have the real one)",
            prefix.display()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wines_own_dlls_are_told_from_the_stand_in() {
        let mut placeholder = vec![0u8; 0x40];
        placeholder[..2].copy_from_slice(b"MZ");
        placeholder.extend_from_slice(b"Wine placeholder DLL\0");
        assert!(is_wines_own(&placeholder));
        let mut builtin = placeholder.clone();
        builtin.truncate(0x40);
        builtin.extend_from_slice(b"Wine builtin DLL\0");
        assert!(is_wines_own(&builtin));
        // mingw's output: a plain DOS stub.
        let mut mingw = placeholder[..0x40].to_vec();
        mingw.extend_from_slice(b"\x0e\x1f\xba\x0e\x00\xb4\x09\xcd\x21This program cannot be run in DOS mode.");
        assert!(!is_wines_own(&mingw));
        assert!(!is_wines_own(b""));
    }
}
