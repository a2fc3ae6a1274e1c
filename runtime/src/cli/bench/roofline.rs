//! A model's decode speed against its memory roofline: the bandwidth of a
//! bare sum over its own weights, read between decode chunks.

use super::measure::{sum_pass, READERS};
use legacy_ml::model::format::TensorKind;
use legacy_ml::model::sampler::argmax;
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::Model;
use legacy_ml::Result;
use std::time::Instant;

pub(super) struct ModelRun {
    pub(super) path: String,
    pub(super) wtype: &'static str,
    pub(super) bytes_per_token: usize,
    pub(super) prompt_tokens: usize,
    /// Prompt tokens run together (`--batch`).
    pub(super) prompt_batch: usize,
    pub(super) prompt_tok_s: f64,
    pub(super) decode_tokens: usize,
    pub(super) decode_tok_s: f64,
    /// Read bandwidth of the sum passes over the weights interleaved with
    /// the decode.
    pub(super) decode_bandwidth_gbps: f64,
}

/// The bytes one decode step reads, in the model's own memory: every
/// matrix (quants and scales) and norm vector once, and of the embedding
/// table one row, unless it doubles as the classifier and is read whole.
fn weights_read_per_token(model: &Model) -> Vec<&[u8]> {
    let h = model.header();
    let mut out = Vec::new();
    for t in &model.layout().tensors {
        let (q, d) = model.tensor_bytes(t);
        if t.kind == TensorKind::Quant && t.name == "tok_emb" && !h.shared_classifier {
            out.extend([&q[..q.len() / t.rows], &d[..d.len() / t.rows]]);
        } else {
            out.extend([q, d]);
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Decode tokens timed between passes of a bare sum over the same weights
/// (`sum_pass`, by either reader). The roofline is that sum's bandwidth, not
/// a probe's over a buffer of its own: the sum reads the very bytes the decode reads, in the
/// same memory, cache state and contention, so the fraction reached
/// measures the runtime rather than the neighbours or the cache size (on a
/// machine whose last-level cache holds much of the model, a probe over a
/// separate buffer underrates the bandwidth the model is read at). A pass
/// leaves the caches as a decode step would.
pub(super) const DECODE_CHUNK: usize = 4;

/// Prompt tokens before the roofline's decode: a short context, so that
/// the decode's time is the weights' and not the attention's.
const PROMPT: usize = 16;

pub(super) fn bench_model(
    path: &std::path::Path,
    model: &Model,
    mut tf: Transformer<'_>,
    steps: usize,
    threads: usize,
) -> Result<ModelRun> {
    let weights = weights_read_per_token(model);
    let bytes_per_token: usize = weights.iter().map(|s| s.len()).sum();
    let h = *tf.header();
    let max_seq = h.max_seq as usize;
    let prompt = PROMPT.clamp(1, max_seq.saturating_sub(1).max(1));
    let steps = steps.min(max_seq - prompt).max(1);
    let tokens: Vec<u32> = (0..prompt as u32).map(|i| (i * 7919 + 1) % h.vocab).collect();
    // Warm-up pass: page the weights in so the first timing is not disk.
    tf.prefill(&tokens)?;
    let start = Instant::now();
    let mut next = argmax(tf.prefill(&tokens)?);
    let prompt_time = start.elapsed().as_secs_f64();
    // Passes alternate between the two readers; the roofline takes the
    // faster one's bandwidth.
    let (mut decode_time, mut sum_time, mut passes) = (0.0, [0.0; 2], [0usize; 2]);
    let mut done = 0;
    while done < steps {
        let reader = (passes[0] + passes[1]) % 2;
        sum_time[reader] += sum_pass(&weights, threads, READERS[reader]).as_secs_f64();
        passes[reader] += 1;
        let chunk = DECODE_CHUNK.min(steps - done);
        let start = Instant::now();
        for pos in prompt + done..prompt + done + chunk {
            next = argmax(tf.forward(next, pos)?);
        }
        decode_time += start.elapsed().as_secs_f64();
        done += chunk;
    }
    Ok(ModelRun {
        path: path.display().to_string(),
        wtype: h.wtype.name(),
        bytes_per_token,
        prompt_tokens: prompt,
        prompt_batch: tf.batch(),
        prompt_tok_s: prompt as f64 / prompt_time,
        decode_tokens: steps,
        decode_tok_s: steps as f64 / decode_time,
        decode_bandwidth_gbps: (0..2)
            .filter(|&r| passes[r] > 0)
            .map(|r| (passes[r] * bytes_per_token) as f64 / sum_time[r] / 1e9)
            .fold(0.0, f64::max),
    })
}

impl ModelRun {
    /// tok/s if a decode step took only the time to read its weights at the
    /// bandwidth the sum passes reached during the decode.
    pub(super) fn roofline_tok_s(&self) -> f64 {
        self.decode_bandwidth_gbps * 1e9 / self.bytes_per_token as f64
    }

    /// The same at another bandwidth (the probe's peak).
    pub(super) fn roofline_tok_s_at(&self, gbps: f64) -> f64 {
        gbps * 1e9 / self.bytes_per_token as f64
    }
}
