//! The `.tok` reader (FORMAT.md, "Tokenizer files"): every field checked
//! against what is left before anything is allocated for it.

use super::{byte_to_char, decode_token, Bpe, PreTokenizer, MAGIC, NONE};
use crate::core::error::{MlError, Result};
use std::cmp::Reverse;
use std::collections::HashMap;

const HEADER_BYTES: usize = 48;
const MAX_VOCAB: u32 = 1 << 20;
const MAX_MERGES: u32 = 1 << 22;
const MAX_PRE_NAME: u32 = 64;
const MAX_TOKEN_BYTES: u32 = 4096;
const MAX_TEMPLATE: u32 = 1 << 20;
/// Token types: llama.cpp's control and user-defined, the special tokens.
const TYPE_CONTROL: u8 = 3;
const TYPE_USER_DEFINED: u8 = 4;
const MAX_TYPE: u8 = 6;

/// Header flag bits.
pub(super) const FLAG_ADD_BOS: u32 = 1;
pub(super) const FLAG_ADD_EOS: u32 = 2;

/// Reads the `.tok` format front to back; every read checks what is left.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

fn err_at(at: usize, what: impl std::fmt::Display) -> MlError {
    MlError::format(format!(".tok {what} (at byte offset {at})"))
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize, field: &dyn std::fmt::Display) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(err_at(
                self.at,
                format_args!("{field}: truncated: needs {n} bytes, {} left", self.left()),
            ));
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    fn u32(&mut self, field: &dyn std::fmt::Display) -> Result<u32> {
        let b = self.take(4, field)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A `u32 len` then `len` bytes, `len` at most `max`.
    fn string(&mut self, max: u32, field: &dyn std::fmt::Display) -> Result<&'a [u8]> {
        let at = self.at;
        let len = self.u32(&format_args!("{field} length"))?;
        if len > max {
            return Err(err_at(
                at,
                format_args!("{field} length {len} is over the limit of {max}"),
            ));
        }
        self.take(len as usize, field)
    }
}

fn utf8<'a>(bytes: &'a [u8], at: usize, field: &dyn std::fmt::Display) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|e| {
        err_at(
            at,
            format_args!("{field} is not valid UTF-8 (bad byte at {})", e.valid_up_to()),
        )
    })
}

impl Bpe {
    /// Parses a `.tok` image. Any byte string gives a tokenizer or a Format
    /// error naming the field and its offset; nothing is allocated before the
    /// bytes to fill it are known to be there.
    pub fn from_bytes(bytes: &[u8]) -> Result<Bpe> {
        if bytes.len() < HEADER_BYTES {
            return Err(err_at(
                0,
                format_args!(
                    "header: the file is {} bytes, the header alone is {HEADER_BYTES}",
                    bytes.len()
                ),
            ));
        }
        if bytes[..4] != MAGIC {
            return Err(err_at(0, format_args!("magic is {:02x?}, not \"MLTK\"", &bytes[..4])));
        }
        let word = |i: usize| u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
        let (version, kind, n_vocab, n_merges, n_special) = (word(1), word(2), word(3), word(4), word(5));
        let (bos, eos, unk, pad, flags, reserved) = (word(6), word(7), word(8), word(9), word(10), word(11));
        if version != 1 {
            return Err(err_at(
                4,
                format_args!("header version is {version}; only version 1 is known"),
            ));
        }
        if kind != 1 {
            return Err(err_at(
                8,
                format_args!("header kind is {kind}; only 1 (byte-level BPE) is known"),
            ));
        }
        if !(1..=MAX_VOCAB).contains(&n_vocab) {
            return Err(err_at(
                12,
                format_args!("header n_vocab is {n_vocab}; must be 1..={MAX_VOCAB}"),
            ));
        }
        if n_merges > MAX_MERGES {
            return Err(err_at(
                16,
                format_args!("header n_merges is {n_merges}; the limit is {MAX_MERGES}"),
            ));
        }
        if n_special > n_vocab {
            return Err(err_at(
                20,
                format_args!("header n_special is {n_special}, more than n_vocab {n_vocab}"),
            ));
        }
        for (i, (name, id)) in [("bos_id", bos), ("eos_id", eos), ("unk_id", unk), ("pad_id", pad)]
            .into_iter()
            .enumerate()
        {
            if id != NONE && id >= n_vocab {
                return Err(err_at(
                    24 + 4 * i,
                    format_args!("header {name} is {id}, outside the vocabulary of {n_vocab} (0xFFFFFFFF = none)"),
                ));
            }
        }
        if flags & !(FLAG_ADD_BOS | FLAG_ADD_EOS) != 0 {
            return Err(err_at(
                40,
                format_args!("header flags are {flags:#x}; only bits 0 and 1 are defined"),
            ));
        }
        if reserved != 0 {
            return Err(err_at(44, format_args!("header reserved word is {reserved}, not 0")));
        }

        let mut r = Reader {
            bytes,
            at: HEADER_BYTES,
        };
        let n = n_vocab as usize;

        // 1. The pre-tokenizer.
        let at = r.at;
        let raw = r.string(MAX_PRE_NAME, &"pre-tokenizer name")?;
        if !raw.is_ascii() {
            return Err(err_at(at, "pre-tokenizer name is not ASCII"));
        }
        let pre_name = String::from_utf8_lossy(raw).into_owned();
        let pre = PreTokenizer::from_name(&pre_name).ok_or_else(|| {
            err_at(
                at,
                format_args!("pre-tokenizer {pre_name:?} is not implemented (known: gpt2, default, smollm)"),
            )
        })?;

        // 2. Tokens: each at least 4 + 1 bytes, plus its type byte.
        if r.left() / 6 < n {
            return Err(err_at(
                r.at,
                format_args!(
                    "tokens: truncated: {n} tokens need at least {} bytes with their types, {} left",
                    6 * n,
                    r.left()
                ),
            ));
        }
        let mut text = String::new();
        let mut starts = Vec::with_capacity(n + 1);
        starts.push(0);
        let mut ids: HashMap<&str, u32> = HashMap::with_capacity(n);
        for id in 0..n_vocab {
            let at = r.at;
            let field = format_args!("token {id}");
            let raw = r.string(MAX_TOKEN_BYTES, &field)?;
            if raw.is_empty() {
                return Err(err_at(
                    at,
                    format_args!("token {id} is empty (its length must be 1..=4096)"),
                ));
            }
            let s = utf8(raw, at + 4, &field)?;
            text.push_str(s);
            starts.push(text.len());
            ids.entry(s).or_insert(id);
        }

        // 3. Types.
        let types = r.take(n, &"types")?.to_vec();
        if let Some(i) = types.iter().position(|&t| t > MAX_TYPE) {
            return Err(err_at(
                r.at - n + i,
                format_args!("type of token {i} is {}; types are 0..=6", types[i]),
            ));
        }

        // 4. Merges.
        let token = |id: u32| &text[starts[id as usize]..starts[id as usize + 1]];
        let m = n_merges as usize;
        if r.left() / 12 < m {
            return Err(err_at(
                r.at,
                format_args!("merges: truncated: {m} merges need {} bytes, {} left", 12 * m, r.left()),
            ));
        }
        let mut merges = HashMap::with_capacity(m);
        for rank in 0..n_merges {
            let at = r.at;
            let field = format_args!("merge {rank}");
            let (a, b, c) = (r.u32(&field)?, r.u32(&field)?, r.u32(&field)?);
            if let Some(bad) = [a, b, c].into_iter().find(|&x| x >= n_vocab) {
                return Err(err_at(
                    at,
                    format_args!("merge {rank} ({a} {b} -> {c}) names id {bad}, outside the vocabulary of {n_vocab}"),
                ));
            }
            let (ta, tb, tc) = (token(a), token(b), token(c));
            if tc.len() != ta.len() + tb.len() || !tc.starts_with(ta) || !tc.ends_with(tb) {
                return Err(err_at(
                    at,
                    format_args!("merge {rank}: token {c} {tc:?} is not token {a} {ta:?} followed by token {b} {tb:?}"),
                ));
            }
            // A duplicated string encodes as its lowest id (FORMAT.md).
            let c = ids.get(tc).copied().unwrap_or(c);
            merges.entry((a, b)).or_insert((rank, c));
        }

        // 5. Special tokens.
        let mut special = Vec::with_capacity(n_special as usize);
        for i in 0..n_special {
            let at = r.at;
            let id = r.u32(&format_args!("special token {i}"))?;
            if id >= n_vocab {
                return Err(err_at(
                    at,
                    format_args!("special token {i} is id {id}, outside the vocabulary of {n_vocab}"),
                ));
            }
            if special.last().is_some_and(|&prev| id <= prev) {
                return Err(err_at(
                    at,
                    format_args!("special token {i} is id {id}: the ids must be strictly ascending"),
                ));
            }
            let t = types[id as usize];
            if t != TYPE_CONTROL && t != TYPE_USER_DEFINED {
                return Err(err_at(
                    at,
                    format_args!("special token {i} is id {id} of type {t}, not 3 (control) or 4 (user-defined)"),
                ));
            }
            special.push(id);
        }
        let typed = types
            .iter()
            .filter(|&&t| t == TYPE_CONTROL || t == TYPE_USER_DEFINED)
            .count();
        if typed != special.len() {
            return Err(err_at(
                r.at,
                format_args!(
                    "special tokens: {} listed but {typed} tokens have type 3 or 4; the list must be exactly those",
                    special.len()
                ),
            ));
        }

        // 6. Chat template, then nothing.
        let at = r.at;
        let raw = r.string(MAX_TEMPLATE, &"chat template")?;
        let chat_template = utf8(raw, at + 4, &"chat template")?.to_string();
        if r.left() != 0 {
            return Err(err_at(
                r.at,
                format_args!("{} trailing bytes after the chat template", r.left()),
            ));
        }

        // Each byte's starting symbol. A vocabulary may lack some byte
        // characters (SmolLM2 lacks 21: control bytes 0x04, 0x06, 0x13, 0x14,
        // 0x16, 0x1D and the lead bytes 0xC0, 0xC1, 0xF1, 0xF2, 0xF5-0xFF);
        // such bytes are dropped before merging, as HF `tokenizers` (BPE with
        // no unk token) and llama.cpp do. unk_id is not used for them:
        // SmolLM2's is <|endoftext|>, which would end the text mid-prompt.
        let mut byte_ids = [NONE; 256];
        let mut buf = [0u8; 4];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            let s: &str = byte_to_char(b as u8).encode_utf8(&mut buf);
            *slot = ids.get(s).copied().unwrap_or(NONE);
        }

        let mut special_match: Vec<(String, u32)> = Vec::new();
        for &id in &special {
            let s = token(id);
            if !special_match.iter().any(|(t, _)| t == s) {
                special_match.push((s.to_string(), id));
            }
        }
        // Stable: among equal lengths the lower id stays first.
        special_match.sort_by_key(|(s, _)| Reverse(s.len()));
        let mut special_first = [false; 256];
        for (s, _) in &special_match {
            special_first[s.as_bytes()[0] as usize] = true;
        }

        let mut decoded = Vec::with_capacity(text.len());
        let mut byte_starts = Vec::with_capacity(n + 1);
        byte_starts.push(0);
        for id in 0..n_vocab {
            decode_token(token(id), &mut decoded);
            byte_starts.push(decoded.len());
        }
        drop(ids);

        Ok(Bpe {
            text,
            starts,
            bytes: decoded,
            byte_starts,
            types,
            merges,
            byte_ids,
            special,
            special_match,
            special_first,
            bos,
            eos,
            unk,
            pad,
            flags,
            pre,
            pre_name,
            chat_template,
        })
    }
}
