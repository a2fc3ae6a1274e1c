//! Prompt processing and decode speed as `llama-bench` reports them, so the
//! figures compare with llama.cpp's directly: `ppN` feeds an N-token prompt
//! from position 0 (the batched prefill, `--batch`), `tgN` generates N
//! tokens after a one-token prompt; each repeated, as mean ± standard
//! deviation of the runs' tok/s.

use legacy_ml::model::sampler::argmax;
use legacy_ml::model::transformer::Transformer;
use legacy_ml::Result;
use std::time::Instant;

/// One test at one thread count.
pub(super) struct SpeedRow {
    pub(super) threads: usize,
    /// `pp128`, `tg128`, …
    pub(super) test: String,
    pub(super) tokens: usize,
    /// Prompt tokens run together (`--batch`; decode runs one at a time).
    pub(super) batch: usize,
    /// tok/s of each run.
    pub(super) runs: Vec<f64>,
}

impl SpeedRow {
    pub(super) fn mean(&self) -> f64 {
        self.runs.iter().sum::<f64>() / self.runs.len().max(1) as f64
    }

    /// The sample standard deviation, as llama-bench prints after `±`
    /// (0 for a single run).
    pub(super) fn stdev(&self) -> f64 {
        let n = self.runs.len();
        if n < 2 {
            return 0.0;
        }
        let mean = self.mean();
        let var = self.runs.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64;
        var.sqrt()
    }
}

/// Prompt ids that are not one token repeated (the attention would then
/// see identical keys), the same for every run and build.
fn prompt_ids(n: usize, vocab: u32) -> Vec<u32> {
    (0..n as u32).map(|i| (i.wrapping_mul(7919) + 1) % vocab).collect()
}

/// `pp` for each prompt length, then `tg` over `decode` tokens, `repetitions`
/// times each, after one untimed warm-up run of each (it pages the weights
/// in). Lengths beyond the context are left out with a note.
pub(super) fn llama_bench(
    tf: &mut Transformer<'_>,
    prompts: &[usize],
    decode: usize,
    repetitions: usize,
) -> Result<Vec<SpeedRow>> {
    let h = *tf.header();
    let ctx = h.max_seq as usize;
    let (threads, batch) = (tf.threads(), tf.batch());
    let mut rows = Vec::new();
    for &n in prompts {
        if n > ctx {
            note!("note: bench: pp{n} left out: {}", tf.context_description());
            continue;
        }
        let ids = prompt_ids(n, h.vocab);
        tf.prefill(&ids)?;
        let mut runs = Vec::with_capacity(repetitions);
        for _ in 0..repetitions {
            let start = Instant::now();
            tf.prefill(&ids)?;
            runs.push(n as f64 / start.elapsed().as_secs_f64());
        }
        rows.push(SpeedRow {
            threads,
            test: format!("pp{n}"),
            tokens: n,
            batch,
            runs,
        });
    }
    if decode + 1 > ctx {
        note!("note: bench: tg{decode} left out: {}", tf.context_description());
        return Ok(rows);
    }
    let generate = |tf: &mut Transformer<'_>| -> Result<f64> {
        let mut next = argmax(tf.prefill(&[1 % h.vocab])?);
        let start = Instant::now();
        for pos in 1..=decode {
            next = argmax(tf.forward(next, pos)?);
        }
        Ok(decode as f64 / start.elapsed().as_secs_f64())
    };
    generate(tf)?;
    let runs = (0..repetitions).map(|_| generate(tf)).collect::<Result<Vec<_>>>()?;
    rows.push(SpeedRow {
        threads,
        test: format!("tg{decode}"),
        tokens: decode,
        batch: 1,
        runs,
    });
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_stdev() {
        let row = SpeedRow {
            threads: 1,
            test: "pp4".into(),
            tokens: 4,
            batch: 4,
            runs: vec![2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0],
        };
        assert_eq!(row.mean(), 5.0);
        // Sum of squares 32 over n - 1 = 7.
        assert!((row.stdev() - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        let one = SpeedRow { runs: vec![3.0], ..row };
        assert_eq!((one.mean(), one.stdev()), (3.0, 0.0));
    }

    #[test]
    fn prompt_ids_stay_in_the_vocabulary_and_vary() {
        let ids = prompt_ids(512, 256);
        assert_eq!(ids.len(), 512);
        assert!(ids.iter().all(|&t| t < 256));
        assert!(ids.windows(2).all(|w| w[0] != w[1]));
    }
}
