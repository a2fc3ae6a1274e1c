//! The .mlb loader on arbitrary bytes: header and layout validation, the
//! value scan, then, for an accepted model with a small context, building
//! the transformer and decoding two steps.
//!
//! Rejections must be Format, Shape or NoMem errors whose message names the
//! field or tensor; an accepted model's logits must be finite, or the step
//! must fail with a clear error. The forward pass runs only when max_seq is
//! at most [`FORWARD_MAX_SEQ`]: every other run-time buffer is bounded by
//! the weights, i.e. by the input's size, so the step stays cheap; models
//! with a longer context are still fully validated.

#![no_main]

use legacy_ml::model::format::HEADER_BYTES;
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::Model;
use legacy_ml::{ErrorKind, MlError};
use libfuzzer_sys::fuzz_target;

/// Largest context (header max_seq) for which the target decodes.
const FORWARD_MAX_SEQ: u32 = 64;

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
}
