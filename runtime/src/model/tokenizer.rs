//! llama2.c's byte-level BPE tokenizer, read from its `tokenizer.bin`.
//!
//! The file is little-endian: an `i32 max_token_length`, then one record per
//! token until the end of the file: `f32 score`, `i32 len`, `len` bytes of
//! the piece. The vocabulary size is not stored; it is the record count.
//! Ids 1 and 2 are BOS and EOS; ids 3..=258 are the byte pieces `<0x00>`..`<0xFF>`.

use crate::core::error::{MlError, Result};
use std::collections::HashMap;
use std::path::Path;

const BOS: u32 = 1;
const EOS: u32 = 2;
/// sentencepiece's unknown token, the last resort when a vocabulary is too
/// small to hold the byte pieces.
const UNK: u32 = 0;
/// Byte `b` falls back to id `b + BYTE_OFFSET` (after `<unk>`, BOS, EOS).
const BYTE_OFFSET: u32 = 3;
/// llama2.c's initial best score: a merge must score above it. Kept so that
/// vocabularies with very negative scores tokenize exactly as in llama2.c.
const MIN_MERGE_SCORE: f32 = -1e10;

/// Every byte value once, so a `<0xNN>` piece can be returned as a one-byte
/// slice borrowed from static data.
static BYTE_VALUES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = i as u8;
        i += 1;
    }
    table
};

pub struct Tokenizer {
    /// All pieces back to back; piece `i` is `bytes[starts[i]..starts[i + 1]]`.
    bytes: Vec<u8>,
    starts: Vec<usize>,
    scores: Vec<f32>,
    /// Piece → lowest id with that piece (duplicates are tolerated; the
    /// first wins so lookups are deterministic).
    ids: HashMap<Vec<u8>, u32>,
    /// Validated bound on every piece's length: a longer concatenation cannot
    /// be in the vocabulary, which spares a hash lookup.
    max_token_length: usize,
}

fn read_i32(bytes: &[u8], at: usize) -> i32 {
    i32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn read_f32(bytes: &[u8], at: usize) -> f32 {
    f32::from_bits(read_i32(bytes, at) as u32)
}

/// The byte of a piece of the exact form `<0xNN>` (either case of hex digit).
/// llama2.c's `sscanf` is looser, but its exporter writes only this form.
fn byte_piece(piece: &[u8]) -> Option<u8> {
    match piece {
        [b'<', b'0', b'x', hi, lo, b'>'] => {
            let hex = |c: u8| (c as char).to_digit(16);
            Some((hex(*hi)? * 16 + hex(*lo)?) as u8)
        }
        _ => None,
    }
}

impl Tokenizer {
    /// Reads and validates a llama2.c `tokenizer.bin`.
    pub fn open(path: &Path) -> Result<Tokenizer> {
        let shown = path.display();
        let bytes = std::fs::read(path).map_err(|e| MlError::io(format!("cannot read {shown}: {e}")))?;
        Tokenizer::from_bytes(&bytes).map_err(|e| MlError::new(e.kind, format!("{shown}: {}", e.message)))
    }

    /// Parses a `tokenizer.bin` image. Every length is checked before it is
    /// used, so any byte string gives either a tokenizer or a Format error.
    pub fn from_bytes(bytes: &[u8]) -> Result<Tokenizer> {
        if bytes.len() < 4 {
            return Err(MlError::format(format!(
                "tokenizer file is {} bytes, too short for the 4-byte max_token_length header",
                bytes.len()
            )));
        }
        let max_token_length = read_i32(bytes, 0);
        let max_token_length = usize::try_from(max_token_length).map_err(|_| {
            MlError::format(format!(
                "tokenizer max_token_length at byte offset 0 is {max_token_length}, negative"
            ))
        })?;

        let mut pieces = Vec::new();
        let mut starts = vec![0usize];
        let mut scores = Vec::new();
        let mut ids = HashMap::new();
        let mut offset = 4usize;
        while offset < bytes.len() {
            let index = scores.len();
            let here =
                |what: String| MlError::format(format!("tokenizer record {index} at byte offset {offset}: {what}"));
            let left = bytes.len() - offset;
            if left < 8 {
                return Err(here(format!(
                    "truncated: {left} bytes left, a record header (score, length) needs 8"
                )));
            }
            let id = u32::try_from(index).map_err(|_| here("more tokens than u32 ids can number".into()))?;
            let score = read_f32(bytes, offset);
            if !score.is_finite() {
                return Err(here(format!("score is {score}, not finite")));
            }
            let len = read_i32(bytes, offset + 4);
            let len = usize::try_from(len).map_err(|_| here(format!("negative piece length {len}")))?;
            if len > left - 8 {
                return Err(here(format!(
                    "piece length {len} runs past the end of the file ({} bytes left)",
                    left - 8
                )));
            }
            if len > max_token_length {
                return Err(here(format!(
                    "piece length {len} exceeds max_token_length {max_token_length}"
                )));
            }
            let piece = &bytes[offset + 8..offset + 8 + len];
            pieces.extend_from_slice(piece);
            starts.push(pieces.len());
            scores.push(score);
            ids.entry(piece.to_vec()).or_insert(id);
            offset += 8 + len;
        }
        if scores.len() <= EOS as usize {
            return Err(MlError::format(format!(
                "tokenizer holds {} tokens; at least 3 are needed since BOS and EOS are ids 1 and 2",
                scores.len()
            )));
        }
        Ok(Tokenizer {
            bytes: pieces,
            starts,
            scores,
            ids,
            max_token_length,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.scores.len()
    }

    pub fn bos(&self) -> u32 {
        BOS
    }

    pub fn eos(&self) -> u32 {
        EOS
    }

    /// The raw piece of an id already known to be in range.
    fn piece(&self, id: u32) -> &[u8] {
        let i = id as usize;
        &self.bytes[self.starts[i]..self.starts[i + 1]]
    }

    fn lookup(&self, piece: &[u8]) -> Option<u32> {
        self.ids.get(piece).copied()
    }

    /// Appends the id of one code point (or of each of its bytes).
    fn push_char(&self, c: char, out: &mut Vec<u32>) {
        let mut utf8 = [0u8; 4];
        let encoded = c.encode_utf8(&mut utf8).as_bytes();
        if let Some(id) = self.lookup(encoded) {
            out.push(id);
            return;
        }
        for &b in encoded {
            let id = u32::from(b) + BYTE_OFFSET;
            // A vocabulary without byte pieces would otherwise get ids the
            // model cannot embed.
            out.push(if (id as usize) < self.vocab_size() { id } else { UNK });
        }
    }

    /// The merge of `a` and `b` if their concatenation is a piece that beats
    /// llama2.c's threshold: its (score, id).
    fn merge(&self, a: u32, b: u32, buf: &mut Vec<u8>) -> Option<(f32, u32)> {
        let (pa, pb) = (self.piece(a), self.piece(b));
        if pa.len() + pb.len() > self.max_token_length {
            return None;
        }
        buf.clear();
        buf.extend_from_slice(pa);
        buf.extend_from_slice(pb);
        let id = self.lookup(buf)?;
        let score = self.scores[id as usize];
        (score > MIN_MERGE_SCORE).then_some((score, id))
    }

    /// llama2.c's encode: optional BOS, the dummy-prefix space (prepend the
    /// token for " " when text is non-empty), UTF-8 code points looked up in
    /// the vocab, byte fallback (id = byte + 3) for those not found, then
    /// repeatedly merge the adjacent pair whose concatenation is in the vocab
    /// with the highest score (leftmost on ties), optional EOS.
    ///
    /// Two differences from llama2.c, neither visible with its real
    /// vocabulary: BOS takes no part in merges (no real piece starts with its
    /// text), and a missing " " piece falls back to its byte like any other
    /// character instead of pushing id -1.
    pub fn encode(&self, text: &str, bos: bool, eos: bool) -> Vec<u32> {
        let mut tokens = Vec::with_capacity(text.len() + 1);
        if !text.is_empty() {
            self.push_char(' ', &mut tokens);
        }
        for c in text.chars() {
            self.push_char(c, &mut tokens);
        }

        // The best merge of each adjacent pair, cached: a merge changes only
        // the pairs on either side of it, so each round costs one scan of
        // this array and two lookups instead of a lookup per pair.
        let mut buf = Vec::with_capacity(2 * self.max_token_length);
        let mut pairs: Vec<Option<(f32, u32)>> = tokens.windows(2).map(|w| self.merge(w[0], w[1], &mut buf)).collect();
        loop {
            let mut best: Option<(usize, f32, u32)> = None;
            for (i, pair) in pairs.iter().enumerate() {
                if let Some((score, id)) = *pair {
                    // Strictly greater: the leftmost of equal scores wins.
                    if best.map_or(true, |(_, s, _)| score > s) {
                        best = Some((i, score, id));
                    }
                }
            }
            let Some((i, _, id)) = best else { break };
            tokens[i] = id;
            tokens.remove(i + 1);
            pairs.remove(i);
            if i < pairs.len() {
                pairs[i] = self.merge(tokens[i], tokens[i + 1], &mut buf);
            }
            if i > 0 {
                pairs[i - 1] = self.merge(tokens[i - 1], tokens[i], &mut buf);
            }
        }

        let mut out = Vec::with_capacity(tokens.len() + 2);
        if bos {
            out.push(BOS);
        }
        out.extend_from_slice(&tokens);
        if eos {
            out.push(EOS);
        }
        out
    }

    /// The bytes to print for `token` following `prev`: strips the leading
    /// space of a piece that follows BOS (prev == 1), and maps pieces of the
    /// form "<0xNN>" to the single raw byte NN. Out-of-range ids give an
    /// empty slice. BOS and EOS give their pieces as stored (llama2.c's
    /// exporter writes "\n<s>\n" and "\n</s>\n").
    pub fn decode_piece(&self, prev: u32, token: u32) -> &[u8] {
        if token as usize >= self.vocab_size() {
            return &[];
        }
        let mut piece = self.piece(token);
        // The encoder's dummy prefix put that space there; the text had none.
        if prev == BOS && piece.first() == Some(&b' ') {
            piece = &piece[1..];
        }
        match byte_piece(piece) {
            Some(b) => &BYTE_VALUES[b as usize..b as usize + 1],
            None => piece,
        }
    }

    /// The text of a whole sequence: token `i` is decoded with
    /// `prev = tokens[i - 1]`, the first with `prev = 0`. BOS and EOS are
    /// markers, not text, and add no bytes, but BOS still strips the leading
    /// space of the token after it, so `decode(&encode(s, true, _)) == s`.
    pub fn decode(&self, tokens: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut prev = 0;
        for &token in tokens {
            if token != BOS && token != EOS {
                out.extend_from_slice(self.decode_piece(prev, token));
            }
            prev = token;
        }
        out
    }
}
