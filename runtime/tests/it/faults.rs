//! Run faults (README "Faults and bad input"): a model file changed under a
//! loaded model, a prompt longer than the context, a write that fails
//! half-way. Each gives a clear error or no effect, never garbage.

use legacy_ml::core::file::{LoadMode, READ_LIMIT};
use legacy_ml::model::format::TensorKind;
use legacy_ml::model::gen::GenConfig;
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::writer::save_atomically;
use legacy_ml::model::Model;
use legacy_ml::{ErrorKind, MlError};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A small model (smaller still under Miri, which interprets every
/// instruction); `seed` picks its weights, never its size.
fn cfg(seed: u64) -> GenConfig {
    GenConfig {
        dim: 32,
        n_layers: 1,
        hidden_dim: 32,
        vocab: if cfg!(miri) { 16 } else { 64 },
        max_seq: if cfg!(miri) { 2 } else { 8 },
        seed,
        ..GenConfig::default()
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("legacy-ml-faults-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    /// The names in the directory, sorted.
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The logits, as bits, after each of `tokens` from position 0.
fn logits_bits(model: &Model, tokens: &[u32]) -> Vec<Vec<u32>> {
    legacy_ml::guard::guard();
    let mut tf = Transformer::new(model).unwrap();
    tokens
        .iter()
        .enumerate()
        .map(|(pos, &t)| tf.forward(t, pos).unwrap().iter().map(|v| v.to_bits()).collect())
        .collect()
}

/// Every weight of the model, as bits: what a change to the file would
/// have to reach.
fn weight_bits(model: &Model) -> Vec<u32> {
    let mut bits = Vec::new();
    for t in &model.layout().tensors {
        match t.kind {
            TensorKind::F32 => bits.extend(model.vector(t).unwrap().iter().map(|v| v.to_bits())),
            TensorKind::Quant => {
                let m = model.matrix(t).unwrap();
                bits.extend(m.q.iter().map(|&b| b as u32));
                bits.extend(m.d.iter().map(|v| v.to_bits()));
            }
        }
    }
    bits
}

/// Overwrites the file's bytes in place: same inode, no truncation, as an
/// editor or a careless `cp` onto the file would.
fn rewrite_in_place(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

// ---------------------------------------------------------------------------
// The model file changing under a loaded model

#[test]
fn a_read_model_is_immune_to_its_file_being_rewritten_or_truncated() {
    let dir = TempDir::new("read");
    let path = dir.path("m.mlb");
    let (a, b) = (cfg(1).to_bytes().unwrap(), cfg(2).to_bytes().unwrap());
    assert_eq!(a.len(), b.len());
    std::fs::write(&path, &a).unwrap();
    // Under Miri (which interprets every instruction) the weights are
    // compared, not the logits they give.
    let tokens: &[u32] = if cfg!(miri) { &[] } else { &[1, 5, 3] };

    let model = Model::open_with(&path, LoadMode::Read).unwrap();
    assert!(!model.is_mapped());
    let (weights, logits) = (weight_bits(&model), logits_bits(&model, tokens));
    // The other model differs, so a change would show.
    let other = Model::from_bytes(&b).unwrap();
    assert_ne!(weights, weight_bits(&other));
    assert!(tokens.is_empty() || logits != logits_bits(&other, tokens));

    rewrite_in_place(&path, &b);
    assert_eq!(weight_bits(&model), weights, "an in-place rewrite reached a read model");
    assert_eq!(logits_bits(&model, tokens), logits);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    assert_eq!(weight_bits(&model), weights, "truncation reached a read model");
    assert_eq!(logits_bits(&model, tokens), logits);
}

#[test]
fn auto_reads_files_up_to_the_limit_and_maps_larger_ones() {
    let mapping = cfg!(all(feature = "mmap", not(miri)));
    assert!(!LoadMode::Auto.maps(1000));
    assert!(!LoadMode::Auto.maps(READ_LIMIT));
    assert_eq!(LoadMode::Auto.maps(READ_LIMIT + 1), mapping);
    assert_eq!(LoadMode::Map.maps(1000), mapping);
    assert!(!LoadMode::Map.maps(0), "an empty file cannot be mapped");
    assert!(!LoadMode::Read.maps(u64::MAX));
    for (name, mode) in [
        ("auto", LoadMode::Auto),
        ("map", LoadMode::Map),
        ("read", LoadMode::Read),
    ] {
        assert_eq!(name.parse::<LoadMode>(), Ok(mode));
        assert_eq!(mode.name(), name);
    }
    assert!("mmap".parse::<LoadMode>().unwrap_err().contains("auto, map or read"));

    let dir = TempDir::new("auto");
    let path = dir.path("m.mlb");
    let bytes = cfg(3).to_bytes().unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let model = Model::open(&path).unwrap();
    assert!(!model.is_mapped(), "a {}-byte model is read by default", bytes.len());
    let mapped = Model::open_with(&path, LoadMode::Map).unwrap();
    assert_eq!(mapped.is_mapped(), mapping);
    assert_eq!(weight_bits(&model), weight_bits(&mapped));
    let tokens: &[u32] = if cfg!(miri) { &[] } else { &[2, 4] };
    assert_eq!(logits_bits(&model, tokens), logits_bits(&mapped, tokens));
}

/// Why `auto` reads small files: a private mapping is not a snapshot. On
/// Linux the pages of a MAP_PRIVATE mapping that this process has not
/// written are the file's page cache, so an in-place rewrite shows through.
/// (Truncation would be worse: SIGBUS on the next touch of a lost page.)
/// On Windows the same holds for a copy-on-write view (FILE_MAP_COPY) of a
/// file mapping: its unwritten pages are the file's cached pages.
#[cfg(all(any(target_os = "linux", windows), feature = "mmap"))]
#[test]
#[cfg_attr(miri, ignore = "Miri cannot map files")]
fn a_mapped_model_sees_an_in_place_rewrite() {
    let dir = TempDir::new("map");
    let path = dir.path("m.mlb");
    let (a, b) = (cfg(4).to_bytes().unwrap(), cfg(5).to_bytes().unwrap());
    std::fs::write(&path, &a).unwrap();
    let model = Model::open_with(&path, LoadMode::Map).unwrap();
    assert!(model.is_mapped());
    let tok_emb = &model.layout().tensors[0];
    let range = tok_emb.q_offset..tok_emb.q_offset + tok_emb.q_bytes;
    assert_eq!(model.matrix(tok_emb).unwrap().q, &a[range.clone()]);
    assert_ne!(a[range.clone()], b[range.clone()]);
    rewrite_in_place(&path, &b);
    assert_eq!(
        model.matrix(tok_emb).unwrap().q,
        &b[range],
        "the mapping shows the rewritten bytes"
    );
}

/// Windows refuses to truncate a file while a view of it is mapped
/// (ERROR_USER_MAPPED_FILE): the truncation fails and the mapped model
/// stays whole, where Linux would let it through and SIGBUS later. Once the
/// model is dropped, the file can be truncated.
#[cfg(all(windows, feature = "mmap"))]
#[test]
#[cfg_attr(miri, ignore = "Miri cannot map files")]
fn a_mapped_model_file_cannot_be_truncated_on_windows() {
    const ERROR_USER_MAPPED_FILE: i32 = 1224;
    let dir = TempDir::new("maptrunc");
    let path = dir.path("m.mlb");
    let bytes = cfg(7).to_bytes().unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let model = Model::open_with(&path, LoadMode::Map).unwrap();
    assert!(model.is_mapped());
    let (weights, logits) = (weight_bits(&model), logits_bits(&model, &[1, 5, 3]));
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let e = file
        .set_len(0)
        .expect_err("truncating a mapped file must fail on Windows");
    assert_eq!(e.raw_os_error(), Some(ERROR_USER_MAPPED_FILE), "{e}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes.len() as u64);
    assert_eq!(weight_bits(&model), weights);
    assert_eq!(logits_bits(&model, &[1, 5, 3]), logits);
    drop(model);
    file.set_len(0).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
}

/// A file whose size changes while it is read is refused, not half-used:
/// procfs files report size 0 and then yield bytes, as a file growing
/// between the stat and the read would.
#[cfg(target_os = "linux")]
#[test]
#[cfg_attr(miri, ignore = "Miri's file system shims do not model procfs sizes")]
fn a_file_that_grows_while_read_is_an_io_error() {
    let e = Model::open_with(Path::new("/proc/self/status"), LoadMode::Read)
        .err()
        .expect("procfs is not a model");
    assert_eq!(e.kind, ErrorKind::Io, "{}", e.message);
    assert!(
        e.message.contains("grew past 0 bytes while it was read"),
        "{}",
        e.message
    );
}

// ---------------------------------------------------------------------------
// A prompt longer than the context

#[test]
fn positions_past_the_context_are_shape_errors() {
    legacy_ml::guard::guard();
    let c = cfg(6);
    let model = Model::from_bytes(&c.to_bytes().unwrap()).unwrap();
    let mut tf = Transformer::new(&model).unwrap();
    let max_seq = c.max_seq as usize;

    let too_long = vec![1u32; max_seq + 1];
    let e = tf.prefill(&too_long).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Shape);
    assert_eq!(
        e.message,
        format!(
            "the prompt has {} tokens but the model's context (max_seq) is {max_seq}",
            max_seq + 1
        )
    );
    let e = tf.forward(1, max_seq).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Shape);
    assert_eq!(
        e.message,
        format!("position {max_seq} is past the end: the model's context (max_seq) is {max_seq}")
    );
    let e = tf.prefill(&[]).unwrap_err();
    assert_eq!((e.kind, e.message.contains("empty")), (ErrorKind::Shape, true));

    // A prompt that fills the context exactly is fine, and the refusals
    // above left the state usable: the same logits as a fresh transformer.
    let full: Vec<u32> = (0..max_seq as u32).map(|i| i % c.vocab).collect();
    let got: Vec<u32> = tf.prefill(&full).unwrap().iter().map(|v| v.to_bits()).collect();
    assert_eq!(Some(&got), logits_bits(&model, &full).last());
}

// ---------------------------------------------------------------------------
// Writes that fail half-way

#[test]
fn a_failed_save_leaves_no_file_and_keeps_the_old_one() {
    let dir = TempDir::new("save");
    let path = dir.path("m.mlb");
    let disk_full = || MlError::io("cannot write model: No space left on device (os error 28)");

    let e = save_atomically(&path, |w| {
        w.write_all(&[7u8; 100_000]).unwrap();
        Err(disk_full())
    })
    .unwrap_err();
    assert_eq!(e, disk_full());
    assert!(dir.names().is_empty(), "left behind: {:?}", dir.names());

    save_atomically(&path, |w| w.write_all(b"old").map_err(|e| MlError::io(e.to_string()))).unwrap();
    assert_eq!(dir.names(), ["m.mlb"]);
    let e = save_atomically(&path, |w| {
        w.write_all(b"new, but cut short").unwrap();
        Err(disk_full())
    })
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    assert_eq!(std::fs::read(&path).unwrap(), b"old");
    assert_eq!(dir.names(), ["m.mlb"]);
}

#[test]
fn a_panicking_writer_leaves_no_temporary_file() {
    let dir = TempDir::new("panic");
    let path = dir.path("m.mlb");
    let caught = std::panic::catch_unwind(|| {
        let _ = save_atomically(&path, |w| {
            w.write_all(b"partial").unwrap();
            panic!("writer bug");
        });
    });
    assert!(caught.is_err());
    assert!(dir.names().is_empty(), "left behind: {:?}", dir.names());
}

#[test]
fn save_into_a_missing_directory_is_an_io_error() {
    let dir = TempDir::new("missing");
    let e = save_atomically(&dir.path("no/such/dir/m.mlb"), |_| Ok(())).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    assert!(e.message.contains("cannot create"), "{}", e.message);
    assert!(dir.names().is_empty());
}

// ---------------------------------------------------------------------------
// Targets and files that are not regular files

/// The names the loader and the writer give the kinds of file they refuse.
/// Read-only: the metadata of /dev/null is only looked at.
#[cfg(unix)]
#[test]
#[cfg_attr(miri, ignore = "Miri's isolation hides /dev")]
fn file_kinds_are_named() {
    use legacy_ml::core::file::kind_name;
    let dir = TempDir::new("kinds");
    let file = dir.path("f");
    std::fs::write(&file, b"x").unwrap();
    std::os::unix::fs::symlink(&file, dir.path("l")).unwrap();
    let kind = |p: &Path| kind_name(&std::fs::symlink_metadata(p).unwrap().file_type());
    assert_eq!(kind(&file), "a regular file");
    assert_eq!(kind(&dir.0), "a directory");
    assert_eq!(kind(&dir.path("l")), "a symbolic link");
    assert_eq!(kind(Path::new("/dev/null")), "a character device");
    let _socket = std::os::unix::net::UnixListener::bind(dir.path("s")).unwrap();
    assert_eq!(kind(&dir.path("s")), "a socket");
}

/// A target that exists and is not a regular file is refused before any
/// byte is written: a FIFO, a socket, a directory, a symbolic link (even to
/// a regular file). Each stays as it was, and no temporary file is left.
#[cfg(unix)]
#[test]
#[cfg_attr(miri, ignore = "Miri cannot make FIFOs")]
fn save_refuses_targets_that_are_not_regular_files() {
    let dir = TempDir::new("targets");
    let status = std::process::Command::new("mkfifo")
        .arg(dir.path("fifo"))
        .status()
        .unwrap();
    assert!(status.success());
    let _socket = std::os::unix::net::UnixListener::bind(dir.path("sock")).unwrap();
    std::fs::create_dir(dir.path("dir")).unwrap();
    std::fs::write(dir.path("real.mlb"), b"old").unwrap();
    std::os::unix::fs::symlink(dir.path("real.mlb"), dir.path("link.mlb")).unwrap();
    std::os::unix::fs::symlink(dir.path("missing.mlb"), dir.path("dangling.mlb")).unwrap();
    let before = dir.names();
    for (name, what) in [
        ("fifo", "a FIFO"),
        ("sock", "a socket"),
        ("dir", "a directory"),
        ("link.mlb", "a symbolic link"),
        ("dangling.mlb", "a symbolic link"),
    ] {
        let e = save_atomically(&dir.path(name), |w| {
            w.write_all(b"new").map_err(|e| MlError::io(e.to_string()))
        })
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io, "{name}: {e}");
        assert!(e.message.contains(what), "{name}: {e}");
        assert!(e.message.contains("not a regular file"), "{name}: {e}");
        let meta = std::fs::symlink_metadata(dir.path(name)).unwrap();
        assert!(!meta.file_type().is_file(), "{name} was replaced");
    }
    assert_eq!(dir.names(), before);
    assert_eq!(std::fs::read(dir.path("real.mlb")).unwrap(), b"old");
}

/// A transformer with a smaller context sizes its buffers by it, gives the
/// same logits at the positions it holds, and refuses the rest naming both.
#[test]
fn a_smaller_context_costs_less_and_changes_no_logit() {
    legacy_ml::guard::guard();
    let c = cfg(3);
    let model = Model::from_bytes(&{
        let mut v = Vec::new();
        c.write(&mut v).unwrap();
        v
    })
    .unwrap();
    let max_seq = c.max_seq as usize;
    let full = Transformer::with_threads(&model, 1).unwrap();
    let ctx = max_seq / 2;
    let mut small = Transformer::with_context(&model, 1, ctx).unwrap();
    assert!(small.arena_bytes() < full.arena_bytes());
    assert_eq!(small.header().max_seq as usize, ctx);
    let tokens: Vec<u32> = (0..ctx as u32).map(|i| (5 * i + 1) % c.vocab).collect();
    let got: Vec<u32> = small.prefill(&tokens).unwrap().iter().map(|v| v.to_bits()).collect();
    assert_eq!(Some(&got), logits_bits(&model, &tokens).last());
    let e = small.forward(1, ctx).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Shape);
    let said = format!("the context (--ctx) is {ctx} (the model's max_seq is {max_seq})");
    assert!(e.message.contains(&said), "{e}");
    let bigger = Transformer::with_context(&model, 1, usize::MAX).unwrap();
    assert_eq!(bigger.header().max_seq as usize, max_seq);
    assert_eq!(
        Transformer::with_context(&model, 1, 0).err().map(|e| e.kind),
        Some(ErrorKind::Shape)
    );
}
