//! Bringing a file into memory: a private read-only mapping (feature `mmap`)
//! or one read into a 64-byte aligned buffer. Either way the bytes start
//! page- or line-aligned, so 64-byte file offsets are 64-byte aligned
//! addresses.
//!
//! A mapping is zero-copy but stays tied to the file: if another process
//! truncates the file, touching a page past the new end raises SIGBUS, and
//! if it rewrites the file in place, pages this process has not copied show
//! the new bytes (Linux does not snapshot a private mapping). No mapping
//! flag prevents either (`MAP_POPULATE` only pre-faults; truncation unmaps
//! even populated pages). A read copy is immune once loaded, so small
//! files, where the copy is cheap, are read by default (`LoadMode::Auto`).

use super::aligned::AlignedBytes;
use super::error::{MlError, Result};
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// How `Storage::open` brings a file into memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LoadMode {
    /// Read files of at most `READ_LIMIT` bytes, map larger ones.
    #[default]
    Auto,
    /// Map the file (private, read-only): no copy, pages loaded on demand.
    /// The file must not be truncated or rewritten in place while loaded.
    Map,
    /// Read the file once into an owned buffer: once loaded, nothing done
    /// to the file can reach the model.
    Read,
}

/// `LoadMode::Auto` reads files up to this size (256 MiB: a copy costs
/// tens of milliseconds at memory bandwidth) and maps larger ones.
pub const READ_LIMIT: u64 = 256 << 20;

impl LoadMode {
    /// The mode's name as `--load` and `ML_LOAD` spell it.
    pub fn name(self) -> &'static str {
        match self {
            LoadMode::Auto => "auto",
            LoadMode::Map => "map",
            LoadMode::Read => "read",
        }
    }

    /// Whether a file of `len` bytes is mapped in this mode. Builds without
    /// feature `mmap`, and Miri (which cannot map files), always read.
    pub fn maps(self, len: u64) -> bool {
        let can_map = cfg!(all(feature = "mmap", not(miri)));
        can_map
            && len > 0
            && match self {
                LoadMode::Auto => len > READ_LIMIT,
                LoadMode::Map => true,
                LoadMode::Read => false,
            }
    }
}

impl std::str::FromStr for LoadMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<LoadMode, String> {
        match s {
            "auto" => Ok(LoadMode::Auto),
            "map" => Ok(LoadMode::Map),
            "read" => Ok(LoadMode::Read),
            _ => Err(format!("load mode {s:?}: expected auto, map or read")),
        }
    }
}

/// What a file is, as error messages name it: "a regular file", "a
/// directory", "a FIFO", "a character device", "a symbolic link"…
pub fn kind_name(ft: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}

/// Opens a regular file for reading, with its length. Anything else (a
/// FIFO, a device such as /dev/zero, a directory, a socket) is an Io error
/// saying what it is, found before the file is opened, so a FIFO without a
/// writer cannot block the open; the opened file is checked again (the path
/// may have changed between the two looks).
pub fn open_regular(path: &Path) -> Result<(File, u64)> {
    let shown = path.display();
    let not_regular = |ft: &std::fs::FileType| MlError::io(format!("{shown} is {}, not a regular file", kind_name(ft)));
    let meta = std::fs::metadata(path).map_err(|e| MlError::io(format!("cannot open {shown}: {e}")))?;
    if !meta.is_file() {
        return Err(not_regular(&meta.file_type()));
    }
    let file = File::open(path).map_err(|e| MlError::io(format!("cannot open {shown}: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| MlError::io(format!("cannot stat {shown}: {e}")))?;
    if !meta.is_file() {
        return Err(not_regular(&meta.file_type()));
    }
    Ok((file, meta.len()))
}

/// Reads a whole regular file (`open_regular`): at most the length it had
/// when opened; a file that grows or shrinks meanwhile is an Io error. A
/// FIFO or /dev/zero is refused, never read without end.
pub fn read_regular(path: &Path) -> Result<Vec<u8>> {
    let shown = path.display();
    let (file, len) = open_regular(path)?;
    let size = usize::try_from(len)
        .map_err(|_| MlError::no_mem(format!("{shown} is {len} bytes, more than this platform can address")))?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(size.saturating_add(1))
        .map_err(|_| MlError::no_mem(format!("{shown} is {len} bytes, more than can be allocated")))?;
    file.take(len.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| MlError::io(format!("cannot read {shown}: {e}")))?;
    match (bytes.len() as u64).cmp(&len) {
        std::cmp::Ordering::Equal => Ok(bytes),
        std::cmp::Ordering::Less => Err(MlError::io(format!(
            "{shown} shrank below {len} bytes while it was read"
        ))),
        std::cmp::Ordering::Greater => Err(MlError::io(format!("{shown} grew past {len} bytes while it was read"))),
    }
}

pub enum Storage {
    #[cfg(feature = "mmap")]
    Mapped(memmap2::Mmap),
    Owned(AlignedBytes),
}

impl Storage {
    /// Opens the whole file in the default mode (`LoadMode::Auto`).
    pub fn open(path: &Path) -> Result<Storage> {
        Storage::open_with(path, LoadMode::Auto)
    }

    /// Opens the whole file, mapped or read as `mode` says.
    pub fn open_with(path: &Path, mode: LoadMode) -> Result<Storage> {
        let shown = path.display();
        let (mut file, len) = open_regular(path)?;
        let size = usize::try_from(len)
            .map_err(|_| MlError::no_mem(format!("{shown} is {len} bytes, more than this platform can address")))?;
        #[cfg(all(feature = "mmap", not(miri)))]
        if mode.maps(len) {
            // SAFETY: a private (copy-on-write) read-only mapping of `size`
            // bytes, the length the file had a moment ago; the loader checks
            // it against the header before using any byte. The mapping is
            // only sound while no other process truncates or rewrites the
            // file (module docs, FORMAT.md): no OS lets a mapping survive
            // its file shrinking. `LoadMode::Read` is the safe alternative.
            let map = unsafe { memmap2::MmapOptions::new().len(size).map_copy_read_only(&file) }
                .map_err(|e| MlError::io(format!("cannot map {shown}: {e}")))?;
            return Ok(Storage::Mapped(map));
        }
        #[cfg(not(all(feature = "mmap", not(miri))))]
        let _ = mode;
        let mut buf = AlignedBytes::zeroed(size, "model file buffer")?;
        file.read_exact(buf.as_bytes_mut()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                MlError::io(format!("{shown} shrank below {len} bytes while it was read"))
            } else {
                MlError::io(format!("cannot read {shown}: {e}"))
            }
        })?;
        // A file that grew while it was read is no longer the file measured.
        let mut probe = [0u8; 1];
        match file.read(&mut probe) {
            Ok(0) => Ok(Storage::Owned(buf)),
            Ok(_) => Err(MlError::io(format!("{shown} grew past {len} bytes while it was read"))),
            Err(e) => Err(MlError::io(format!("cannot read {shown}: {e}"))),
        }
    }

    /// Copies bytes already in memory into aligned storage (tests, tools).
    pub fn from_bytes(bytes: &[u8]) -> Result<Storage> {
        let mut buf = AlignedBytes::zeroed(bytes.len(), "model buffer")?;
        buf.as_bytes_mut().copy_from_slice(bytes);
        Ok(Storage::Owned(buf))
    }

    /// Whether the bytes are a mapping of the file (else an owned copy).
    pub fn is_mapped(&self) -> bool {
        match self {
            #[cfg(feature = "mmap")]
            Storage::Mapped(_) => true,
            Storage::Owned(_) => false,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            #[cfg(feature = "mmap")]
            Storage::Mapped(m) => m,
            Storage::Owned(b) => b.as_bytes(),
        }
    }

    /// The bytes, writable, if they are an owned copy (not a mapping).
    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            #[cfg(feature = "mmap")]
            Storage::Mapped(_) => None,
            Storage::Owned(b) => Some(b.as_bytes_mut()),
        }
    }
}
