//! Tokenizers: llama2.c's `tokenizer.bin` (the default) and the byte-level
//! BPE `.tok` files (GPT-2 style, e.g. SmolLM2; see [`bpe`]). [`Tokenizer`]
//! holds either, chosen by the file's first bytes: `"MLTK"` is a `.tok`,
//! anything else is read as a `tokenizer.bin`. Its methods behave for a
//! `tokenizer.bin` exactly as they did before `.tok` existed.
//!
//! llama2.c's file is little-endian: an `i32 max_token_length`, then one
//! record per token until the end of the file: `f32 score`, `i32 len`, `len`
//! bytes of the piece. The vocabulary size is not stored; it is the record
//! count. Ids 1 and 2 are BOS and EOS; ids 3..=258 are the byte pieces
//! `<0x00>`..`<0xFF>`.
//!
//! A chat needs a `.tok` whose chat template is ChatML: see [`ChatMl`].

use super::bpe::{self, Bpe};
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

/// llama2.c's tokenizer.
struct Llama2c {
    /// All pieces back to back; piece `i` is `bytes[starts[i]..starts[i + 1]]`.
    bytes: Vec<u8>,
    starts: Vec<usize>,
    scores: Vec<f32>,
    /// Piece → lowest id with that piece (duplicates are tolerated; the
    /// first wins so lookups are deterministic).
    ids: HashMap<Vec<u8>, u32>,
    /// The longest piece's length (at most the header's max_token_length,
    /// which is validated against every piece): a longer concatenation cannot
    /// be in the vocabulary, which spares a hash lookup. The header's value
    /// itself is not kept: a hostile file may claim 2^31 - 1, and `encode`
    /// sizes a buffer from this.
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

impl Llama2c {
    /// Parses a `tokenizer.bin` image. Every length is checked before it is
    /// used, so any byte string gives either a tokenizer or a Format error.
    fn from_bytes(bytes: &[u8]) -> Result<Llama2c> {
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
        let mut longest = 0usize;
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
            longest = longest.max(len);
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
        Ok(Llama2c {
            bytes: pieces,
            starts,
            scores,
            ids,
            max_token_length: longest,
        })
    }

    fn vocab_size(&self) -> usize {
        self.scores.len()
    }

    fn bos(&self) -> u32 {
        BOS
    }

    fn eos(&self) -> u32 {
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
    fn encode(&self, text: &str, bos: bool, eos: bool) -> Vec<u32> {
        self.encode_with(text, bos, eos, false)
    }

    /// `encode`, merging with the O(n²) reference loop if `quadratic`.
    fn encode_with(&self, text: &str, bos: bool, eos: bool, quadratic: bool) -> Vec<u32> {
        let mut tokens = Vec::with_capacity(text.len() + 1);
        if !text.is_empty() {
            self.push_char(' ', &mut tokens);
        }
        for c in text.chars() {
            self.push_char(c, &mut tokens);
        }

        let tokens = if quadratic {
            self.merge_all_quadratic(tokens)
        } else {
            self.merge_all(tokens)
        };
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

    /// Merges adjacent pairs, the highest score first and the leftmost of
    /// equal scores, until no pair merges: O(n log n) in the tokens.
    ///
    /// The tokens form a linked list (a merged pair keeps its left node's
    /// index, so indices stay in text order), and a max-heap holds a
    /// candidate for every adjacent pair that merges, ordered by score, then
    /// by the lower left index. A merge changes only the pairs on either
    /// side of it: those get new candidates, and candidates whose nodes
    /// changed are dropped when they come up. The result is that of
    /// [`Llama2c::merge_all_quadratic`], llama2.c's own loop.
    fn merge_all(&self, mut tokens: Vec<u32>) -> Vec<u32> {
        use std::cmp::Ordering;
        use std::collections::BinaryHeap;
        struct Candidate {
            score: f32,
            left: usize,
            right: usize,
            id: u32,
            tokens: (u32, u32),
        }
        impl Ord for Candidate {
            fn cmp(&self, other: &Self) -> Ordering {
                // Scores are never NaN (a merge beats a threshold) and -0.0
                // was made 0.0, so total_cmp is the comparison `>` makes.
                self.score.total_cmp(&other.score).then(other.left.cmp(&self.left))
            }
        }
        impl PartialOrd for Candidate {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }
        impl PartialEq for Candidate {
            fn eq(&self, other: &Self) -> bool {
                self.cmp(other) == Ordering::Equal
            }
        }
        impl Eq for Candidate {}

        const NONE: usize = usize::MAX;
        let n = tokens.len();
        let mut next: Vec<usize> = (1..=n).map(|i| if i < n { i } else { NONE }).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.checked_sub(1).unwrap_or(NONE)).collect();
        let mut alive = vec![true; n];
        let mut buf = Vec::with_capacity(2 * self.max_token_length);
        let mut heap = BinaryHeap::with_capacity(n);
        let candidate = |tokens: &[u32], left: usize, right: usize, buf: &mut Vec<u8>| {
            self.merge(tokens[left], tokens[right], buf)
                .map(|(score, id)| Candidate {
                    score: score + 0.0,
                    left,
                    right,
                    id,
                    tokens: (tokens[left], tokens[right]),
                })
        };
        for i in 1..n {
            heap.extend(candidate(&tokens, i - 1, i, &mut buf));
        }
        while let Some(c) = heap.pop() {
            let (l, r) = (c.left, c.right);
            if !alive[l] || !alive[r] || next[l] != r || (tokens[l], tokens[r]) != c.tokens {
                continue;
            }
            tokens[l] = c.id;
            alive[r] = false;
            next[l] = next[r];
            if next[l] != NONE {
                prev[next[l]] = l;
                heap.extend(candidate(&tokens, l, next[l], &mut buf));
            }
            if prev[l] != NONE {
                heap.extend(candidate(&tokens, prev[l], l, &mut buf));
            }
        }
        tokens
            .into_iter()
            .zip(alive)
            .filter_map(|(t, a)| a.then_some(t))
            .collect()
    }

    /// llama2.c's merge loop as it was: each round scans every pair for the
    /// best merge, O(n²). Kept as the reference the tests and the fuzz
    /// target hold [`Llama2c::merge_all`] to.
    fn merge_all_quadratic(&self, mut tokens: Vec<u32>) -> Vec<u32> {
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
                    let better = match best {
                        None => true,
                        Some((_, s, _)) => score > s,
                    };
                    if better {
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

        tokens
    }

    /// The bytes to print for `token` following `prev`: strips the leading
    /// space of a piece that follows BOS (prev == 1), and maps pieces of the
    /// form "<0xNN>" to the single raw byte NN. Out-of-range ids give an
    /// empty slice. BOS and EOS give their pieces as stored (llama2.c's
    /// exporter writes "\n<s>\n" and "\n</s>\n").
    fn decode_piece(&self, prev: u32, token: u32) -> &[u8] {
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
    fn decode(&self, tokens: &[u32]) -> Vec<u8> {
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

/// Which kind of file a [`Tokenizer`] was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerKind {
    /// llama2.c's `tokenizer.bin` (SentencePiece-style pieces and scores).
    Llama2c,
    /// A `.tok` byte-level BPE (GPT-2 style).
    Bpe,
}

enum Inner {
    Llama2c(Llama2c),
    Bpe(Box<Bpe>),
}

/// A tokenizer of either kind; see the module documentation.
pub struct Tokenizer {
    inner: Inner,
    /// Ids that end an assistant turn (see [`Tokenizer::is_end_of_turn`]).
    end_of_turn: Vec<u32>,
}

impl Tokenizer {
    /// Reads and validates a tokenizer file of either kind.
    pub fn open(path: &Path) -> Result<Tokenizer> {
        let shown = path.display();
        // A regular file only, read no further than its length: /dev/zero
        // or a FIFO would otherwise be read without end (or block).
        let bytes = crate::core::file::read_regular(path)?;
        Tokenizer::from_bytes(&bytes).map_err(|e| MlError::new(e.kind, format!("{shown}: {}", e.message)))
    }

    /// Parses a tokenizer image: a `.tok` if it starts with `"MLTK"`, else a
    /// llama2.c `tokenizer.bin` (whose first word would then be a
    /// max_token_length of 1 263 815 757). Every length is checked before it
    /// is used, so any byte string gives either a tokenizer or a Format error.
    pub fn from_bytes(bytes: &[u8]) -> Result<Tokenizer> {
        if bytes.starts_with(&bpe::MAGIC) {
            let b = Bpe::from_bytes(bytes)?;
            let mut end_of_turn: Vec<u32> = b.eos_id().into_iter().collect();
            for s in ["<|im_end|>", "<|endoftext|>"] {
                if let Some(id) = b.special_id(s) {
                    if !end_of_turn.contains(&id) {
                        end_of_turn.push(id);
                    }
                }
            }
            return Ok(Tokenizer {
                inner: Inner::Bpe(Box::new(b)),
                end_of_turn,
            });
        }
        Ok(Tokenizer {
            inner: Inner::Llama2c(Llama2c::from_bytes(bytes)?),
            end_of_turn: vec![EOS],
        })
    }

    pub fn kind(&self) -> TokenizerKind {
        match self.inner {
            Inner::Llama2c(_) => TokenizerKind::Llama2c,
            Inner::Bpe(_) => TokenizerKind::Bpe,
        }
    }

    /// The byte-level BPE inside, for a `.tok`.
    pub fn as_bpe(&self) -> Option<&Bpe> {
        match &self.inner {
            Inner::Bpe(b) => Some(b),
            Inner::Llama2c(_) => None,
        }
    }

    pub fn vocab_size(&self) -> usize {
        match &self.inner {
            Inner::Llama2c(t) => t.vocab_size(),
            Inner::Bpe(b) => b.vocab_size(),
        }
    }

    /// The BOS id: 1 for llama2.c; a `.tok`'s bos_id (`u32::MAX` if it has
    /// none, an id no model has).
    pub fn bos(&self) -> u32 {
        match &self.inner {
            Inner::Llama2c(t) => t.bos(),
            Inner::Bpe(b) => b.bos_id().unwrap_or(bpe::NONE),
        }
    }

    /// The EOS id: 2 for llama2.c; a `.tok`'s eos_id (its end-of-turn token,
    /// `<|im_end|>` for SmolLM2-Instruct; `u32::MAX` if none).
    pub fn eos(&self) -> u32 {
        match &self.inner {
            Inner::Llama2c(t) => t.eos(),
            Inner::Bpe(b) => b.eos_id().unwrap_or(bpe::NONE),
        }
    }

    /// Whether a prompt should start with BOS: always for llama2.c; as the
    /// `.tok` flags say otherwise (not for SmolLM2).
    pub fn add_bos(&self) -> bool {
        match &self.inner {
            Inner::Llama2c(_) => true,
            Inner::Bpe(b) => b.add_bos(),
        }
    }

    /// Whether an encoding should end with EOS by default (the `.tok` flags;
    /// never for llama2.c).
    pub fn add_eos(&self) -> bool {
        match &self.inner {
            Inner::Llama2c(_) => false,
            Inner::Bpe(b) => b.add_eos(),
        }
    }

    /// Whether generating `id` ends the model's turn: EOS for llama2.c; for a
    /// `.tok`, its eos_id and the special tokens `<|im_end|>` and
    /// `<|endoftext|>`.
    pub fn is_end_of_turn(&self, id: u32) -> bool {
        self.end_of_turn.contains(&id)
    }

    /// The id of a special token given by its text (`"<|im_start|>"`). Only
    /// `.tok` files have named special tokens; llama2.c's gives `None`.
    pub fn special_id(&self, text: &str) -> Option<u32> {
        self.as_bpe().and_then(|b| b.special_id(text))
    }

    /// The chat template the file carries (GGUF's Jinja source), if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.as_bpe().map(|b| b.chat_template()).filter(|t| !t.is_empty())
    }

    /// The chat format, for a `.tok` whose template is ChatML. Jinja is not
    /// interpreted: a template that mentions `<|im_start|>` is taken to be
    /// ChatML; any other is refused with a Format error.
    pub fn chat(&self) -> Result<ChatMl> {
        let Some(b) = self.as_bpe() else {
            return Err(MlError::format(
                "chat needs a .tok tokenizer with a chat template; a llama2.c tokenizer.bin has none",
            ));
        };
        let template = b.chat_template();
        if template.is_empty() {
            return Err(MlError::format(
                "the tokenizer has no chat template, so chat cannot format turns",
            ));
        }
        if !template.contains(IM_START) {
            return Err(MlError::format(format!(
                "the tokenizer's chat template is not ChatML (it never mentions {IM_START}); only ChatML is \
                 supported, Jinja is not interpreted"
            )));
        }
        let need = |s: &str| {
            b.special_id(s).ok_or_else(|| {
                MlError::format(format!(
                    "the chat template is ChatML but {s} is not one of the tokenizer's special tokens"
                ))
            })
        };
        Ok(ChatMl {
            im_start: need(IM_START)?,
            im_end: need(IM_END)?,
            default_system: default_system(template),
        })
    }

    /// Encodes `text`, with BOS / EOS if asked (and, for a `.tok`, if it has
    /// them). A `.tok` matches its special tokens in the text as single ids.
    pub fn encode(&self, text: &str, bos: bool, eos: bool) -> Vec<u32> {
        match &self.inner {
            Inner::Llama2c(t) => t.encode(text, bos, eos),
            Inner::Bpe(b) => b.encode(text, bos, eos),
        }
    }

    /// For a llama2.c tokenizer, `encode` with llama2.c's own O(n²) merge
    /// loop: the reference that tests and the fuzz target hold the
    /// O(n log n) merging to. None for a `.tok`.
    #[doc(hidden)]
    pub fn encode_quadratic_reference(&self, text: &str, bos: bool, eos: bool) -> Option<Vec<u32>> {
        match &self.inner {
            Inner::Llama2c(t) => Some(t.encode_with(text, bos, eos, true)),
            Inner::Bpe(_) => None,
        }
    }

    /// Encodes `text` as plain text: no BOS / EOS, and for a `.tok` no
    /// special-token matching (`"<|im_end|>"` in user text stays text).
    pub fn encode_ordinary(&self, text: &str) -> Vec<u32> {
        match &self.inner {
            Inner::Llama2c(t) => t.encode(text, false, false),
            Inner::Bpe(b) => b.encode_ordinary(text),
        }
    }

    /// The bytes to print for `token` following `prev`. llama2.c: strips the
    /// leading space of a piece that follows BOS (prev == 1), and maps pieces
    /// of the form "<0xNN>" to the single raw byte NN; BOS and EOS give their
    /// pieces as stored (llama2.c's exporter writes "\n<s>\n" and "\n</s>\n").
    /// `.tok`: the token's bytes (`prev` is unused; special tokens give their
    /// text; a character may span tokens, so a piece need not be UTF-8).
    /// Out-of-range ids give an empty slice.
    pub fn decode_piece(&self, prev: u32, token: u32) -> &[u8] {
        match &self.inner {
            Inner::Llama2c(t) => t.decode_piece(prev, token),
            Inner::Bpe(b) => b.token_bytes(token),
        }
    }

    /// The text of a whole sequence. llama2.c: token `i` is decoded with
    /// `prev = tokens[i - 1]`, the first with `prev = 0`; BOS and EOS are
    /// markers, not text, and add no bytes, but BOS still strips the leading
    /// space of the token after it, so `decode(&encode(s, true, _)) == s`.
    /// `.tok`: every token's bytes, special tokens as their text, so
    /// `decode(&encode(s, false, false)) == s`.
    pub fn decode(&self, tokens: &[u32]) -> Vec<u8> {
        match &self.inner {
            Inner::Llama2c(t) => t.decode(tokens),
            Inner::Bpe(b) => b.decode(tokens),
        }
    }
}

const IM_START: &str = "<|im_start|>";
const IM_END: &str = "<|im_end|>";

/// ChatML, the conversation format of SmolLM2-Instruct (and Qwen, …): each
/// turn is `<|im_start|>{role}\n{content}<|im_end|>\n`, and the model is asked
/// to answer with `<|im_start|>assistant\n`. The ids are those of encoding the
/// rendered text, except that roles and contents are encoded as plain text,
/// so a user cannot forge a turn by typing `<|im_end|>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMl {
    pub im_start: u32,
    pub im_end: u32,
    default_system: Option<String>,
}

impl ChatMl {
    /// The system message the template inserts when a conversation does not
    /// start with one (SmolLM2: "You are a helpful AI assistant named SmolLM,
    /// trained by Hugging Face"), if the template holds it literally.
    pub fn default_system(&self) -> Option<&str> {
        self.default_system.as_deref()
    }

    /// `<|im_start|>{role}\n{content}<|im_end|>\n`.
    pub fn turn(&self, tok: &Tokenizer, role: &str, content: &str) -> Vec<u32> {
        let mut ids = vec![self.im_start];
        ids.extend(tok.encode_ordinary(&format!("{role}\n{content}")));
        ids.extend(self.close_turn(tok));
        ids
    }

    /// `<|im_start|>{role}\n`: with "assistant", the generation prompt.
    pub fn open_turn(&self, tok: &Tokenizer, role: &str) -> Vec<u32> {
        let mut ids = vec![self.im_start];
        ids.extend(tok.encode_ordinary(&format!("{role}\n")));
        ids
    }

    /// `<|im_end|>\n`: what follows a turn's content.
    pub fn close_turn(&self, tok: &Tokenizer) -> Vec<u32> {
        let mut ids = vec![self.im_end];
        ids.extend(tok.encode_ordinary("\n"));
        ids
    }

    /// Whether a generated id ends the assistant's turn: the tokenizer's
    /// end-of-turn tokens, and `<|im_start|>` (the model opening a new turn
    /// without closing its own).
    pub fn ends_turn(&self, tok: &Tokenizer, id: u32) -> bool {
        id == self.im_start || id == self.im_end || tok.is_end_of_turn(id)
    }
}

/// The literal default system message of a ChatML template: the text after
/// `<|im_start|>system` and a newline (real, or the two characters `\n` of
/// a Jinja string) up to `<|im_end|>`, if it holds no template syntax.
fn default_system(template: &str) -> Option<String> {
    let head = format!("{IM_START}system");
    let at = template.find(&head)? + head.len();
    let rest = &template[at..];
    let rest = rest.strip_prefix('\n').or_else(|| rest.strip_prefix("\\n"))?;
    let text = &rest[..rest.find(IM_END)?];
    let literal = !text.is_empty() && !text.contains(['{', '}', '\'', '"', '\\', '\n']);
    literal.then(|| text.to_string())
}
