//! The llama2.c tokenizer against its real 32000-token vocabulary (expected
//! ids come from llama2.c's encode rules), on small synthetic vocabularies
//! for the merge order, and on malformed files.

use legacy_ml::model::tokenizer::Tokenizer;
use legacy_ml::ErrorKind;
use std::path::Path;
use std::sync::OnceLock;

const REAL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/llama2c-32000.bin");

/// The reference vocabulary, loaded once. A missing file is a failure, not a
/// skip: every value asserted below depends on it.
fn real() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        Tokenizer::open(Path::new(REAL))
            .unwrap_or_else(|e| panic!("the reference tokenizer {REAL} must exist and load: {e}"))
    })
}

fn real_bytes() -> Vec<u8> {
    std::fs::read(REAL).unwrap_or_else(|e| panic!("the reference tokenizer {REAL} must exist: {e}"))
}

/// A tokenizer.bin image from (score, piece) records.
fn image(max_token_length: i32, records: &[(f32, &[u8])]) -> Vec<u8> {
    let mut out = max_token_length.to_le_bytes().to_vec();
    for (score, piece) in records {
        out.extend_from_slice(&score.to_le_bytes());
        out.extend_from_slice(&(piece.len() as i32).to_le_bytes());
        out.extend_from_slice(piece);
    }
    out
}

/// A record with an arbitrary (possibly lying) length field.
fn raw_record(out: &mut Vec<u8>, score: f32, len: i32, piece: &[u8]) {
    out.extend_from_slice(&score.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(piece);
}

const CONTROL: [(f32, &[u8]); 3] = [(0.0, b"<unk>"), (0.0, b"\n<s>\n"), (0.0, b"\n</s>\n")];

fn format_error(bytes: &[u8]) -> String {
    match Tokenizer::from_bytes(bytes) {
        Ok(t) => panic!("expected a Format error, got a tokenizer of {} tokens", t.vocab_size()),
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::Format, "{}", e.message);
            e.message
        }
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the 32000-token reference vocabulary takes too long to load under Miri"
)]
fn real_vocabulary_loads_with_32000_tokens() {
    let t = real();
    assert_eq!(t.vocab_size(), 32000);
    assert_eq!((t.bos(), t.eos()), (1, 2));
    assert_eq!(t.decode_piece(0, 306), b" I");
    assert_eq!(t.decode_piece(0, 29871), b" ");
    assert_eq!(t.decode_piece(0, 31999), "给".as_bytes());
    assert_eq!(t.decode_piece(0, 1), b"\n<s>\n");
    assert_eq!(t.decode_piece(0, 2), b"\n</s>\n");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the 32000-token reference vocabulary takes too long to load under Miri"
)]
fn encodes_the_llama2c_reference_prompt() {
    assert_eq!(
        real().encode("I believe the meaning of life is", true, false),
        [1, 306, 4658, 278, 6593, 310, 2834, 338]
    );
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the 32000-token reference vocabulary takes too long to load under Miri"
)]
fn encode_pins_exact_ids() {
    let t = real();
    let cases: &[(&str, &[u32])] = &[
        ("Hello, world!", &[1, 15043, 29892, 3186, 29991]),
        ("hello", &[1, 22172]),
        // "  " (259) scores -1e9, just above llama2.c's -1e10 threshold.
        ("  two leading spaces", &[1, 259, 1023, 8236, 8162]),
        ("a  b   c", &[1, 263, 29871, 289, 259, 274]),
        ("line1\nline2\n\n", &[1, 1196, 29896, 13, 1220, 29906, 13, 13]),
        ("\ttab", &[1, 29871, 12, 3891]),
        ("Café déjà vu", &[1, 315, 28059, 20737, 18679]),
        ("中文字符测试", &[1, 29871, 30275, 30333, 30578, 31277, 31851, 31787]),
        ("Привет, мир!", &[1, 7203, 7616, 29892, 4157, 29927, 29991]),
        ("\u{301}", &[1, 29871, 30103]),
        (" ", &[1, 259]),
        // Literal marker text is never turned into the marker or byte ids.
        ("<s>", &[1, 529, 29879, 29958]),
        ("<0x41>", &[1, 529, 29900, 29916, 29946, 29896, 29958]),
    ];
    for (text, ids) in cases {
        assert_eq!(t.encode(text, true, false), *ids, "{text:?}");
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the 32000-token reference vocabulary takes too long to load under Miri"
)]
fn bos_eos_and_empty_text() {
    let t = real();
    assert_eq!(t.encode("", false, false), Vec::<u32>::new());
    assert_eq!(t.encode("", true, true), [1, 2]);
    assert_eq!(t.encode("hello", false, true), [22172, 2]);
    assert_eq!(t.encode("hello", true, true), [1, 22172, 2]);
    // Without BOS nothing strips the dummy prefix: llama2.c prints it too.
    assert_eq!(t.decode(&t.encode("hello", false, false)), b" hello");
    assert_eq!(t.decode(&[1, 22172, 2]), b"hello");
    assert_eq!(t.decode(&[]), b"");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the 32000-token reference vocabulary takes too long to load under Miri"
)]
fn round_trips_are_byte_exact() {
    let t = real();
    let texts = [
        "Hello, world!",
        "The quick brown fox jumps over the lazy dog.",
        "!?.,;:'\"()[]{}<>@#$%^&*-_=+/\\|~`",
        "1234567890 3.14159 -42 1e-9",
        "  two leading spaces",
        "trailing spaces   ",
        "a  b   c    d",
        " ",
        "line1\nline2\n\n",
        "\ttab\tseparated\t",
        "\r\n windows line end",
        "Café déjà vu, naïve façade, Ångström",
        "中文字符测试",
        "日本語のテキスト",
        "Привет, мир!",
        "emoji 😀🎉👍 and 🦀",
        "\u{301}",
        "x\u{301}e\u{301}",
        "<s> </s> <unk> <0x41> \n<s>\n",
        "nul \0 byte",
        "mixed: ÄÖÜ ß ∑ ∞ → ← 🚀 end",
    ];
    for text in texts {
        let ids = t.encode(text, true, false);
        assert_eq!(t.decode(&ids), text.as_bytes(), "{text:?} encoded as {ids:?}");
        // EOS adds no text either.
        let ids = t.encode(text, true, true);
        assert_eq!(t.decode(&ids), text.as_bytes(), "{text:?} encoded as {ids:?}");
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the 32000-token reference vocabulary takes too long to load under Miri"
)]
fn absent_character_falls_back_to_byte_ids() {
    let t = real();
    // U+1F980 CRAB is not a piece: its UTF-8 bytes F0 9F A6 80 become ids
    // byte + 3, after the dummy-prefix space (29871) that cannot merge with them.
    let crab = "🦀";
    assert_eq!(crab.as_bytes(), [0xF0, 0x9F, 0xA6, 0x80]);
    let ids = t.encode(crab, true, false);
    assert_eq!(ids, [1, 29871, 0xF0 + 3, 0x9F + 3, 0xA6 + 3, 0x80 + 3]);
    assert_eq!(t.decode_piece(29871, 0xF0 + 3), [0xF0]);
    assert_eq!(t.decode_piece(0, 0x80 + 3), [0x80]);
    assert_eq!(t.decode(&ids), crab.as_bytes());
    // Newline and tab are byte pieces in this vocabulary.
    assert_eq!(t.decode_piece(0, 13), b"\n");
    assert_eq!(t.decode_piece(1, 12), b"\t");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the 32000-token reference vocabulary takes too long to load under Miri"
)]
fn decode_piece_rules() {
    let t = real();
    // After BOS the dummy-prefix space goes; after anything else it stays.
    assert_eq!(t.decode_piece(1, 306), b"I");
    assert_eq!(t.decode_piece(0, 306), b" I");
    assert_eq!(t.decode_piece(2, 306), b" I");
    assert_eq!(t.decode_piece(1, 29871), b"");
    assert_eq!(t.decode_piece(1, 259), b" ");
    assert_eq!(t.decode_piece(1, 3), [0u8]);
    assert_eq!(t.decode_piece(1, 258), [0xFFu8]);
    assert_eq!(t.decode_piece(0, 32000), b"");
    assert_eq!(t.decode_piece(0, u32::MAX), b"");
    assert_eq!(t.decode(&[1, 306, 32000, 4658, u32::MAX]), b"I believe");
}

/// Vocabulary: 0-2 control, 3 " ", 4 "a", 5 "b", 6 "ab", 7 "ba", 8 " a".
fn synthetic(ab: f32, ba: f32, space_a: f32) -> Tokenizer {
    let mut records = CONTROL.to_vec();
    records.extend_from_slice(&[
        (0.0, b" "),
        (0.0, b"a"),
        (0.0, b"b"),
        (ab, b"ab"),
        (ba, b"ba"),
        (space_a, b" a"),
    ]);
    Tokenizer::from_bytes(&image(6, &records)).unwrap()
}

#[test]
fn merges_highest_score_first_and_leftmost_on_ties() {
    // " a b a": equal "ab" and "ba" → the leftmost pair ("ab") merges.
    assert_eq!(synthetic(-1.0, -1.0, -5.0).encode("aba", false, false), [3, 6, 4]);
    // "ba" higher → it merges first, then " a".
    assert_eq!(synthetic(-2.0, -1.0, -5.0).encode("aba", false, false), [8, 7]);
    // " a" highest → [" a", b, a] → "ba".
    assert_eq!(synthetic(-2.0, -1.0, 0.0).encode("aba", true, true), [1, 8, 7, 2]);
    // llama2.c never takes a merge scoring at or below -1e10.
    assert_eq!(synthetic(-1e10, -1e10, -1e10).encode("aba", false, false), [3, 4, 5, 4]);
    assert_eq!(synthetic(-1e10, -9.9e9, -1e10).encode("aba", false, false), [3, 4, 7]);
}

#[test]
fn small_vocabulary_without_byte_pieces_falls_back_to_unk() {
    let t = synthetic(-1.0, -1.0, -1.0);
    assert_eq!(t.vocab_size(), 9);
    // 'z' would be id 0x7A + 3 = 125, past this vocabulary: <unk> instead.
    assert_eq!(t.encode("z", false, false), [3, 0]);
    assert_eq!(t.encode("é", false, false), [3, 0, 0]);
}

#[test]
fn duplicate_pieces_resolve_to_the_lowest_id() {
    let mut records = CONTROL.to_vec();
    records.extend_from_slice(&[(0.0, b" "), (0.0, b"x"), (5.0, b"x")]);
    let t = Tokenizer::from_bytes(&image(6, &records)).unwrap();
    assert_eq!(t.encode("x", false, false), [3, 4]);
}

#[test]
fn missing_file_is_an_io_error() {
    let e = Tokenizer::open(Path::new("/nonexistent/tokenizer.bin"))
        .err()
        .expect("must fail");
    assert_eq!(e.kind, ErrorKind::Io);
    assert!(e.message.contains("/nonexistent/tokenizer.bin"), "{}", e.message);
}

#[test]
fn malformed_files_are_format_errors() {
    let m = format_error(b"");
    assert!(m.contains("0 bytes, too short"), "{m}");
    let m = format_error(&[1, 0]);
    assert!(m.contains("2 bytes, too short"), "{m}");

    // Header only: zero tokens.
    let m = format_error(&image(8, &[]));
    assert!(m.contains("holds 0 tokens"), "{m}");
    // BOS and EOS need ids 1 and 2.
    let m = format_error(&image(8, &CONTROL[..2]));
    assert!(m.contains("holds 2 tokens"), "{m}");

    let m = format_error(&(-1i32).to_le_bytes());
    assert!(m.contains("max_token_length at byte offset 0 is -1, negative"), "{m}");

    // Truncated inside record 1's 8-byte header (record 0 is 4 + 8 + 5 bytes).
    let mut bytes = image(8, &CONTROL);
    bytes.truncate(4 + 8 + 5 + 6);
    let m = format_error(&bytes);
    assert!(m.contains("record 1 at byte offset 17: truncated: 6 bytes left"), "{m}");

    // Truncated inside record 2's piece: its length now runs past the end.
    let mut bytes = image(8, &CONTROL);
    bytes.pop();
    let m = format_error(&bytes);
    assert!(
        m.contains("record 2 at byte offset 30: piece length 6 runs past the end of the file (5 bytes left)"),
        "{m}"
    );

    let mut bytes = image(8, &CONTROL[..2]);
    raw_record(&mut bytes, 0.0, -3, b"abc");
    let m = format_error(&bytes);
    assert!(
        m.contains("record 2 at byte offset 30: negative piece length -3"),
        "{m}"
    );

    let mut bytes = image(i32::MAX, &CONTROL[..2]);
    raw_record(&mut bytes, 0.0, i32::MAX, b"abc");
    let m = format_error(&bytes);
    assert!(
        m.contains("record 2 at byte offset 30: piece length 2147483647 runs past the end"),
        "{m}"
    );

    let mut bytes = image(8, &CONTROL);
    raw_record(&mut bytes, 0.0, 4, b"ab");
    let m = format_error(&bytes);
    assert!(
        m.contains("record 3 at byte offset 44: piece length 4 runs past the end of the file (2 bytes left)"),
        "{m}"
    );

    let m = format_error(&image(5, &CONTROL));
    assert!(
        m.contains("record 2 at byte offset 30: piece length 6 exceeds max_token_length 5"),
        "{m}"
    );

    let mut records = CONTROL.to_vec();
    records.push((f32::NAN, b"x"));
    let m = format_error(&image(8, &records));
    assert!(
        m.contains("record 3 at byte offset 44: score is NaN, not finite"),
        "{m}"
    );
}

/// Where each record of a well-formed image starts, and where the last ends.
fn record_boundaries(bytes: &[u8]) -> Vec<usize> {
    let mut boundaries = vec![4usize];
    let mut at = 4;
    while at < bytes.len() {
        let len = i32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        at += 8 + len;
        boundaries.push(at);
    }
    boundaries
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the 32000-token reference vocabulary takes too long to load under Miri"
)]
fn every_truncation_of_the_real_file_is_caught() {
    let bytes = real_bytes();
    // Record boundaries tell a clean cut from a torn one.
    let boundaries = record_boundaries(&bytes);
    assert_eq!(boundaries.len() - 1, 32000);
    let cuts = (0..400)
        .chain((400..bytes.len()).step_by(9973))
        .chain(bytes.len() - 40..=bytes.len());
    for cut in cuts {
        let records = boundaries.iter().position(|&b| b == cut);
        match (Tokenizer::from_bytes(&bytes[..cut]), records) {
            (Ok(t), Some(n)) if n >= 3 => assert_eq!(t.vocab_size(), n, "cut at {cut}"),
            (Err(e), Some(n)) if n < 3 => assert!(
                e.message.contains(&format!("holds {n} tokens")),
                "cut at {cut}: {}",
                e.message
            ),
            (Err(e), None) => {
                assert_eq!(e.kind, ErrorKind::Format, "cut at {cut}");
                assert!(
                    e.message.contains("truncated")
                        || e.message.contains("runs past the end")
                        || e.message.contains("too short"),
                    "cut at {cut}: {}",
                    e.message
                );
            }
            (result, records) => panic!(
                "cut at {cut} ({records:?} whole records): {:?}",
                result.map(|t| t.vocab_size())
            ),
        }
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "the 32000-token reference vocabulary takes too long to load under Miri"
)]
fn corrupted_bytes_never_panic() {
    // Flip bytes of the first records with a fixed xorshift; every outcome
    // must be a tokenizer that still round-trips ASCII or a Format error.
    let original = real_bytes();
    // The first 400 records, cut cleanly so that an intact prefix would load.
    let end = record_boundaries(&original)[400];
    assert!(Tokenizer::from_bytes(&original[..end]).is_ok_and(|t| t.vocab_size() == 400));
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut ok, mut rejected) = (0, 0);
    for _ in 0..200 {
        let mut bytes = original[..end].to_vec();
        for _ in 0..3 {
            let at = (next() % bytes.len() as u64) as usize;
            bytes[at] = next() as u8;
        }
        match Tokenizer::from_bytes(&bytes) {
            Ok(t) => {
                ok += 1;
                let ids = t.encode("ok", true, true);
                assert!(ids.iter().all(|&id| (id as usize) < t.vocab_size()), "{ids:?}");
                assert_eq!((ids[0], ids[ids.len() - 1]), (1, 2));
            }
            Err(e) => {
                rejected += 1;
                assert_eq!(e.kind, ErrorKind::Format, "{}", e.message);
            }
        }
    }
    // Both outcomes occur (the generator is fixed), so both arms are exercised.
    assert!(ok > 0 && rejected > 0, "{ok} loaded, {rejected} rejected");
    assert_eq!(ok + rejected, 200);
}

/// Texts of every kind, from a fixed seed: words, runs of one letter,
/// spaces, punctuation, multi-byte and unknown characters.
fn assorted_texts(count: usize, max_chars: usize) -> Vec<String> {
    let alphabet: Vec<char> = "aaabbb  eeeettthhhoooiinnsr.,!?'\n\tAZé日本語🦀\u{0}\u{7f}xyzq0123456789"
        .chars()
        .collect();
    let words = [
        "the", " the", "meaning", " of", " life", "Once", " upon", " a", " time", "ing", "aaaa",
    ];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move |n: usize| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as usize) % n
    };
    (0..count)
        .map(|_| {
            let len = next(max_chars + 1);
            let mut s = String::new();
            while s.chars().count() < len {
                match next(3) {
                    0 => s.push_str(words[next(words.len())]),
                    1 => s.extend(std::iter::repeat_n(alphabet[next(alphabet.len())], next(6) + 1)),
                    _ => s.push(alphabet[next(alphabet.len())]),
                }
            }
            s
        })
        .collect()
}

/// The O(n log n) merging gives exactly the ids of llama2.c's O(n²) loop:
/// on the real vocabulary, and on small ones full of equal scores, where
/// the leftmost-on-ties rule decides (0.0 and -0.0 count as equal).
#[test]
#[cfg_attr(miri, ignore = "the 32000-token vocabulary is slow under Miri")]
fn merging_matches_llama2c_s_quadratic_loop() {
    let reference = |t: &Tokenizer, s: &str| t.encode_quadratic_reference(s, true, false).unwrap();
    for s in assorted_texts(300, 200) {
        assert_eq!(real().encode(&s, true, false), reference(real(), &s), "{s:?}");
    }
    let tied = [
        synthetic(-1.0, -1.0, -1.0),
        synthetic(-0.0, 0.0, -5.0),
        synthetic(0.0, -0.0, 0.0),
        synthetic(-2.0, -1.0, -1.0),
        synthetic(-1e10, -9.9e9, -1e10),
    ];
    for t in &tied {
        for s in ["aba", "abababab", "bbbaaab", " a a a", "aaaa bbbb abab baba"] {
            assert_eq!(t.encode(s, true, false), reference(t, s), "{s:?}");
        }
        for s in assorted_texts(100, 40) {
            let s: String = s.chars().filter(|c| matches!(c, 'a' | 'b' | ' ')).collect();
            assert_eq!(t.encode(&s, true, false), reference(t, &s), "{s:?}");
        }
    }
}
