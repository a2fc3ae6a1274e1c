//! llama2.c's `tokenizer.bin` reader on arbitrary bytes, then, on anything
//! it accepts, encoding arbitrary text and decoding arbitrary ids (input
//! framing: `fuzz_input::tokenizer_input`). A rejection is a Format error
//! naming the record or header field; every id encoding produces is inside
//! the vocabulary and the same as llama2.c's O(n²) merge loop gives;
//! decoding any id (in range or not) never panics.

#![no_main]

use legacy_ml::model::tokenizer::{Tokenizer, TokenizerKind};
use legacy_ml::ErrorKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = fuzz_input::tokenizer_input(data);
    if input.file.starts_with(b"MLTK") {
        // A .tok: the tokenizer_bpe target's business.
        return;
    }
    let tok = match Tokenizer::from_bytes(input.file) {
        Ok(t) => t,
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::Format, "{}", e.message);
            assert!(
                e.message.contains("tokenizer")
                    && (e.message.contains("record")
                        || e.message.contains("max_token_length")
                        || e.message.contains("tokens")),
                "message names no field: {}",
                e.message
            );
            return;
        }
    };
    assert_eq!(tok.kind(), TokenizerKind::Llama2c);
    let vocab = tok.vocab_size();
    assert!(vocab >= 3);
    let ids = tok.encode(&input.text, input.bos, input.eos);
    // The O(n log n) merging gives llama2.c's own O(n²) result.
    assert_eq!(
        Some(&ids),
        tok.encode_quadratic_reference(&input.text, input.bos, input.eos).as_ref(),
        "heap merging differs from llama2.c's loop on {:?}",
        input.text
    );
    if let Some(&bad) = ids.iter().find(|&&id| id as usize >= vocab) {
        panic!("encode gave id {bad}, outside the vocabulary of {vocab}");
    }
    if input.bos {
        assert_eq!(ids.first(), Some(&tok.bos()));
    }
    if input.eos {
        assert_eq!(ids.last(), Some(&tok.eos()));
    }
    let _ = tok.decode(&ids);
    let _ = tok.decode(&input.ids);
    let mut prev = 0;
    for &id in &input.ids {
        let piece = tok.decode_piece(prev, id);
        if id as usize >= vocab {
            assert!(piece.is_empty(), "id {id} is out of range but decodes to {piece:?}");
        }
        prev = id;
    }
    assert!(tok.chat().is_err(), "a tokenizer.bin has no chat template");
    assert_eq!(tok.special_id("<|im_end|>"), None);
});
