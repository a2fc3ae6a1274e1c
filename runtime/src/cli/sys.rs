//! The command line's only calls into libc (Unix), each with its SAFETY
//! argument. Elsewhere `ml` uses std, clap and (for chat, and on Windows)
//! ctrlc.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by Ctrl-C once `catch_interrupt` installed its handler.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether Ctrl-C was pressed since `catch_interrupt`.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Makes Ctrl-C (SIGINT) set `interrupted()` instead of ending the process;
/// false if the handler could not be installed.
///
/// On Unix this is a signal handler that only stores to an atomic (which is
/// async-signal-safe), not ctrlc's handler thread: that thread would be a
/// second thread in every `ml run` and `ml gen`, and its start-up races the
/// process's exit, so the instructions a run executes (counted under qemu,
/// README "Cost under emulation") varied from one run to the next.
#[cfg(unix)]
pub fn catch_interrupt() -> bool {
    extern "C" fn on_sigint(_: libc::c_int) {
        INTERRUPTED.store(true, Ordering::Relaxed);
    }
    // SAFETY: an all-zero sigaction is a valid value (no flags, empty mask)
    // that the lines below complete.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SA_RESTART: a write to stdout in progress is resumed, not failed with
    // EINTR; the generation loop sees the flag before its next token.
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action` is a valid sigaction whose handler only performs an
    // atomic store; sigemptyset writes only to the mask it is given, and
    // sigaction reads `action` and writes no old action (null).
    unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut()) == 0
    }
}

#[cfg(not(unix))]
pub fn catch_interrupt() -> bool {
    ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::Relaxed)).is_ok()
}

/// Ignores SIGXFSZ, so that a write past the file-size limit (`ulimit -f`)
/// fails with EFBIG, an Io error that `ml gen` cleans up after (exit 3),
/// instead of killing the process and leaving its temporary file behind.
#[cfg(unix)]
pub fn ignore_sigxfsz() {
    // SAFETY: signal(2) with SIG_IGN installs no handler code; it only sets
    // the disposition of one signal, before `ml` starts any thread.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
}

#[cfg(not(unix))]
pub fn ignore_sigxfsz() {}

/// Bytes an unprivileged process may still write on the file system that
/// holds `dir` (statvfs: f_bavail × f_frsize), or None if it cannot say.
#[cfg(unix)]
pub fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `path` is NUL-terminated and outlives the call; `st` is a
    // writable statvfs the call fills when it returns 0.
    if unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialized `st` (and it was zeroed).
    let st = unsafe { st.assume_init() };
    #[allow(clippy::useless_conversion)] // the field types differ by target
    Some(u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize)))
}

#[cfg(not(unix))]
pub fn free_bytes(_dir: &std::path::Path) -> Option<u64> {
    None
}
