//! With feature `threads`: logits are bit-identical for any thread count,
//! and a decode step still allocates nothing. Without it, every request
//! runs on one thread.
//!
//! Per-item cfg, not a module-level one: without the feature a test still
//! checks the single-threaded fallback.

#[cfg(feature = "threads")]
use legacy_ml::core::tensor::WType;
use legacy_ml::model::gen::GenConfig;
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::Model;

#[cfg(not(feature = "threads"))]
#[test]
fn without_the_feature_every_transformer_runs_on_one_thread() {
    legacy_ml::guard::guard();
    let bytes = GenConfig {
        dim: 64,
        n_layers: 1,
        n_heads: 4,
        n_kv_heads: 2,
        hidden_dim: 96,
        vocab: 32,
        max_seq: 8,
        ..GenConfig::default()
    }
    .to_bytes()
    .unwrap();
    let model = Model::from_bytes(&bytes).unwrap();
    for asked in [1, 2, 8] {
        assert_eq!(
            Transformer::with_threads(&model, asked).unwrap().threads(),
            1,
            "{asked}"
        );
    }
}

#[cfg(feature = "threads")]
fn logits_bits(model: &Model, threads: usize, tokens: &[u32]) -> Vec<Vec<u32>> {
    let mut tf = Transformer::with_threads(model, threads).unwrap();
    assert_eq!(tf.threads(), threads);
    tokens
        .iter()
        .enumerate()
        .map(|(pos, &t)| tf.forward(t, pos).unwrap().iter().map(|v| v.to_bits()).collect())
        .collect()
}

#[cfg(feature = "threads")]
#[test]
fn thread_counts_give_bit_identical_logits() {
    legacy_ml::guard::guard();
    // Miri (which checks the pool for data races) interprets every
    // instruction: the same two shapes, smaller, for two positions.
    let (steps, counts): (u32, &[usize]) = if cfg!(miri) { (2, &[3]) } else { (40, &[2, 3, 5]) };
    fn small(c: GenConfig) -> GenConfig {
        if !cfg!(miri) {
            return c;
        }
        // dim 32 keeps 4 heads of 8; 6 heads become 2 (3 threads, 2 heads).
        let (n_heads, n_kv_heads) = if c.n_heads == 4 { (4, 2) } else { (2, 1) };
        GenConfig {
            dim: 32,
            n_layers: 1,
            n_heads,
            n_kv_heads,
            hidden_dim: 32,
            vocab: c.vocab % 16 + 16,
            max_seq: 4,
            ..c
        }
    }
    for cfg in [
        GenConfig {
            wtype: WType::Q8_0,
            seed: 21,
            ..GenConfig::default()
        },
        // Odd shapes: vocab and kv rows not multiples of 4, 6 heads for 3 threads.
        GenConfig {
            wtype: WType::Q4_0,
            seed: 22,
            vocab: 250,
            dim: 96,
            n_heads: 6,
            n_kv_heads: 3,
            hidden_dim: 160,
            ..GenConfig::default()
        },
    ]
    .map(small)
    {
        let tokens: Vec<u32> = (0..steps).map(|i| (i * 37 + 1) % cfg.vocab.min(250)).collect();
        let model = Model::from_bytes(&cfg.to_bytes().unwrap()).unwrap();
        let one = logits_bits(&model, 1, &tokens);
        for &threads in counts {
            assert!(
                one == logits_bits(&model, threads, &tokens),
                "{threads} threads differ from 1 ({cfg:?})"
            );
        }
    }
}
