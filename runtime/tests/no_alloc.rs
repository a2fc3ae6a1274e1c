//! A decode step allocates nothing: every buffer was carved from the arena
//! at load. Proven with a counting global allocator armed around many steps.

use legacy_ml::core::tensor::WType;
use legacy_ml::model::gen::GenConfig;
use legacy_ml::model::sampler::{Sampler, SamplerOptions};
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::Model;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    // Armed flag and count are per thread: tests run in parallel, and only
    // the thread under test may be counted.
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    if ARMED.try_with(|a| a.get()).unwrap_or(false) {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    }
}

// SAFETY: forwards every call unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by `f` on this thread.
fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(|n| n.get());
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    ALLOCATIONS.with(|n| n.get()) - before
}

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
    legacy_ml::core::isa::guard();
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
