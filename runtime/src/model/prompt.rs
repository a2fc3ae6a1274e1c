//! Prompts given in a file (`ml run -f FILE`, `ml logits -f FILE`, `-` for
//! stdin), which argv's size limit does not bound: text for `run`, token
//! ids for `logits`. Every reader here gives a value or an error, never a
//! panic, on any bytes (`fuzz/fuzz_targets/prompt_file.rs`).

use crate::core::error::{MlError, Result};
use std::io::Read;
use std::path::Path;

/// The largest prompt file read: 64 MiB, millions of tokens more than any
/// context holds.
pub const MAX_PROMPT_BYTES: u64 = 64 << 20;

/// The bytes of a prompt file: `-` is stdin, read up to the bound; any other
/// path must be a regular file (`core::file::read_regular`: not a FIFO, not
/// /dev/zero) of at most [`MAX_PROMPT_BYTES`].
pub fn read_prompt_bytes(path: &Path) -> Result<Vec<u8>> {
    let too_long = |what: &str| {
        MlError::io(format!(
            "{what} holds more than {MAX_PROMPT_BYTES} bytes, the most a prompt file may have"
        ))
    };
    if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .take(MAX_PROMPT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| MlError::io(format!("cannot read the prompt from stdin: {e}")))?;
        if bytes.len() as u64 > MAX_PROMPT_BYTES {
            return Err(too_long("stdin"));
        }
        return Ok(bytes);
    }
    let (_, len) = crate::core::file::open_regular(path)?;
    if len > MAX_PROMPT_BYTES {
        return Err(too_long(&path.display().to_string()));
    }
    crate::core::file::read_regular(path)
}

/// A prompt text: the bytes as UTF-8, or a Format error naming the offset
/// of the first invalid byte.
pub fn prompt_text(bytes: &[u8], shown: &str) -> Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(|e| {
        MlError::format(format!(
            "{shown} is not UTF-8 text: invalid byte at offset {}",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Token ids written "1,2,3", or separated by any white space (newlines
/// included). At least one id; each a u32.
pub fn parse_ids(s: &str) -> std::result::Result<Vec<u32>, String> {
    let mut ids = Vec::new();
    for p in s
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
    {
        let id = p.parse::<u32>().map_err(|e| {
            let p: String = p.chars().take(32).collect();
            format!("token id {p:?}: {e}")
        })?;
        ids.push(id);
    }
    if ids.is_empty() {
        return Err("no token ids given".to_string());
    }
    Ok(ids)
}

/// The token ids of a prompt file (`parse_ids`), or a Format error naming it.
pub fn prompt_ids(bytes: &[u8], shown: &str) -> Result<Vec<u32>> {
    let text = prompt_text(bytes, shown)?;
    parse_ids(&text).map_err(|e| MlError::format(format!("{shown}: {e}")))
}
