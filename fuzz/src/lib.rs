//! How the fuzz targets cut their input into fields. `fuzz/seed` writes the
//! same framing; keep the two in step (README.md, "Input framing").
//!
//! Every reader here is total: a field cut short by the end of the input
//! takes what is there, so any byte string is a valid input.

/// Longest text the tokenizer targets encode. The tokenizer_llama2c target
/// compares the O(n log n) merging with llama2.c's quadratic loop; a longer
/// text only slows the run.
pub const MAX_TEXT: usize = 4096;

/// Front-to-back reader that never fails.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.rest.split_at(n.min(self.rest.len()));
        self.rest = rest;
        head
    }

    fn u16(&mut self) -> u16 {
        let b = self.take(2);
        u16::from_le_bytes([b.first().copied().unwrap_or(0), b.get(1).copied().unwrap_or(0)])
    }

    fn u8(&mut self) -> u8 {
        self.take(1).first().copied().unwrap_or(0)
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let b = self.take(N);
        out[..b.len()].copy_from_slice(b);
        out
    }
}

/// A tokenizer target's input:
///
/// | bytes | field |
/// | --- | --- |
/// | u16 LE `text_len`, then `text_len` bytes | text to encode (read lossily as UTF-8, cut to [`MAX_TEXT`]) |
/// | u16 LE `ids_len`, then `ids_len` bytes | ids to decode, u32 LE each (a ragged tail is dropped) |
/// | u8 | flags: bit 0 BOS, bit 1 EOS when encoding |
/// | the rest | the tokenizer file |
pub struct TokenizerInput<'a> {
    pub text: String,
    pub ids: Vec<u32>,
    pub bos: bool,
    pub eos: bool,
    pub file: &'a [u8],
}

pub fn tokenizer_input(data: &[u8]) -> TokenizerInput<'_> {
    let mut c = Cursor { rest: data };
    let text_len = c.u16() as usize;
    let text = c.take(text_len);
    let text = String::from_utf8_lossy(&text[..text.len().min(MAX_TEXT)]).into_owned();
    let ids_len = c.u16() as usize;
    let ids = c
        .take(ids_len)
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    let flags = c.u8();
    TokenizerInput {
        text,
        ids,
        bos: flags & 1 != 0,
        eos: flags & 2 != 0,
        file: c.rest,
    }
}

/// The sampler target's input:
///
/// | bytes | field |
/// | --- | --- |
/// | f32 LE | temperature |
/// | f32 LE | top_p |
/// | u64 LE | seed |
/// | u8 | mode: bit 0 makes every logit equal to the first; bit 1 puts NaN at index `mode >> 3`; bit 2 +inf there |
/// | u16 LE | top_k |
/// | f32 LE | min_p |
/// | f32 LE | repeat_penalty |
/// | u8 | repeat_last_n |
/// | u8 | h: how many tokens the sampler has seen before |
/// | h × u16 LE | those tokens (any ids, in range of the logits or not) |
/// | the rest | logits, f32 LE each (a ragged tail is dropped) |
pub struct SamplerInput {
    pub temperature: f32,
    pub top_p: f32,
    pub seed: u64,
    pub top_k: usize,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub repeat_last_n: usize,
    pub seen: Vec<u32>,
    pub logits: Vec<f32>,
}

pub fn sampler_input(data: &[u8]) -> SamplerInput {
    let mut c = Cursor { rest: data };
    let temperature = f32::from_le_bytes(c.array());
    let top_p = f32::from_le_bytes(c.array());
    let seed = u64::from_le_bytes(c.array());
    let mode = c.u8();
    let top_k = usize::from(u16::from_le_bytes(c.array()));
    let min_p = f32::from_le_bytes(c.array());
    let repeat_penalty = f32::from_le_bytes(c.array());
    let repeat_last_n = usize::from(c.u8());
    let seen_len = usize::from(c.u8());
    let seen = (0..seen_len)
        .map(|_| u32::from(u16::from_le_bytes(c.array())))
        .collect();
    let mut logits: Vec<f32> = c
        .rest
        .chunks_exact(4)
        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    if mode & 1 != 0 {
        if let Some(&first) = logits.first() {
            logits.iter_mut().for_each(|v| *v = first);
        }
    }
    let at = (mode >> 3) as usize;
    if let Some(v) = logits.get_mut(at) {
        if mode & 2 != 0 {
            *v = f32::NAN;
        } else if mode & 4 != 0 {
            *v = f32::INFINITY;
        }
    }
    SamplerInput {
        temperature,
        top_p,
        seed,
        top_k,
        min_p,
        repeat_penalty,
        repeat_last_n,
        seen,
        logits,
    }
}
