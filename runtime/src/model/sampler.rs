//! Choosing the next token from logits, as llama.cpp's default sampler
//! chain does: repetition penalty, top-k, top-p, min-p, temperature, then a
//! draw from what is left, driven by a seeded xorshift RNG so that a seed
//! reproduces a run. Temperature 0 is greedy (after the penalty).
//!
//! Nothing allocates per token: the candidate list and the penalty's window
//! are allocated once, at their largest, by `Sampler::with_options`.

use crate::core::error::{MlError, Result};
use crate::core::rng::Rng;

/// The sampling settings. Each filter has a value that turns it off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerOptions {
    /// Divides the logits before the draw; 0 is greedy.
    pub temperature: f32,
    /// Keep the `top_k` most probable tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the most probable tokens until their mass reaches `top_p`
    /// (at least one); 1 keeps all.
    pub top_p: f32,
    /// Keep the tokens at least `min_p` times as probable as the most
    /// probable one; 0 keeps all.
    pub min_p: f32,
    /// Divides a positive logit (multiplies a negative one) of every token
    /// among the last `repeat_last_n` seen; 1 is off.
    pub repeat_penalty: f32,
    /// How many of the latest tokens (prompt and output) the penalty looks
    /// at; 0 is off.
    pub repeat_last_n: usize,
}

impl SamplerOptions {
    /// llama.cpp's defaults (`common_params_sampling`): what people who run
    /// small models locally expect.
    pub const LLAMA_CPP: SamplerOptions = SamplerOptions {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        repeat_penalty: 1.0,
        repeat_last_n: 64,
    };

    /// Temperature and top-p alone: llama2.c's sampler.
    pub fn temperature_top_p(temperature: f32, top_p: f32) -> SamplerOptions {
        SamplerOptions {
            temperature,
            top_k: 0,
            top_p,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 0,
        }
    }
}

impl Default for SamplerOptions {
    fn default() -> SamplerOptions {
        SamplerOptions::LLAMA_CPP
    }
}

pub struct Sampler {
    options: SamplerOptions,
    rng: Rng,
    /// (logit, then weight; token) of the tokens still in the running:
    /// allocated once for the whole vocabulary.
    candidates: Vec<(f32, u32)>,
    /// The last `repeat_last_n` tokens seen, a ring written at `next`.
    recent: Vec<u32>,
    next: usize,
}

/// Index of the largest finite-or-not value; the lowest index wins ties and
/// NaN never wins, so the result is deterministic for any input (0 when
/// every value is NaN).
///
/// Two passes the compiler vectorizes, where one loop comparing with the
/// best so far took 5% of a greedy decode of a stories15M-shaped model
/// (32000 logits): the largest non-NaN value (NaN is never `>`, so it is
/// skipped), kept in lanes; then the first value equal to it (`==` ties
/// −0.0 with 0.0, as `>` did), looked for a lane group at a time.
pub fn argmax(logits: &[f32]) -> u32 {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let groups = logits.chunks_exact(LANES);
    let rest = groups.remainder();
    for group in groups {
        for (m, &v) in lanes.iter_mut().zip(group) {
            if v > *m {
                *m = v;
            }
        }
    }
    let larger = |m: f32, &v: &f32| if v > m { v } else { m };
    let max = lanes.iter().chain(rest).fold(f32::NEG_INFINITY, larger);
    let group = logits
        .chunks(LANES)
        .position(|g| g.iter().fold(false, |found, &v| found | (v == max)))
        .unwrap_or(0);
    let at = logits[group * LANES..].iter().position(|&v| v == max);
    at.map_or(0, |i| group * LANES + i) as u32
}

/// Where the chain ends: one token, or weighted candidates.
enum Narrowed {
    Token(u32),
    Weights(f32),
}

/// Most probable first; the lower token first among equals, so the order,
/// and with it every draw, is the same on every run. Adding +0.0 turns -0.0
/// into +0.0: `total_cmp` alone would rank 0.0 above -0.0, two logits of the
/// same probability, and break the lower-token rule (a fuzz find).
fn by_logit_desc(a: &(f32, u32), b: &(f32, u32)) -> std::cmp::Ordering {
    (b.0 + 0.0).total_cmp(&(a.0 + 0.0)).then(a.1.cmp(&b.1))
}

impl Sampler {
    /// Temperature and top-p only (`SamplerOptions::temperature_top_p`).
    /// `temperature` 0 means greedy; `top_p` outside (0, 1) means no
    /// nucleus cut.
    pub fn new(vocab: usize, temperature: f32, top_p: f32, seed: u64) -> Sampler {
        Sampler::with_options(vocab, SamplerOptions::temperature_top_p(temperature, top_p), seed)
    }

    /// A sampler for logits of `vocab` tokens. Out-of-range settings are
    /// read as their nearest meaningful value: a temperature that is not a
    /// finite number ≥ 0 is greedy, a top-p outside (0, 1) or a min-p
    /// outside (0, 1] is off, a repetition penalty that is not finite and
    /// positive is off.
    pub fn with_options(vocab: usize, options: SamplerOptions, seed: u64) -> Sampler {
        let mut options = options;
        if !(options.temperature.is_finite() && options.temperature > 0.0) {
            options.temperature = 0.0;
        }
        if !(options.top_p > 0.0 && options.top_p < 1.0) {
            options.top_p = 1.0;
        }
        if !(options.min_p > 0.0 && options.min_p <= 1.0) {
            options.min_p = 0.0;
        }
        if !(options.repeat_penalty.is_finite() && options.repeat_penalty > 0.0) {
            options.repeat_penalty = 1.0;
        }
        if options.repeat_penalty == 1.0 {
            options.repeat_last_n = 0;
        }
        Sampler {
            options,
            rng: Rng::new(seed),
            candidates: Vec::with_capacity(vocab),
            recent: Vec::with_capacity(options.repeat_last_n),
            next: 0,
        }
    }

    pub fn options(&self) -> SamplerOptions {
        self.options
    }

    pub fn is_greedy(&self) -> bool {
        self.options.temperature == 0.0
    }

    /// Records tokens the model has seen (the prompt, a user's turn) for
    /// the repetition penalty. `sample` records its own choices.
    pub fn accept(&mut self, tokens: &[u32]) {
        let n = self.options.repeat_last_n;
        if n == 0 {
            return;
        }
        for &t in tokens {
            if self.recent.len() < n {
                self.recent.push(t);
            } else {
                self.recent[self.next] = t;
            }
            self.next = (self.next + 1) % n;
        }
    }

    /// Picks a token: an index into `logits`, for any values (NaN, ±inf,
    /// all equal) and any settings. No logits at all is a Shape error.
    /// `logits` is used as scratch (the penalty is applied in place).
    pub fn sample(&mut self, logits: &mut [f32]) -> Result<u32> {
        if logits.is_empty() {
            return Err(MlError::shape("no logits to sample from (a vocabulary of 0 tokens)"));
        }
        let token = self.sample_nonempty(logits);
        self.accept(&[token]);
        Ok(token)
    }

    fn sample_nonempty(&mut self, logits: &mut [f32]) -> u32 {
        match self.narrow(logits) {
            Narrowed::Token(token) => token,
            Narrowed::Weights(total) => {
                let coin = self.rng.next_f32();
                sample_cdf(self.candidates.iter().copied(), total, coin, logits.len())
            }
        }
    }

    /// What `sample` would draw from for these logits: (probability, token)
    /// pairs, most probable first, summing to 1 (one token at probability 1
    /// when the choice is greedy). Neither draws from the RNG nor records a
    /// token. `logits` is used as scratch, as by `sample`.
    pub fn distribution(&mut self, logits: &mut [f32]) -> &[(f32, u32)] {
        if logits.is_empty() {
            self.candidates.clear();
            return &self.candidates;
        }
        match self.narrow(logits) {
            Narrowed::Token(token) => {
                self.candidates.clear();
                self.candidates.push((1.0, token));
            }
            Narrowed::Weights(total) => {
                for c in self.candidates.iter_mut() {
                    c.0 /= total;
                }
            }
        }
        &self.candidates
    }

    /// The chain up to the draw: a token when the choice is deterministic,
    /// else `candidates` holds the tokens left with weights summing to the
    /// returned total.
    fn narrow(&mut self, logits: &mut [f32]) -> Narrowed {
        if logits.iter().any(|v| !v.is_finite()) {
            // Non-finite logits have no distribution; fall back to the
            // deterministic choice rather than sample from NaNs.
            return Narrowed::Token(argmax(logits));
        }
        self.penalize(logits);
        let greedy = argmax(logits);
        if self.is_greedy() {
            return Narrowed::Token(greedy);
        }
        self.candidates.clear();
        self.candidates
            .extend(logits.iter().enumerate().map(|(i, &l)| (l, i as u32)));
        let k = self.options.top_k;
        if k > 0 && k < self.candidates.len() {
            self.candidates.select_nth_unstable_by(k - 1, by_logit_desc);
            self.candidates.truncate(k);
        }
        self.candidates.sort_unstable_by(by_logit_desc);
        self.keep_top_p();
        self.keep_min_p();
        // Temperature, then weights relative to the best (≤ 1, no overflow
        // for any finite logits): the softmax without its division, which
        // the draw does by scaling the coin to the total.
        let best = self.candidates[0].0;
        let t = self.options.temperature;
        let mut total = 0.0f32;
        for c in self.candidates.iter_mut() {
            c.0 = ((c.0 - best) / t).exp();
            total += c.0;
        }
        if !(total.is_finite() && total > 0.0) {
            return Narrowed::Token(greedy);
        }
        Narrowed::Weights(total)
    }

    /// The repetition penalty over the distinct tokens of the window.
    fn penalize(&self, logits: &mut [f32]) {
        let penalty = self.options.repeat_penalty;
        for (i, &t) in self.recent.iter().enumerate() {
            // Once per token, however often it occurs (as llama.cpp).
            if self.recent[..i].contains(&t) {
                continue;
            }
            if let Some(l) = logits.get_mut(t as usize) {
                *l = if *l <= 0.0 { *l * penalty } else { *l / penalty };
            }
        }
    }

    /// Keeps the most probable candidates (sorted, logits at temperature 1)
    /// until their probability mass reaches top-p, and at least one.
    fn keep_top_p(&mut self) {
        let p = self.options.top_p;
        if p >= 1.0 {
            return;
        }
        let best = self.candidates[0].0;
        let total: f32 = self.candidates.iter().map(|c| (c.0 - best).exp()).sum();
        let mut mass = 0.0f32;
        let mut keep = self.candidates.len();
        for (i, c) in self.candidates.iter().enumerate() {
            mass += (c.0 - best).exp() / total;
            if mass >= p {
                keep = i + 1;
                break;
            }
        }
        self.candidates.truncate(keep);
    }

    /// Keeps the candidates at least min-p times as probable as the best:
    /// logit ≥ best + ln(min-p), a prefix of the sorted list.
    fn keep_min_p(&mut self) {
        let min_p = self.options.min_p;
        if min_p <= 0.0 {
            return;
        }
        let floor = self.candidates[0].0 + min_p.ln();
        let keep = self.candidates.iter().take_while(|c| c.0 >= floor).count().max(1);
        self.candidates.truncate(keep);
    }
}

/// Walks the cumulative distribution of (weight, token) pairs whose weights
/// sum to `total` and returns the token where `coin · total` falls; the
/// last token absorbs rounding.
fn sample_cdf(items: impl Iterator<Item = (f32, u32)>, total: f32, coin: f32, n: usize) -> u32 {
    let target = coin * total;
    let mut cdf = 0.0f32;
    let mut last = n.saturating_sub(1) as u32;
    for (p, token) in items {
        cdf += p;
        last = token;
        if target < cdf {
            return token;
        }
    }
    last
}
