//! Perplexity over a token sequence, scored as llama.cpp's `perplexity`
//! tool scores it (its default mode, no `--ppl-stride`):
//!
//! - the tokens are cut into `n = len / ctx` windows of `ctx` tokens that
//!   do not overlap (a tail shorter than `ctx` is not scored), and at least
//!   two windows are required;
//! - each window runs from position 0 on a fresh context, its first token
//!   replaced by BOS when the tokenizer adds BOS (llama.cpp's `add_bos`; not
//!   SmolLM2's);
//! - in each window the logits at positions `ctx/2 ..= ctx-2` are scored
//!   against the tokens at `ctx/2+1 ..= ctx-1`: `ctx - ctx/2 - 1` tokens per
//!   window, each predicted with at least half a window of history;
//! - PPL = exp(mean NLL); its ± is the standard error of the mean NLL,
//!   sqrt((mean(NLL²) − mean(NLL)²) / (count − 1)), times PPL (first-order
//!   propagation through exp).
//!
//! The log-softmax is computed in f64 (max-subtracted), so the result does
//! not depend on the build's float tricks beyond the logits themselves.

use crate::core::error::{MlError, Result};
use crate::model::transformer::Transformer;

/// Where a window's logits come from. Scoring asks for the logits of the
/// positions `first..window.len() - 1` only; a source may compute the
/// others (the per-token forward must) but need not hand them over.
pub trait WindowLogits {
    /// Vocabulary size: the length of every logits slice handed over.
    fn vocab(&self) -> usize;

    /// Runs `window` from position 0 on a fresh context and calls
    /// `each(pos, logits)` for `pos` in `first..window.len() - 1`, in order.
    fn window_logits(&mut self, window: &[u32], first: usize, each: &mut dyn FnMut(usize, &[f32])) -> Result<()>;
}

/// A window from position 0 (a new window overwrites the KV cache from
/// there; attention at position p reads positions 0..=p only, all written
/// by this window): the unscored positions before `first` through `feed`,
/// which runs no classifier on a chunk but its last, then the scored ones
/// through `feed_logits`, in chunks of `batch()` positions (one `forward`
/// each at a batch of 1). The last token's logits predict nothing in the
/// window, so it is not run. Every logit is `forward`'s bits, whatever the
/// batch.
impl WindowLogits for Transformer<'_> {
    fn vocab(&self) -> usize {
        self.header().vocab as usize
    }

    fn window_logits(&mut self, window: &[u32], first: usize, each: &mut dyn FnMut(usize, &[f32])) -> Result<()> {
        let last = window.len().saturating_sub(1);
        let first = first.min(last);
        if first > 0 {
            self.feed(&window[..first], 0)?;
        }
        if first < last {
            self.feed_logits(&window[first..last], first, each)?;
        }
        Ok(())
    }
}

/// −log softmax(logits)[target], in f64 with the maximum subtracted first.
pub fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    max + sum.ln() - logits[target as usize] as f64
}

/// The running sums of the scored NLLs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tally {
    /// Tokens scored.
    pub count: usize,
    /// Σ NLL.
    pub nll: f64,
    /// Σ NLL².
    pub nll2: f64,
}

impl Tally {
    pub fn add(&mut self, v: f64) {
        self.count += 1;
        self.nll += v;
        self.nll2 += v * v;
    }

    /// Mean NLL (NaN before any token).
    pub fn mean_nll(&self) -> f64 {
        self.nll / self.count as f64
    }

    /// exp(mean NLL).
    pub fn ppl(&self) -> f64 {
        self.mean_nll().exp()
    }

    /// Standard error of the mean NLL: sqrt((mean(v²) − mean(v)²)/(n − 1));
    /// `None` below two tokens or when rounding makes the variance ≤ 0.
    pub fn nll_stderr(&self) -> Option<f64> {
        if self.count < 2 {
            return None;
        }
        let n = self.count as f64;
        let mean = self.nll / n;
        let var = self.nll2 / n - mean * mean;
        (var > 0.0).then(|| (var / (n - 1.0)).sqrt())
    }

    /// The ± of the perplexity: the NLL's standard error times PPL.
    pub fn ppl_stderr(&self) -> Option<f64> {
        self.nll_stderr().map(|e| e * self.ppl())
    }
}

/// The windows of a run: `ctx` tokens each, the scored ones from `first`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub ctx: usize,
    /// Windows to score.
    pub windows: usize,
    /// Position of the first scored logits (ctx / 2).
    pub first: usize,
}

impl Plan {
    /// Windows of `ctx` tokens over `n_tokens`, at most `max_windows` of
    /// them. Fewer than 2·ctx tokens is an error, as in llama.cpp.
    pub fn new(n_tokens: usize, ctx: usize, max_windows: Option<usize>) -> Result<Plan> {
        if ctx < 4 {
            return Err(MlError::shape(format!(
                "a context of {ctx} tokens scores nothing; give --ctx 4 or more"
            )));
        }
        if n_tokens < 2 * ctx {
            return Err(MlError::shape(format!(
                "the text has {n_tokens} tokens; a context of {ctx} needs at least {} (two windows)",
                2 * ctx
            )));
        }
        let all = n_tokens / ctx;
        Ok(Plan {
            ctx,
            windows: max_windows.map_or(all, |m| m.min(all)),
            first: ctx / 2,
        })
    }

    /// Tokens scored per window.
    pub fn scored_per_window(&self) -> usize {
        self.ctx - self.first - 1
    }
}

/// Scores `tokens` with `source` as `plan` says; `bos`, if given, replaces
/// each window's first token. `progress(window, tally)` is called after each
/// window (0-based) with the running sums.
pub fn perplexity(
    source: &mut dyn WindowLogits,
    tokens: &[u32],
    plan: Plan,
    bos: Option<u32>,
    progress: &mut dyn FnMut(usize, &Tally),
) -> Result<Tally> {
    let vocab = source.vocab();
    if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(MlError::shape(format!(
            "token id {bad} is outside the vocabulary of {vocab}"
        )));
    }
    let mut tally = Tally::default();
    let mut window = vec![0u32; plan.ctx];
    for w in 0..plan.windows {
        window.copy_from_slice(&tokens[w * plan.ctx..(w + 1) * plan.ctx]);
        if let Some(b) = bos {
            window[0] = b;
        }
        let mut expected = plan.first;
        let mut bad_order = false;
        source.window_logits(&window, plan.first, &mut |pos, logits| {
            bad_order |= pos != expected || logits.len() != vocab;
            if !bad_order {
                tally.add(nll(logits, window[pos + 1]));
                expected += 1;
            }
        })?;
        if bad_order || expected != plan.ctx - 1 {
            return Err(MlError::shape(
                "the logits source skipped or repeated a scored position",
            ));
        }
        progress(w, &tally);
    }
    Ok(tally)
}
