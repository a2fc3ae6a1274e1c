//! GPT-2 style byte-level BPE (SmolLM2 and other `tokenizer.ggml.model =
//! gpt2` vocabularies), read from the `.tok` file that `tools/convert.py`
//! writes. FORMAT.md, "Tokenizer files", is the specification; this module
//! reproduces what the Hugging Face `tokenizers` library does with the same
//! vocabulary and merges (checked id for id by tools/tests/test_bpe_parity.py).
//!
//! Encoding: special tokens are cut out of the raw text first (leftmost,
//! longest), each becoming its id; the text between them is pre-tokenized
//! (`smollm`: every `\p{N}` character alone, then the GPT-2 regex), each
//! piece's UTF-8 bytes are mapped to GPT-2's byte characters, and adjacent
//! symbols are merged by rank. Decoding maps the characters back to bytes.
//! A byte whose character is not in the vocabulary (SmolLM2 lacks 21) is
//! dropped before merging, as HF (a BPE without unk token) and llama.cpp
//! do; FORMAT.md's "use unk_id or fail" is not followed because SmolLM2's
//! unk is `<|endoftext|>`.
//!
//! The GPT-2 regex is matched by hand (the library depends on nothing but
//! memmap2). Its character classes:
//! - `\s` is [`char::is_whitespace`] (Unicode White_Space, which is what
//!   Oniguruma's `\s` matches: identical on every code point);
//! - `\p{N}` is [`char::is_numeric`] (general category N: Nd, Nl, No)
//!   minus `NOT_NUMBER`;
//! - `\p{L}` is [`char::is_alphabetic`] minus the numerics (Nl) minus
//!   `NOT_LETTER`: the Alphabetic property also holds Other_Alphabetic,
//!   i.e. combining vowel signs (Devanagari `ि` U+093F, Arabic harakat,
//!   U+0345, …) and circled letters (Ⓐ, category So), which are not letters.
//!
//! std has no general-category API, so `NOT_LETTER` lists them. It was made
//! by classifying every code point with std and with HF `tokenizers` 0.23.3
//! (whose regex engine, Oniguruma, knows Unicode 14, no later): besides the
//! Other_Alphabetic marks and symbols it holds the letters assigned after
//! Unicode 14 (Kawi, Garay, CJK extension I/J, …), which HF treats as
//! unassigned, i.e. as neither letter nor digit, and `NOT_NUMBER` the 13
//! digits of Unicode 17 that HF's regex does not know (its `Digits`
//! pre-tokenizer, like std, does). With them every one of the 1 112 064
//! scalar values gets HF's class (tools/tests/test_bpe_parity.py checks
//! them all). A later Rust whose std knows a newer Unicode could make new
//! letters disagree again; that test would say so.
//!
//! The parts: `pretokenize` (the character classes and the split into
//! pieces), `file` (the `.tok` reader), `merge` (BPE on one piece). This file
//! holds the tokenizer they fill and GPT-2's byte ↔ character mapping.

mod file;
mod merge;
mod pretokenize;

pub use pretokenize::{is_letter, is_number, is_space, PreTokenizer};

use file::{FLAG_ADD_BOS, FLAG_ADD_EOS};
use merge::Scratch;
use std::collections::HashMap;

/// The first four bytes of a `.tok` file.
pub const MAGIC: [u8; 4] = *b"MLTK";
/// "No such token" in the header's id fields.
pub const NONE: u32 = u32::MAX;

// ---------------------------------------------------------------------------
// GPT-2's bytes_to_unicode.

/// The 188 bytes that stand for themselves.
const fn byte_is_printable(b: u8) -> bool {
    matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// Byte → character: printable bytes map to the code point of the same value,
/// the other 68, in increasing order, to U+0100, U+0101, … U+0143.
static BYTE_TO_CHAR: [char; 256] = {
    let mut table = ['\0'; 256];
    let mut next = 0x100u32;
    let mut b = 0usize;
    while b < 256 {
        let cp = if byte_is_printable(b as u8) {
            b as u32
        } else {
            next += 1;
            next - 1
        };
        table[b] = match char::from_u32(cp) {
            Some(c) => c,
            None => panic!("not a char"),
        };
        b += 1;
    }
    table
};

/// The 68 non-printable bytes in increasing order: U+0100 + i stands for `SHIFTED[i]`.
static SHIFTED: [u8; 68] = {
    let mut table = [0u8; 68];
    let mut n = 0usize;
    let mut b = 0usize;
    while b < 256 {
        if !byte_is_printable(b as u8) {
            table[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    table
};

/// GPT-2's character for byte `b` (`b' '` → `'Ġ'`, `b'\n'` → `'Ċ'`).
pub fn byte_to_char(b: u8) -> char {
    BYTE_TO_CHAR[b as usize]
}

/// The byte a GPT-2 byte character stands for, `None` for any other character.
pub fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 0x100 {
        let b = cp as u8;
        return byte_is_printable(b).then_some(b);
    }
    SHIFTED.get((cp - 0x100) as usize).copied()
}

/// A token string's bytes, as HF's ByteLevel decoder gives them: each
/// character mapped back to its byte, or, when some character is not a byte
/// character (a special token written with a plain space, say), the
/// string's own UTF-8.
fn decode_token(token: &str, out: &mut Vec<u8>) {
    let mark = out.len();
    for c in token.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.truncate(mark);
                out.extend_from_slice(token.as_bytes());
                return;
            }
        }
    }
}

/// A byte-level BPE tokenizer read from a `.tok` file.
pub struct Bpe {
    /// Token strings (GPT-2 unicode form) back to back: token `i` is
    /// `text[starts[i]..starts[i + 1]]`.
    text: String,
    starts: Vec<usize>,
    /// The bytes each token decodes to, laid out the same way.
    bytes: Vec<u8>,
    byte_starts: Vec<usize>,
    types: Vec<u8>,
    /// (left, right) → (rank, merged id); the lowest rank of a repeated pair.
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// The id of each byte's character (`NONE` when the vocabulary lacks it).
    byte_ids: [u32; 256],
    /// Special ids, ascending, as stored.
    special: Vec<u32>,
    /// Special token strings and ids for matching: each distinct string once
    /// (its lowest id), longest first so the first hit at a place is the longest.
    special_match: Vec<(String, u32)>,
    /// First bytes of the special strings.
    special_first: [bool; 256],
    bos: u32,
    eos: u32,
    unk: u32,
    pad: u32,
    flags: u32,
    pre: PreTokenizer,
    pre_name: String,
    chat_template: String,
}

impl Bpe {
    pub fn vocab_size(&self) -> usize {
        self.types.len()
    }

    fn opt(id: u32) -> Option<u32> {
        (id != NONE).then_some(id)
    }

    pub fn bos_id(&self) -> Option<u32> {
        Self::opt(self.bos)
    }

    /// The end-of-turn token for chat models (`<|im_end|>` for SmolLM2-Instruct).
    pub fn eos_id(&self) -> Option<u32> {
        Self::opt(self.eos)
    }

    pub fn unk_id(&self) -> Option<u32> {
        Self::opt(self.unk)
    }

    pub fn pad_id(&self) -> Option<u32> {
        Self::opt(self.pad)
    }

    /// Whether encoding prepends BOS by default (flag bit 0).
    pub fn add_bos(&self) -> bool {
        self.flags & FLAG_ADD_BOS != 0 && self.bos != NONE
    }

    /// Whether encoding appends EOS by default (flag bit 1).
    pub fn add_eos(&self) -> bool {
        self.flags & FLAG_ADD_EOS != 0 && self.eos != NONE
    }

    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }

    /// The pre-tokenizer name as the file stores it.
    pub fn pre_tokenizer_name(&self) -> &str {
        &self.pre_name
    }

    /// A token's string in GPT-2's unicode form (`"Ġthe"`), or `None` out of range.
    pub fn token(&self, id: u32) -> Option<&str> {
        let i = id as usize;
        (i < self.vocab_size()).then(|| &self.text[self.starts[i]..self.starts[i + 1]])
    }

    /// A token's type byte (3 control, 4 user-defined, …).
    pub fn token_type(&self, id: u32) -> Option<u8> {
        self.types.get(id as usize).copied()
    }

    /// The bytes a token decodes to; empty for an id out of range.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        if i >= self.vocab_size() {
            return &[];
        }
        &self.bytes[self.byte_starts[i]..self.byte_starts[i + 1]]
    }

    /// The special ids (control and user-defined tokens), ascending.
    pub fn special_ids(&self) -> &[u32] {
        &self.special
    }

    /// The id of the special token whose text is `text` (`"<|im_end|>"`).
    pub fn special_id(&self, text: &str) -> Option<u32> {
        self.special_match.iter().find(|(s, _)| s == text).map(|&(_, id)| id)
    }

    /// The chat template as stored (GGUF's Jinja source; may be empty).
    pub fn chat_template(&self) -> &str {
        &self.chat_template
    }

    /// The ids of `text`: special tokens matched in it, the rest pre-tokenized
    /// and merged; BOS / EOS when asked for and the file has them.
    pub fn encode(&self, text: &str, bos: bool, eos: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if bos && self.bos != NONE {
            out.push(self.bos);
        }
        let mut scratch = Scratch::default();
        let mut start = 0;
        let mut at = 0;
        let raw = text.as_bytes();
        while at < raw.len() {
            if self.special_first[raw[at] as usize] {
                // Special strings are valid UTF-8, so a match starts and
                // ends on character boundaries.
                if let Some((s, id)) = self
                    .special_match
                    .iter()
                    .find(|(s, _)| raw[at..].starts_with(s.as_bytes()))
                {
                    self.encode_ordinary_into(&text[start..at], &mut out, &mut scratch);
                    out.push(*id);
                    at += s.len();
                    start = at;
                    continue;
                }
            }
            at += 1;
        }
        self.encode_ordinary_into(&text[start..], &mut out, &mut scratch);
        if eos && self.eos != NONE {
            out.push(self.eos);
        }
        out
    }

    /// The ids of `text` with no special-token matching and no BOS / EOS:
    /// `"<|im_end|>"` in it is ordinary text. For user text in a chat.
    pub fn encode_ordinary(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        self.encode_ordinary_into(text, &mut out, &mut Scratch::default());
        out
    }

    /// The bytes of a sequence: every token's bytes, special tokens as their
    /// literal text, out-of-range ids as nothing. Not necessarily UTF-8
    /// (read it lossily, as HF's decoder does).
    pub fn decode(&self, ids: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        for &id in ids {
            out.extend_from_slice(self.token_bytes(id));
        }
        out
    }
}
