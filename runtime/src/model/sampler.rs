//! Choosing the next token from logits: greedy, temperature, or nucleus
//! (top-p), driven by a seeded xorshift RNG so a seed reproduces a run.

use crate::core::error::{MlError, Result};
use crate::core::rng::Rng;

pub struct Sampler {
    temperature: f32,
    top_p: f32,
    rng: Rng,
    /// Scratch for top-p, allocated once so sampling never allocates.
    candidates: Vec<(f32, u32)>,
}

/// Index of the largest finite-or-not value; the lowest index wins ties and
/// NaN never wins, so the result is deterministic for any input.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] || logits[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best as u32
}

impl Sampler {
    /// `temperature` 0 means greedy. `top_p` outside (0, 1) means no nucleus
    /// cut.
    pub fn new(vocab: usize, temperature: f32, top_p: f32, seed: u64) -> Sampler {
        Sampler {
            temperature: if temperature.is_finite() {
                temperature.max(0.0)
            } else {
                0.0
            },
            top_p,
            rng: Rng::new(seed),
            candidates: Vec::with_capacity(vocab),
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Picks a token: an index into `logits`, for any values (NaN, ±inf,
    /// all equal) and any temperature and top-p. No logits at all is a Shape
    /// error. `logits` is used as scratch (it becomes probabilities).
    pub fn sample(&mut self, logits: &mut [f32]) -> Result<u32> {
        if logits.is_empty() {
            return Err(MlError::shape("no logits to sample from (a vocabulary of 0 tokens)"));
        }
        Ok(self.sample_nonempty(logits))
    }

    fn sample_nonempty(&mut self, logits: &mut [f32]) -> u32 {
        let greedy = argmax(logits);
        if self.is_greedy() || logits.iter().any(|v| !v.is_finite()) {
            // Non-finite logits have no distribution; fall back to the
            // deterministic choice rather than sample from NaNs.
            return greedy;
        }
        for v in logits.iter_mut() {
            *v /= self.temperature;
        }
        // The scalar softmax, so a seed gives the same tokens on every ISA build.
        crate::kernels::scalar::softmax(logits);
        if logits.iter().any(|p| !p.is_finite()) {
            // A tiny temperature overflowed the scaled logits.
            return greedy;
        }
        let coin = self.rng.next_f32();
        if self.top_p > 0.0 && self.top_p < 1.0 {
            self.sample_top_p(logits, coin).unwrap_or(greedy)
        } else {
            sample_cdf(
                logits.iter().copied().enumerate().map(|(i, p)| (p, i as u32)),
                1.0,
                coin,
                logits.len(),
            )
        }
    }

    /// Nucleus sampling: keep the most probable tokens until their mass
    /// exceeds top_p, then draw among them. `None` when no token passes the
    /// pre-filter, i.e. when the nucleus is the most probable token alone.
    fn sample_top_p(&mut self, probs: &[f32], coin: f32) -> Option<u32> {
        // Tokens below (1 - p) / (n - 1) cannot be in the nucleus, except
        // the most probable one when it alone exceeds p: its probability is
        // only known to be at least 1 / n. Dropping them first keeps the
        // sort short; when that drops every token (a flat distribution and
        // a small p), the nucleus is that first token.
        let cutoff = (1.0 - self.top_p) / (probs.len().max(2) - 1) as f32;
        self.candidates.clear();
        self.candidates.extend(
            probs
                .iter()
                .enumerate()
                .filter(|(_, &p)| p >= cutoff)
                .map(|(i, &p)| (p, i as u32)),
        );
        if self.candidates.is_empty() {
            return None;
        }
        self.candidates
            .sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut mass = 0.0f32;
        let mut keep = self.candidates.len();
        for (i, c) in self.candidates.iter().enumerate() {
            mass += c.0;
            if mass > self.top_p {
                keep = i + 1;
                break;
            }
        }
        let kept = &self.candidates[..keep];
        let total: f32 = kept.iter().map(|c| c.0).sum();
        Some(sample_cdf(kept.iter().copied(), total, coin, probs.len()))
    }
}

/// Walks the cumulative distribution of (probability, token) pairs whose
/// probabilities sum to `total` and returns the token where `coin · total`
/// falls; the last token absorbs rounding.
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
