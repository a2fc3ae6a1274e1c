//! The paths that read files named on the command line, on arbitrary bytes:
//! a prompt file (`ml run -f`: UTF-8 text; `ml logits -f`: token ids) and a
//! tokenizer file, each written to a regular file and read back through the
//! bounded, type-checked reader (`core::file::read_regular`), as `ml` reads
//! them. Must hold: the bytes read are the bytes written; `prompt_text`
//! accepts exactly the valid UTF-8 and names the offset of the first bad
//! byte otherwise; `prompt_ids` gives ids that print and parse back to
//! themselves, or a Format error naming the file; `Tokenizer::open` agrees
//! with `Tokenizer::from_bytes` (the same error kind, or the same ids for a
//! text). Files that are not regular files (a directory here) are Io errors
//! saying so, before any read.

#![no_main]

use legacy_ml::core::file::read_regular;
use legacy_ml::model::prompt::{parse_ids, prompt_ids, prompt_text, read_prompt_bytes};
use legacy_ml::model::tokenizer::Tokenizer;
use legacy_ml::ErrorKind;
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

/// One directory per process for the file the target writes.
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("legacy-ml-fuzz-prompt-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        // A directory is not a file, whichever reader is asked.
        for e in [read_regular(&d).unwrap_err(), read_prompt_bytes(&d).unwrap_err()] {
            assert_eq!(e.kind, ErrorKind::Io);
            assert!(e.message.contains("is a directory, not a regular file"), "{e}");
        }
        let e = Tokenizer::open(&d).err().unwrap();
        assert!(e.message.contains("is a directory, not a regular file"), "{e}");
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let path = dir().join("input");
    std::fs::write(&path, data).unwrap();
    let bytes = read_prompt_bytes(&path).unwrap();
    assert_eq!(bytes, data);

    match prompt_text(&bytes, "p.txt") {
        Ok(text) => assert_eq!(std::str::from_utf8(data).ok(), Some(text.as_str())),
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::Format);
            let valid = std::str::from_utf8(data).unwrap_err().valid_up_to();
            assert!(e.message.contains(&format!("invalid byte at offset {valid}")), "{e}");
        }
    }
    match prompt_ids(&bytes, "p.txt") {
        Ok(ids) => {
            assert!(!ids.is_empty());
            let printed: Vec<String> = ids.iter().map(u32::to_string).collect();
            assert_eq!(parse_ids(&printed.join(",")).unwrap(), ids);
            assert_eq!(parse_ids(&printed.join("\n")).unwrap(), ids);
        }
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::Format);
            assert!(e.message.starts_with("p.txt"), "{e}");
        }
    }

    let opened = Tokenizer::open(&path);
    let parsed = Tokenizer::from_bytes(data);
    match (&opened, &parsed) {
        (Ok(a), Ok(b)) => {
            let text = String::from_utf8_lossy(&data[..data.len().min(64)]);
            assert_eq!(a.encode(&text, true, false), b.encode(&text, true, false));
        }
        (Err(a), Err(b)) => assert_eq!(a.kind, b.kind),
        _ => panic!("open and from_bytes disagree"),
    }
});
