//! A decode step allocates nothing: every buffer was carved from the arena
//! at load. Proven with the counting global allocator (`alloc_probe`) armed
//! around many steps.

use crate::alloc_probe::allocations_during;
use legacy_ml::core::tensor::WType;
use legacy_ml::model::gen::GenConfig;
use legacy_ml::model::sampler::{Sampler, SamplerOptions};
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::Model;

#[test]
fn the_counter_sees_an_allocation() {
    let n = allocations_during(|| {
        std::hint::black_box(Vec::<u8>::with_capacity(16));
    });
    assert_eq!(
        n, 1,
        "the counting allocator must notice allocations, or the real test proves nothing"
    );
}

#[test]
fn decode_steps_allocate_nothing() {
    legacy_ml::guard::guard();
    for wtype in [WType::Q8_0, WType::Q4_0] {
        let cfg = if cfg!(miri) {
            // Miri interprets every instruction: a smaller model, fewer steps.
            GenConfig {
                wtype,
                dim: 32,
                n_layers: 1,
                hidden_dim: 32,
                vocab: 16,
                max_seq: 2,
                ..GenConfig::default()
            }
        } else {
            GenConfig {
                wtype,
                max_seq: 128,
                ..GenConfig::default()
            }
        };
        let model = Model::from_bytes(&cfg.to_bytes().unwrap()).unwrap();
        // With feature `threads` the pool runs too (2 threads); without it
        // the count is ignored.
        let mut tf = Transformer::with_threads(&model, 2).unwrap();
        // llama.cpp's whole chain, the repetition penalty's window included.
        let options = SamplerOptions {
            repeat_penalty: 1.1,
            ..SamplerOptions::LLAMA_CPP
        };
        let mut sampler = Sampler::with_options(cfg.vocab as usize, options, 7);
        let mut token = 1;
        let n = allocations_during(|| {
            for pos in 0..cfg.max_seq as usize {
                let logits = tf.forward(token, pos).unwrap();
                token = sampler.sample(logits).unwrap();
            }
        });
        assert_eq!(
            n,
            0,
            "{} decode steps ({}) allocated {n} times",
            cfg.max_seq,
            wtype.name()
        );
    }
}
