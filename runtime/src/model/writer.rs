//! Writing .mlb files: quantize f32 tensors in the format's order and lay
//! them out exactly as `Layout` says, then publish the file atomically.

use super::format::{Header, Layout, TensorEntry, TensorKind};
use crate::core::error::{MlError, Result};
use crate::core::quant::{quantize_row_q4, quantize_row_q8, QK};
use crate::core::tensor::WType;
use std::io::Write;
use std::path::Path;

/// Writes a model. `fill` receives each tensor's entry and a zeroed f32
/// buffer of its elements (row-major) to fill. Returns the bytes written.
pub fn write_model<W: Write + ?Sized>(
    out: &mut W,
    header: &Header,
    mut fill: impl FnMut(&TensorEntry, &mut [f32]) -> Result<()>,
) -> Result<usize> {
    let layout = Layout::from_header(*header)?;
    let io = |e: std::io::Error| MlError::io(format!("cannot write model: {e}"));
    let mut pos = 0usize;
    let mut put = |out: &mut W, offset: usize, bytes: &[u8]| -> Result<()> {
        const ZEROS: [u8; 64] = [0; 64];
        out.write_all(&ZEROS[..offset - pos]).map_err(io)?;
        out.write_all(bytes).map_err(io)?;
        pos = offset + bytes.len();
        Ok(())
    };
    put(out, 0, &header.to_bytes())?;
    let mut values = Vec::new();
    for t in &layout.tensors {
        values.clear();
        values.resize(t.elements(), 0.0f32);
        fill(t, &mut values)?;
        match t.kind {
            TensorKind::F32 => put(out, t.q_offset, &f32_bytes(&values))?,
            TensorKind::Quant => {
                let mut d = vec![0.0f32; t.elements() / QK];
                let q = match header.wtype {
                    WType::Q8_0 => {
                        let mut q = vec![0i8; t.elements()];
                        quantize_row_q8(&values, &mut q, &mut d);
                        q.into_iter().map(|v| v as u8).collect()
                    }
                    WType::Q4_0 => {
                        let mut q = vec![0u8; t.q_bytes];
                        quantize_row_q4(&values, &mut q, &mut d);
                        q
                    }
                };
                put(out, t.q_offset, &q)?;
                put(out, t.d_offset, &f32_bytes(&d))?;
            }
        }
    }
    Ok(layout.file_bytes)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A target that exists and is not a regular file is never replaced: a
/// rename over a device node, a FIFO or a socket would destroy it (as root,
/// `/dev/full` for the whole machine), and over a symbolic link it would
/// replace the link, not the file it points to. So both are refused (Io),
/// naming what the target is; a missing target is fine.
fn refuse_special_target(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_file() => Err(MlError::io(format!(
            "{} is {}, not a regular file: refusing to replace it{}",
            path.display(),
            crate::core::file::kind_name(&meta.file_type()),
            if meta.file_type().is_symlink() {
                " (links are not followed; give the path of the file itself)"
            } else {
                ""
            }
        ))),
        _ => Ok(()),
    }
}

/// Writes to a temporary file beside `path`, syncs it, then renames it over
/// `path`: a failed write (a full disk, say) never leaves a half-written
/// model where a good one is expected, and a model already there stays as it
/// was. The temporary file is removed on every failure, a panic of `write`
/// included; only a killed process can leave one (`.NAME.tmpPID`) behind.
/// A target that exists and is not a regular file (a device, a FIFO, a
/// directory, a symbolic link) is refused before anything is written.
pub fn save_atomically(path: &Path, write: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    let shown = path.display();
    let name = path
        .file_name()
        .ok_or_else(|| MlError::io(format!("{shown} is not a file path")))?;
    let tmp = path.with_file_name(format!(".{}.tmp{}", name.to_string_lossy(), std::process::id()));
    refuse_special_target(path)?;

    /// Removes the temporary file unless it was renamed into place.
    struct Cleanup<'a>(Option<&'a Path>);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            if let Some(tmp) = self.0 {
                let _ = std::fs::remove_file(tmp);
            }
        }
    }

    let file = std::fs::File::create(&tmp).map_err(|e| MlError::io(format!("cannot create {}: {e}", tmp.display())))?;
    let mut cleanup = Cleanup(Some(&tmp));
    let mut buf = std::io::BufWriter::new(file);
    write(&mut buf)?;
    let file = buf
        .into_inner()
        .map_err(|e| MlError::io(format!("cannot write {shown}: {}", e.error())))?;
    file.sync_all()
        .map_err(|e| MlError::io(format!("cannot sync {shown}: {e}")))?;
    drop(file);
    // Again: the target may have been made a FIFO or a link meanwhile.
    refuse_special_target(path)?;
    std::fs::rename(&tmp, path).map_err(|e| MlError::io(format!("cannot rename into {shown}: {e}")))?;
    cleanup.0 = None;
    // Make the rename itself durable. Best effort: the new file is complete
    // and in place either way, and not every file system syncs directories.
    #[cfg(unix)]
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}
