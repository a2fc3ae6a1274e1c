//! The `.tok` byte-level BPE reader on arbitrary bytes, then, on anything it
//! accepts, encoding arbitrary text (with and without special-token
//! matching), decoding arbitrary ids, and the chat format (input framing:
//! `fuzz_input::tokenizer_input`). A rejection is a Format error naming the
//! field and its offset; every id encoding produces is inside the
//! vocabulary; decoding any id never panics and out-of-range ids decode to
//! nothing.

#![no_main]

use legacy_ml::model::bpe::{byte_to_char, Bpe};
use legacy_ml::model::tokenizer::{Tokenizer, TokenizerKind};
use legacy_ml::ErrorKind;
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;

fuzz_target!(|data: &[u8]| {
    let input = fuzz_input::tokenizer_input(data);
    // Give every input the magic so the mutator works on the .tok body.
    let mut file = Vec::with_capacity(input.file.len() + 4);
    if !input.file.starts_with(b"MLTK") {
        file.extend_from_slice(b"MLTK");
    }
    file.extend_from_slice(input.file);

    let tok = match Tokenizer::from_bytes(&file) {
        Ok(t) => t,
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::Format, "{}", e.message);
            assert!(
                e.message.starts_with(".tok ") && e.message.contains("(at byte offset "),
                "message names no field and offset: {}",
                e.message
            );
            // The BPE reader alone agrees.
            assert_eq!(Bpe::from_bytes(&file).err(), Some(e));
            return;
        }
    };
    assert_eq!(tok.kind(), TokenizerKind::Bpe);
    let bpe = tok.as_bpe().expect("a .tok is a BPE");
    let vocab = tok.vocab_size();
    assert!(vocab >= 1);

    let out_of_vocab = |ids: &[u32], what: &str| {
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            panic!("{what} gave id {bad}, outside the vocabulary of {vocab}");
        }
    };
    let ids = tok.encode(&input.text, input.bos, input.eos);
    out_of_vocab(&ids, "encode");
    let plain = tok.encode_ordinary(&input.text);
    out_of_vocab(&plain, "encode_ordinary");
    // Plain text decodes back to itself, less the bytes whose character the
    // vocabulary lacks: a subsequence, and all of it when none is missing.
    let back = tok.decode(&plain);
    let mut text_bytes = input.text.bytes();
    assert!(
        back.iter().all(|&b| text_bytes.any(|t| t == b)),
        "decode(encode_ordinary(text)) is not a subsequence of the text"
    );
    if vocab <= 4096 && complete(bpe) {
        assert_eq!(
            back,
            input.text.as_bytes(),
            "a complete byte-level vocabulary must round-trip"
        );
    }

    let _ = tok.decode(&input.ids);
    for &id in &input.ids {
        let piece = tok.decode_piece(0, id);
        if id as usize >= vocab {
            assert!(piece.is_empty(), "id {id} is out of range but decodes to {piece:?}");
            assert_eq!(bpe.token(id), None);
            assert_eq!(bpe.token_type(id), None);
        }
    }
    if let Ok(chat) = tok.chat() {
        out_of_vocab(&chat.turn(&tok, "user", &input.text), "chat turn");
        out_of_vocab(&chat.open_turn(&tok, "assistant"), "chat open_turn");
        let _ = chat.default_system();
    }
});

/// Whether the vocabulary holds the character of every byte as a token.
fn complete(bpe: &Bpe) -> bool {
    let tokens: HashSet<&str> = (0..bpe.vocab_size() as u32).filter_map(|id| bpe.token(id)).collect();
    (0..=255u8).all(|b| tokens.contains(byte_to_char(b).to_string().as_str()))
}
