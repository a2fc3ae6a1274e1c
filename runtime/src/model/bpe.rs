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

use crate::core::error::{MlError, Result};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// The first four bytes of a `.tok` file.
pub const MAGIC: [u8; 4] = *b"MLTK";
/// "No such token" in the header's id fields.
pub const NONE: u32 = u32::MAX;
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
const FLAG_ADD_BOS: u32 = 1;
const FLAG_ADD_EOS: u32 = 2;

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

// ---------------------------------------------------------------------------
// Character classes of the GPT-2 regex (see the module documentation).

/// Code point ranges (inclusive) that std calls alphabetic and not numeric
/// but HF's `\p{L}` rejects: Other_Alphabetic marks and symbols, and letters
/// newer than Unicode 14. Sorted. A range may also cover characters std
/// does not call alphabetic (their answer is "no" either way), which let
/// neighbouring ranges merge.
#[rustfmt::skip]
static NOT_LETTER: [(u32, u32); 181] = [
    (0x0345, 0x036F), (0x05B0, 0x05C7), (0x0610, 0x061A), (0x064B, 0x065F), (0x0670, 0x0670), (0x06D6, 0x06E4),
    (0x06E7, 0x06ED), (0x0711, 0x0711), (0x0730, 0x073F), (0x07A6, 0x07B0), (0x0816, 0x0817), (0x081B, 0x0823),
    (0x0825, 0x0827), (0x0829, 0x082C), (0x088F, 0x0897), (0x08D4, 0x0903), (0x093A, 0x093B), (0x093E, 0x094F),
    (0x0955, 0x0957), (0x0962, 0x0963), (0x0981, 0x0983), (0x09BE, 0x09CC), (0x09D7, 0x09D7), (0x09E2, 0x09E3),
    (0x0A01, 0x0A03), (0x0A3E, 0x0A51), (0x0A70, 0x0A71), (0x0A75, 0x0A83), (0x0ABE, 0x0ACC), (0x0AE2, 0x0AE3),
    (0x0AFA, 0x0B03), (0x0B3E, 0x0B57), (0x0B62, 0x0B63), (0x0B82, 0x0B82), (0x0BBE, 0x0BCC), (0x0BD7, 0x0C04),
    (0x0C3E, 0x0C56), (0x0C5C, 0x0C5C), (0x0C62, 0x0C63), (0x0C81, 0x0C83), (0x0CBE, 0x0CDC), (0x0CE2, 0x0CE3),
    (0x0CF3, 0x0D03), (0x0D3E, 0x0D4C), (0x0D57, 0x0D57), (0x0D62, 0x0D63), (0x0D81, 0x0D83), (0x0DCF, 0x0DF3),
    (0x0E31, 0x0E31), (0x0E34, 0x0E3A), (0x0E4D, 0x0E4D), (0x0EB1, 0x0EB1), (0x0EB4, 0x0EBC), (0x0ECD, 0x0ECD),
    (0x0F71, 0x0F83), (0x0F8D, 0x0FBC), (0x102B, 0x103E), (0x1056, 0x1059), (0x105E, 0x1060), (0x1062, 0x1064),
    (0x1067, 0x106D), (0x1071, 0x1074), (0x1082, 0x108D), (0x108F, 0x109D), (0x1712, 0x1713), (0x1732, 0x1733),
    (0x1752, 0x1753), (0x1772, 0x1773), (0x17B6, 0x17C8), (0x1885, 0x1886), (0x18A9, 0x18A9), (0x1920, 0x1938),
    (0x1A17, 0x1A1B), (0x1A55, 0x1A74), (0x1ABF, 0x1B04), (0x1B35, 0x1B43), (0x1B80, 0x1B82), (0x1BA1, 0x1BAD),
    (0x1BE7, 0x1BF1), (0x1C24, 0x1C36), (0x1DD3, 0x1DF4), (0x24B6, 0x24E9), (0x2DE0, 0x2DFF), (0xA674, 0xA67B),
    (0xA69E, 0xA69F), (0xA7CE, 0xA7CF), (0xA7D2, 0xA7D2), (0xA7D4, 0xA7D4), (0xA7F1, 0xA7F1), (0xA802, 0xA802),
    (0xA80B, 0xA80B), (0xA823, 0xA827), (0xA880, 0xA881), (0xA8B4, 0xA8C5), (0xA8FF, 0xA8FF), (0xA926, 0xA92A),
    (0xA947, 0xA952), (0xA980, 0xA983), (0xA9B4, 0xA9BF), (0xA9E5, 0xA9E5), (0xAA29, 0xAA36), (0xAA43, 0xAA43),
    (0xAA4C, 0xAA4D), (0xAA7B, 0xAA7D), (0xAAB0, 0xAAB0), (0xAAB2, 0xAAB4), (0xAAB7, 0xAAB8), (0xAABE, 0xAABE),
    (0xAAEB, 0xAAEF), (0xAAF5, 0xAAF5), (0xABE3, 0xABEA), (0xFB1E, 0xFB1E), (0x10376, 0x1037A), (0x10940, 0x10959),
    (0x10A01, 0x10A0F), (0x10D24, 0x10D27), (0x10D69, 0x10D69), (0x10EAB, 0x10EAC), (0x10EC5, 0x10EFC),
    (0x11000, 0x11002), (0x11038, 0x11045), (0x11073, 0x11074), (0x11080, 0x11082), (0x110B0, 0x110C2),
    (0x11100, 0x11102), (0x11127, 0x11132), (0x11145, 0x11146), (0x11180, 0x11182), (0x111B3, 0x111BF),
    (0x111CE, 0x111CF), (0x1122C, 0x1123E), (0x11241, 0x11241), (0x112DF, 0x11303), (0x1133E, 0x1134C),
    (0x11357, 0x11357), (0x11362, 0x11363), (0x113B8, 0x113CD), (0x11435, 0x11445), (0x114B0, 0x114C1),
    (0x115AF, 0x115BE), (0x115DC, 0x115DD), (0x11630, 0x11640), (0x116AB, 0x116B5), (0x1171D, 0x1172A),
    (0x1182C, 0x11838), (0x11930, 0x1193C), (0x11940, 0x11940), (0x11942, 0x11942), (0x119D1, 0x119DF),
    (0x119E4, 0x119E4), (0x11A01, 0x11A0A), (0x11A35, 0x11A39), (0x11A3B, 0x11A3E), (0x11A51, 0x11A5B),
    (0x11A8A, 0x11A97), (0x11B60, 0x11B67), (0x11C2F, 0x11C3E), (0x11C92, 0x11CB6), (0x11D31, 0x11D43),
    (0x11D47, 0x11D47), (0x11D8A, 0x11D96), (0x11DB0, 0x11DDB), (0x11EF3, 0x11F01), (0x11F03, 0x11F03),
    (0x11F34, 0x11F40), (0x1611E, 0x1612E), (0x16EA0, 0x16ED3), (0x16F4F, 0x16F4F), (0x16F51, 0x16F92),
    (0x16FF0, 0x16FF3), (0x187F8, 0x187FF), (0x18D09, 0x18DF2), (0x1BC9E, 0x1BC9E), (0x1E000, 0x1E02A),
    (0x1E08F, 0x1E08F), (0x1E6C0, 0x1E6FF), (0x1E947, 0x1E947), (0x1F130, 0x1F189), (0x2B73A, 0x2B73F),
    (0x2CEA2, 0x2CEAD), (0x323B0, 0x33479),
];

/// Numerics std knows (Unicode 17) that HF's regex `\p{N}` does not.
static NOT_NUMBER: [(u32, u32); 2] = [(0x11DE0, 0x11DE9), (0x16FF4, 0x16FF6)];

fn in_ranges(table: &[(u32, u32)], c: char) -> bool {
    let cp = c as u32;
    // The first range ending at or after cp, if it also starts at or before it.
    let i = table.partition_point(|&(_, hi)| hi < cp);
    table.get(i).is_some_and(|&(lo, _)| lo <= cp)
}

/// The GPT-2 regex's `\p{L}`, as HF `tokenizers` matches it.
pub fn is_letter(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    c.is_alphabetic() && !c.is_numeric() && !in_ranges(&NOT_LETTER, c)
}

/// The GPT-2 regex's `\p{N}`, as HF `tokenizers` matches it.
pub fn is_number(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    c.is_numeric() && !in_ranges(&NOT_NUMBER, c)
}

/// The regex's `\s`.
pub fn is_space(c: char) -> bool {
    c.is_whitespace()
}

// ---------------------------------------------------------------------------
// Pre-tokenizers.

/// The pre-tokenizers a `.tok` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `gpt2` / `default`: the GPT-2 regex alone.
    Gpt2,
    /// `smollm`: every `\p{N}` character alone (HF `Digits(individual_digits)`,
    /// which tests Rust's `char::is_numeric`), then the GPT-2 regex on the rest.
    SmolLm,
}

impl PreTokenizer {
    pub fn from_name(name: &str) -> Option<PreTokenizer> {
        match name {
            "gpt2" | "default" => Some(PreTokenizer::Gpt2),
            "smollm" => Some(PreTokenizer::SmolLm),
            _ => None,
        }
    }

    /// Splits `text` into the pieces BPE runs on, appending them to `out`.
    /// Their concatenation is `text`.
    pub fn split<'a>(self, text: &'a str, out: &mut Vec<&'a str>) {
        match self {
            PreTokenizer::Gpt2 => gpt2_split(text, out),
            PreTokenizer::SmolLm => {
                let mut start = 0;
                for (i, c) in text.char_indices() {
                    if c.is_numeric() {
                        gpt2_split(&text[start..i], out);
                        let end = i + c.len_utf8();
                        out.push(&text[i..end]);
                        start = end;
                    }
                }
                gpt2_split(&text[start..], out);
            }
        }
    }

    /// The pieces of `text`, as a vector.
    pub fn pieces(self, text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        self.split(text, &mut out);
        out
    }
}

/// The four classes the regex tells apart; every character is in exactly one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Space,
    Letter,
    Number,
    Other,
}

fn class(c: char) -> Class {
    if is_space(c) {
        Class::Space
    } else if is_letter(c) {
        Class::Letter
    } else if is_number(c) {
        Class::Number
    } else {
        Class::Other
    }
}

/// Splits with `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
/// Every character starts a match of some alternative, so the matches tile
/// the text and a left-to-right scan finds them.
fn gpt2_split<'a>(text: &'a str, out: &mut Vec<&'a str>) {
    let mut at = 0;
    while at < text.len() {
        let end = at + gpt2_match(&text[at..]);
        out.push(&text[at..end]);
        at = end;
    }
}

/// The length in bytes of the regex's match at the start of `s` (non-empty).
fn gpt2_match(s: &str) -> usize {
    let mut chars = s.chars();
    let Some(c) = chars.next() else { return 0 };
    if c == '\'' {
        let rest = &s[1..];
        for suffix in ["s", "t", "re", "ve", "m", "ll", "d"] {
            if rest.starts_with(suffix) {
                return 1 + suffix.len();
            }
        }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a
    // run of one class. With the space taken, the run's class is that of
    // the character after it; without, c's own (a space is neither).
    let (run_start, run_class) = match (c, chars.next().map(class)) {
        (' ', Some(next)) if next != Class::Space => (1, next),
        _ => (0, class(c)),
    };
    if run_class != Class::Space {
        return run_start + run_length(&s[run_start..], run_class);
    }
    // `\s+(?!\S)` then `\s+`. The longest run of whitespace, unless a
    // non-space follows it: then back off one character so the lookahead
    // sees whitespace, which needs a run of two or more; a single
    // character is matched by `\s+`.
    let run = run_length(s, Class::Space);
    if run == s.len() {
        return run;
    }
    let last = s[..run].chars().next_back().map_or(0, char::len_utf8);
    if run > last {
        run - last
    } else {
        run
    }
}

/// Bytes of the run of `class` characters at the start of `s`.
fn run_length(s: &str, k: Class) -> usize {
    s.char_indices()
        .find(|&(_, c)| class(c) != k)
        .map_or(s.len(), |(i, _)| i)
}

// ---------------------------------------------------------------------------
// The .tok reader.

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

    fn encode_ordinary_into(&self, text: &str, out: &mut Vec<u32>, scratch: &mut Scratch) {
        if text.is_empty() {
            return;
        }
        let mut pieces = Vec::new();
        self.pre.split(text, &mut pieces);
        for piece in pieces {
            self.merge_piece(piece.as_bytes(), out, scratch);
        }
    }

    /// BPE on one piece: one symbol per byte, then repeatedly the adjacent
    /// pair of lowest rank (leftmost among equals) is merged. A heap of
    /// candidate pairs keeps this O(n log n); entries made stale by a merge
    /// next to them are recognised by their ids and skipped. This picks the
    /// same pair as rescanning every pair each round.
    fn merge_piece(&self, piece: &[u8], out: &mut Vec<u32>, s: &mut Scratch) {
        s.ids.clear();
        s.ids.extend(
            piece
                .iter()
                .map(|&b| self.byte_ids[b as usize])
                .filter(|&id| id != NONE),
        );
        let n = s.ids.len();
        if n <= 1 {
            out.extend_from_slice(&s.ids);
            return;
        }
        s.next.clear();
        s.next.extend(1..=n);
        s.prev.clear();
        s.prev.extend((0..n).map(|i| i.wrapping_sub(1)));
        s.heap.clear();
        for i in 0..n - 1 {
            if let Some(&(rank, merged)) = self.merges.get(&(s.ids[i], s.ids[i + 1])) {
                s.heap.push(Reverse((rank, i, merged, s.ids[i + 1])));
            }
        }
        while let Some(Reverse((rank, i, merged, right))) = s.heap.pop() {
            // Stale: i was merged into its left neighbour, or its right
            // neighbour changed, since this entry was pushed.
            let j = s.next[i];
            if s.ids[i] == NONE || j >= n || s.ids[j] != right {
                continue;
            }
            if self.merges.get(&(s.ids[i], right)) != Some(&(rank, merged)) {
                continue;
            }
            s.ids[i] = merged;
            s.ids[j] = NONE;
            let k = s.next[j];
            s.next[i] = k;
            if k < n {
                s.prev[k] = i;
                if let Some(&(rank, m)) = self.merges.get(&(merged, s.ids[k])) {
                    s.heap.push(Reverse((rank, i, m, s.ids[k])));
                }
            }
            let p = s.prev[i];
            if p < n {
                if let Some(&(rank, m)) = self.merges.get(&(s.ids[p], merged)) {
                    s.heap.push(Reverse((rank, p, m, merged)));
                }
            }
        }
        let mut i = 0;
        while i < n {
            out.push(s.ids[i]);
            i = s.next[i];
        }
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

/// Reused buffers of `merge_piece`: symbol ids (`NONE` once merged away)
/// and the linked list of the live symbols.
#[derive(Default)]
struct Scratch {
    ids: Vec<u32>,
    next: Vec<usize>,
    prev: Vec<usize>,
    heap: BinaryHeap<Reverse<(u32, usize, u32, u32)>>,
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
