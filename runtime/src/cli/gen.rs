use legacy_ml::core::tensor::WType;
use legacy_ml::model::format::{implied_file_bytes, Header};
use legacy_ml::model::gen::GenConfig;
use legacy_ml::model::writer::save_atomically;
use legacy_ml::{ErrorKind, MlError, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The largest model `ml gen` writes: random weights are for tests and
/// benchmarks, and 64 GiB is far beyond any of them.
pub const MAX_GEN_BYTES: u64 = 64 << 30;

/// The defaults are a tiny GQA model (dim 64, 2 layers, 4 heads, 2 KV heads)
/// that decodes in microseconds per token.
///
/// The shape is checked by the loader's own rules before anything is
/// written (a zero dimension is a usage error, exit 2; dimensions that do
/// not fit together are a Shape error, exit 5), and so is the size: at most
/// 64 GiB, and no more than the free space of the target's file system.
#[derive(clap::Args)]
pub struct GenArgs {
    /// Output .mlb path (written to a temporary file, then renamed). A path
    /// that exists must be a regular file: a device, a FIFO, a directory or
    /// a symbolic link is refused (links are not followed), exit 3.
    #[arg(short, long)]
    out: PathBuf,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Weight type: q8_0 or q4_0.
    #[arg(long, default_value = "q8_0")]
    wtype: WType,
    #[arg(long, default_value_t = 64, value_parser = positive)]
    dim: u32,
    #[arg(long, default_value_t = 2, value_parser = positive)]
    layers: u32,
    #[arg(long, default_value_t = 4, value_parser = positive)]
    heads: u32,
    #[arg(long, default_value_t = 2, value_parser = positive)]
    kv_heads: u32,
    #[arg(long, default_value_t = 128, value_parser = positive)]
    hidden: u32,
    #[arg(long, default_value_t = 256, value_parser = positive)]
    vocab: u32,
    #[arg(long, default_value_t = 64, value_parser = positive)]
    max_seq: u32,
    /// Reuse the embedding table as the classifier (no wcls tensor).
    #[arg(long)]
    shared_classifier: bool,
}

/// A dimension: a whole number from 1 to 4294967295.
fn positive(s: &str) -> std::result::Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(v) => Ok(v),
        Err(_) => Err("expected a whole number from 1 to 4294967295".to_string()),
    }
}

/// The file's size if the shape is one the loader accepts and the size one
/// worth writing; else a Shape error (exit 5) saying why.
fn check_shape(header: &Header) -> Result<u64> {
    let as_shape = |e: MlError| MlError::new(ErrorKind::Shape, e.message);
    Header::parse(&header.to_bytes()).map_err(as_shape)?;
    let bytes = implied_file_bytes(header).map_err(as_shape)?;
    if bytes > MAX_GEN_BYTES {
        return Err(MlError::shape(format!(
            "the model would be {bytes} bytes ({:.1} GiB); ml gen writes at most {MAX_GEN_BYTES} bytes (64 GiB)",
            bytes as f64 / (1u64 << 30) as f64
        )));
    }
    Ok(bytes)
}

/// Refuses a model larger than the free space (an Io error, exit 3).
fn check_free_space(bytes: u64, dir: &Path, free: Option<u64>) -> Result<()> {
    match free {
        Some(free) if bytes > free => Err(MlError::io(format!(
            "the model would be {bytes} bytes but the file system of {} has {free} bytes free",
            dir.display()
        ))),
        _ => Ok(()),
    }
}

/// Fails every write once Ctrl-C was pressed, so that the writer stops
/// and `save_atomically` removes its temporary file.
struct Interruptible<'a> {
    inner: &'a mut dyn Write,
}

impl Write for Interruptible<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if super::sys::interrupted() {
            // Not ErrorKind::Interrupted: write_all would retry that.
            return Err(std::io::Error::other("interrupted (Ctrl-C)"));
        }
        self.inner.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

pub fn run(a: GenArgs) -> Result<()> {
    let cfg = GenConfig {
        dim: a.dim,
        n_layers: a.layers,
        n_heads: a.heads,
        n_kv_heads: a.kv_heads,
        hidden_dim: a.hidden,
        vocab: a.vocab,
        max_seq: a.max_seq,
        wtype: a.wtype,
        shared_classifier: a.shared_classifier,
        seed: a.seed,
    };
    let size = check_shape(&cfg.header())?;
    let dir = match a.out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    check_free_space(size, dir, super::sys::free_bytes(dir))?;

    // Ctrl-C stops the writing; the temporary file is removed (exit 3).
    if !super::sys::catch_interrupt() {
        note!("note: cannot install a Ctrl-C handler; Ctrl-C may leave a temporary file");
    }
    let mut bytes = 0;
    save_atomically(&a.out, |w| {
        let mut w = Interruptible { inner: w };
        bytes = cfg.write(&mut w)?;
        Ok(())
    })?;
    note!(
        "wrote {} ({} bytes, {}, seed {})",
        a.out.display(),
        bytes,
        cfg.wtype.name(),
        cfg.seed
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_larger_than_the_free_space_is_refused_with_both_numbers() {
        let e = check_free_space(5000, Path::new("/some/dir"), Some(4999)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(
            e.message.contains("5000 bytes") && e.message.contains("4999 bytes free"),
            "{e}"
        );
        assert!(e.message.contains("/some/dir"), "{e}");
        assert!(check_free_space(5000, Path::new("."), Some(5000)).is_ok());
        assert!(check_free_space(5000, Path::new("."), None).is_ok());
    }

    #[test]
    fn the_free_space_of_a_real_directory_is_known() {
        #[cfg(unix)]
        assert!(crate::cli::sys::free_bytes(&std::env::temp_dir()).is_some_and(|b| b > 0));
    }

    #[test]
    fn sizes_beyond_the_bound_are_refused_with_both_numbers() {
        let big = GenConfig {
            dim: 4096,
            n_layers: 100_000,
            ..GenConfig::default()
        };
        let e = check_shape(&big.header()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Shape);
        assert!(e.message.contains(&MAX_GEN_BYTES.to_string()), "{e}");
        assert_eq!(check_shape(&GenConfig::default().header()).unwrap(), 121344);
    }
}
