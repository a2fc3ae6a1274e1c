//! Bringing a file into memory: a private read-only mapping (feature `mmap`)
//! or, without it, one read into a 64-byte aligned buffer. Either way the
//! bytes start page- or line-aligned, so 64-byte file offsets are 64-byte
//! aligned addresses.

use super::aligned::AlignedBytes;
use super::error::{MlError, Result};
use std::fs::File;
use std::io::Read;
use std::path::Path;

pub enum Storage {
    #[cfg(feature = "mmap")]
    Mapped(memmap2::Mmap),
    Owned(AlignedBytes),
}

impl Storage {
    /// Opens and maps (or reads) the whole file.
    pub fn open(path: &Path) -> Result<Storage> {
        let shown = path.display();
        let mut file = File::open(path).map_err(|e| MlError::io(format!("cannot open {shown}: {e}")))?;
        let len = file
            .metadata()
            .map_err(|e| MlError::io(format!("cannot stat {shown}: {e}")))?
            .len();
        let len = usize::try_from(len)
            .map_err(|_| MlError::no_mem(format!("{shown} is {len} bytes, more than this platform can address")))?;
        #[cfg(feature = "mmap")]
        if len > 0 {
            // SAFETY: a private (copy-on-write) read-only mapping. The length
            // is re-checked against the header by the loader. If another
            // process truncates the file while it is mapped, reads past the
            // new end fault (SIGBUS); no mapping API can prevent that, and
            // the FORMAT.md notes it.
            let map = unsafe { memmap2::MmapOptions::new().len(len).map_copy_read_only(&file) }
                .map_err(|e| MlError::io(format!("cannot map {shown}: {e}")))?;
            return Ok(Storage::Mapped(map));
        }
        let mut buf = AlignedBytes::zeroed(len, "model file buffer")?;
        file.read_exact(buf.as_bytes_mut())
            .map_err(|e| MlError::io(format!("cannot read {shown}: {e}")))?;
        Ok(Storage::Owned(buf))
    }

    /// Copies bytes already in memory into aligned storage (tests, tools).
    pub fn from_bytes(bytes: &[u8]) -> Result<Storage> {
        let mut buf = AlignedBytes::zeroed(bytes.len(), "model buffer")?;
        buf.as_bytes_mut().copy_from_slice(bytes);
        Ok(Storage::Owned(buf))
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            #[cfg(feature = "mmap")]
            Storage::Mapped(m) => m,
            Storage::Owned(b) => b.as_bytes(),
        }
    }
}
