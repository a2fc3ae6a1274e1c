//! The command line's only calls into libc (Unix), each one line with its
//! SAFETY argument. Elsewhere `ml` uses std, clap and ctrlc.

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
