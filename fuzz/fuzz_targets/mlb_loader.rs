//! The .mlb loader on arbitrary bytes: header and layout validation, the
//! value scan, then, for an accepted model with a small context, building
//! the transformer and decoding two steps, and a prompt of up to 18 tokens
//! fed token by token and in chunks of 16 (the batched prefill: the matmul
//! kernels, whose token lanes and tiles all take part, and
//! `forward_chunk`).
//!
//! Rejections must be Format, Shape or NoMem errors whose message names the
//! field or tensor; an accepted model's logits must be finite, or the step
//! must fail with a clear error; the chunked prompt's logits must be the
//! token-by-token prompt's bits whenever both succeed. The forward pass
//! runs only when max_seq is at most [`FORWARD_MAX_SEQ`]: every other
//! run-time buffer is bounded by the weights, i.e. by the input's size, so
//! the step stays cheap; models with a longer context are still fully
//! validated.

#![no_main]

use legacy_ml::model::format::HEADER_BYTES;
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::Model;
use legacy_ml::{ErrorKind, MlError};
use libfuzzer_sys::fuzz_target;

/// Largest context (header max_seq) for which the target decodes.
const FORWARD_MAX_SEQ: u32 = 64;

/// The batched prompt's length at most and its chunk: a chunk of 16 and a
/// rest of 2 take every x86 tier's matmul paths (AVX-512's sixteen token
/// lanes, AVX2's eight, the 128-bit tiers' widened matmul from four tokens,
/// the tiles below that).
const PROMPT_TOKENS: usize = 18;
const PROMPT_BATCH: usize = 16;

/// What a rejection's message must mention at least one of: a header field,
/// a tensor, the header, or (for a decode step) the logit.
const NAMES: &[&str] = &[
    "magic",
    "version",
    "dim",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "hidden_dim",
    "vocab",
    "max_seq",
    "rope_theta",
    "norm_eps",
    "wtype",
    "shared_classifier",
    "header",
    "tensor",
    "logit",
];

#[track_caller]
fn check_error(e: &MlError, what: &str) {
    assert!(
        matches!(e.kind, ErrorKind::Format | ErrorKind::Shape | ErrorKind::NoMem),
        "{what}: unexpected kind {:?}: {}",
        e.kind,
        e.message
    );
    assert!(
        NAMES.iter().any(|n| e.message.contains(n)),
        "{what}: the message names no field: {}",
        e.message
    );
}

fuzz_target!(
    // Built with an ISA tier (`--features isa-avx2`), refuse a CPU without it
    // (exit 7) before any kernel runs, as every binary and test does.
    init: legacy_ml::guard::guard(),
    |data: &[u8]| run(data)
);

fn run(data: &[u8]) {
    let model = match Model::from_bytes(data) {
        Ok(m) => m,
        Err(e) => return check_error(&e, "rejected file"),
    };
    let layout = model.layout();
    assert_eq!(
        layout.file_bytes,
        data.len(),
        "accepted a file whose length is not the layout's"
    );
    assert!(data.len() >= HEADER_BYTES);
    for t in &layout.tensors {
        assert!(
            t.q_offset % 64 == 0 && t.d_offset % 64 == 0,
            "tensor {} misaligned",
            t.name
        );
        assert!(t.d_offset + t.d_bytes <= data.len() && t.q_offset + t.q_bytes <= data.len());
    }

    let h = *model.header();
    if h.max_seq > FORWARD_MAX_SEQ {
        return;
    }
    let mut tf = match Transformer::with_threads(&model, 1) {
        Ok(tf) => tf,
        Err(e) => return check_error(&e, "transformer"),
    };
    // Out-of-range tokens and positions are Shape errors, not panics.
    assert_eq!(tf.forward(h.vocab, 0).unwrap_err().kind, ErrorKind::Shape);
    assert_eq!(tf.forward(0, h.max_seq as usize).unwrap_err().kind, ErrorKind::Shape);
    // The last row of the embedding at position 0, then row 0 attending over two positions.
    for (token, pos) in [(h.vocab - 1, 0usize), (0, 1)] {
        if pos >= h.max_seq as usize {
            break;
        }
        match tf.forward(token, pos) {
            Ok(logits) => {
                assert_eq!(logits.len(), h.vocab as usize);
                if let Some(i) = logits.iter().position(|v| !v.is_finite()) {
                    panic!("step {pos}: logit {i} is {} but forward returned Ok", logits[i]);
                }
            }
            Err(e) => {
                check_error(&e, "forward");
                break;
            }
        }
    }
    let tokens = (h.max_seq as usize).min(PROMPT_TOKENS);
    if tokens >= 2 {
        // Spread over the vocabulary, the last row and row 0 first.
        let prompt: Vec<u32> = (0..tokens as u64)
            .map(|i| ((u64::from(h.vocab) - 1 + i * 7919) % u64::from(h.vocab)) as u32)
            .collect();
        batched_prompt(&model, &prompt);
    }
}

/// `prompt` fed token by token and in chunks of `PROMPT_BATCH`: the same
/// bits when both give logits; a chunked run's logits are finite or its
/// error clear. (Token by token, a non-finite logit at an earlier position
/// is already an error; chunked, only the last position's logits are
/// computed.)
fn batched_prompt(model: &Model, prompt: &[u32]) {
    let by_token = match Transformer::with_threads(model, 1) {
        Ok(mut tf) => tf.prefill(prompt).map(|l| l.to_vec()),
        Err(e) => return check_error(&e, "transformer"),
    };
    if let Err(e) = &by_token {
        check_error(e, "token-by-token prompt");
    }
    let mut tf = match Transformer::with_threads(model, 1) {
        Ok(tf) => tf,
        Err(e) => return check_error(&e, "transformer"),
    };
    if let Err(e) = tf.set_batch(PROMPT_BATCH) {
        // The chunk buffers are sized from the header: too large is NoMem.
        assert_eq!(e.kind, ErrorKind::NoMem, "set_batch: {}", e.message);
        return;
    }
    match tf.prefill(prompt) {
        Ok(chunked) => {
            if let Some(i) = chunked.iter().position(|v| !v.is_finite()) {
                panic!("chunked prompt: logit {i} is {} but prefill returned Ok", chunked[i]);
            }
            if let Ok(by_token) = by_token {
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert!(
                    bits(&by_token) == bits(chunked),
                    "the chunked prompt's logits differ from the token-by-token prompt's"
                );
            }
        }
        Err(e) => check_error(&e, "chunked prompt"),
    }
}
