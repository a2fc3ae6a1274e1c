//! Random-weight models for tests and benchmarks (`ml gen`). The same seed
//! and shape always give the same bytes.

use super::format::{Header, TensorKind};
use super::writer::write_model;
use crate::core::error::Result;
use crate::core::rng::Rng;
use crate::core::tensor::WType;
use std::io::Write;

#[derive(Debug, Clone, Copy)]
pub struct GenConfig {
    pub dim: u32,
    pub n_layers: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub hidden_dim: u32,
    pub vocab: u32,
    pub max_seq: u32,
    pub wtype: WType,
    pub shared_classifier: bool,
    pub seed: u64,
}

impl Default for GenConfig {
    /// A tiny GQA model that decodes in well under a millisecond per token.
    fn default() -> Self {
        GenConfig {
            dim: 64,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: 2,
            hidden_dim: 128,
            vocab: 256,
            max_seq: 64,
            wtype: WType::Q8_0,
            shared_classifier: false,
            seed: 42,
        }
    }
}

impl GenConfig {
    pub fn header(&self) -> Header {
        Header {
            dim: self.dim,
            n_layers: self.n_layers,
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            hidden_dim: self.hidden_dim,
            vocab: self.vocab,
            max_seq: self.max_seq,
            rope_theta: 10000.0,
            norm_eps: 1e-5,
            wtype: self.wtype,
            shared_classifier: self.shared_classifier,
        }
    }

    /// Writes the model; returns its size in bytes.
    ///
    /// Matrices are uniform with variance 1/K so activations keep their
    /// scale through the layers; the classifier is four times larger so the
    /// logits are well spread and greedy choices are not near-ties (the
    /// golden comparisons of other ISA builds rely on that).
    pub fn write(&self, out: &mut dyn Write) -> Result<usize> {
        let mut rng = Rng::new(self.seed);
        write_model(out, &self.header(), |t, values| {
            let uniform_var_one_over_k = (3.0 / t.cols as f32).sqrt();
            let scale = match (t.kind, t.name.as_str()) {
                (TensorKind::F32, _) => {
                    values.iter_mut().for_each(|v| *v = 1.0 + rng.symmetric(0.2));
                    return Ok(());
                }
                (_, "tok_emb") => 1.0,
                (_, "wcls") => 4.0 * uniform_var_one_over_k,
                _ => uniform_var_one_over_k,
            };
            values.iter_mut().for_each(|v| *v = rng.symmetric(scale));
            Ok(())
        })
    }

    /// The model as bytes in memory.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write(&mut out)?;
        Ok(out)
    }
}
