//! Regressions found by the cargo-fuzz targets (fuzz/README.md), each pinned
//! with the error kind and message it must give. The resource bugs (a small
//! input making the library allocate by what a header claims) are also pinned
//! by the largest single allocation the operation may make, measured with the
//! tracking global allocator (`alloc_probe`) armed on the test's own thread.

use crate::alloc_probe::largest_allocation;
use legacy_ml::core::tensor::WType;
use legacy_ml::model::format::{implied_file_bytes, Header, Layout};
use legacy_ml::model::gen::GenConfig;
use legacy_ml::model::sampler::Sampler;
use legacy_ml::model::tokenizer::Tokenizer;
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::Model;
use legacy_ml::ErrorKind;

/// The fuzz seeds' smallest model: dim 32, one layer, 2 heads, 1 KV head.
fn tiny(wtype: WType) -> GenConfig {
    GenConfig {
        dim: 32,
        n_layers: 1,
        n_heads: 2,
        n_kv_heads: 1,
        hidden_dim: 32,
        vocab: 32,
        max_seq: 8,
        wtype,
        ..GenConfig::default()
    }
}

fn set_word(bytes: &mut [u8], i: usize, v: u32) {
    bytes[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn the_tracker_sees_a_large_allocation() {
    let (largest, v) = largest_allocation(|| std::hint::black_box(Vec::<u8>::with_capacity(1 << 20)));
    assert_eq!(v.capacity(), 1 << 20);
    assert!(
        largest >= 1 << 20,
        "the tracker saw {largest} bytes; the tests below would prove nothing"
    );
}

/// mlb_loader: a 9856-byte file whose header claims 2^20 layers made the
/// loader list all 9.4 million tensors (1.5 GB, seconds) before comparing
/// the file's length with the header's. The length now comes first, in
/// O(1), and naming the incomplete tensor walks only as far as the file.
#[test]
fn a_header_claiming_a_million_layers_costs_no_more_than_its_file() {
    let mut bytes = tiny(WType::Q8_0).to_bytes().unwrap();
    assert_eq!(bytes.len(), 9856);
    set_word(&mut bytes, 3, 1 << 20);
    let header = Header::parse(&bytes).unwrap();
    let implied = implied_file_bytes(&header).unwrap();
    let (largest, result) = largest_allocation(|| Model::from_bytes(&bytes).err());
    let e = result.expect("a truncated file must be refused");
    assert_eq!(e.kind, ErrorKind::Format);
    assert_eq!(
        e.message,
        format!(
            "file is 9856 bytes but the header describes {implied} bytes: truncated (tensor layers.1.wk is incomplete)"
        )
    );
    // The copy of the file into aligned storage is the largest allocation.
    assert!(
        largest <= bytes.len(),
        "refusing a {} byte file allocated {largest} bytes at once",
        bytes.len()
    );
    // One more layer than the limit is refused from the header alone.
    set_word(&mut bytes, 3, (1 << 20) + 1);
    let e = Model::from_bytes(&bytes).err().unwrap();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::Format, "n_layers 1048577 is implausibly large")
    );
}

/// The O(1) length the loader now checks first is exactly the layout's.
#[test]
fn implied_file_bytes_is_the_layouts_length() {
    for wtype in [WType::Q8_0, WType::Q4_0] {
        for shared_classifier in [false, true] {
            for (n_layers, n_heads, n_kv_heads, dim, hidden_dim) in [
                (1, 2, 1, 32, 32),
                (2, 4, 2, 64, 128),
                (3, 1, 1, 32, 96),
                (5, 8, 8, 256, 32),
            ] {
                let cfg = GenConfig {
                    dim,
                    n_layers,
                    n_heads,
                    n_kv_heads,
                    hidden_dim,
                    vocab: 17,
                    wtype,
                    shared_classifier,
                    ..GenConfig::default()
                };
                let h = cfg.header();
                let layout = Layout::from_header(h).unwrap();
                assert_eq!(implied_file_bytes(&h).unwrap(), layout.file_bytes as u64, "{cfg:?}");
                assert_eq!(cfg.to_bytes().unwrap().len(), layout.file_bytes, "{cfg:?}");
            }
        }
    }
}

#[test]
fn implied_file_bytes_names_what_overflows() {
    let base = tiny(WType::Q8_0).header();
    // One weight matrix of about 2^64 elements.
    let h = Header {
        dim: 0xFFFF_FFE0,
        n_heads: 16,
        n_kv_heads: 16,
        vocab: 1,
        ..base
    };
    let e = implied_file_bytes(&h).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(
        e.message
            .starts_with("tensor layers.0.wq: size of 4294967264 x 4294967264 overflows"),
        "{}",
        e.message
    );
    // Each layer fits in 64 bits, 2^20 of them do not.
    let h = Header {
        dim: 1 << 24,
        n_heads: 1 << 10,
        n_kv_heads: 1 << 10,
        n_layers: 1 << 20,
        vocab: 1,
        ..base
    };
    let e = implied_file_bytes(&h).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Format);
    assert!(e.message.starts_with("n_layers 1048576 x "), "{}", e.message);
    assert!(
        e.message
            .ends_with(" bytes per layer overflows; the header's dimensions are corrupt"),
        "{}",
        e.message
    );
}

/// mlb_loader: finite but huge scales (the fuzzer's was in wcls of a Q4_0
/// model) overflow f32 in the forward pass; `forward` returned Ok with
/// -inf logits. It is now a Format error naming the logit.
#[test]
fn logits_that_overflow_f32_are_a_format_error() {
    legacy_ml::guard::guard();
    for wtype in [WType::Q8_0, WType::Q4_0] {
        let mut bytes = tiny(wtype).to_bytes().unwrap();
        let layout = Layout::from_header(tiny(wtype).header()).unwrap();
        let wcls = layout.tensors.iter().find(|t| t.name == "wcls").unwrap();
        // Row 0's scales (dim 32: one block) become the largest finite f32.
        bytes[wcls.d_offset..wcls.d_offset + 4].copy_from_slice(&f32::MAX.to_le_bytes());
        let model = Model::from_bytes(&bytes).expect("finite scales are valid");
        let mut tf = Transformer::with_threads(&model, 1).unwrap();
        let e = tf.forward(1, 0).expect_err("non-finite logits must be an error");
        assert_eq!(e.kind, ErrorKind::Format, "{}", e.message);
        assert!(e.message.starts_with("logit 0 is "), "{}", e.message);
        assert!(
            e.message
                .ends_with("at position 0: the model's weights overflow f32 (corrupt or badly scaled tensor values)"),
            "{}",
            e.message
        );
        // The untouched model decodes finite logits at the same place.
        let good = Model::from_bytes(&tiny(wtype).to_bytes().unwrap()).unwrap();
        let mut tf = Transformer::with_threads(&good, 1).unwrap();
        assert!(tf.forward(1, 0).unwrap().iter().all(|v| v.is_finite()));
    }
}

/// A llama2.c tokenizer.bin: `max_token_length`, then (score, piece) records.
fn tokenizer_bin(max_token_length: i32, pieces: &[(f32, &str)]) -> Vec<u8> {
    let mut out = max_token_length.to_le_bytes().to_vec();
    for (score, piece) in pieces {
        out.extend_from_slice(&score.to_le_bytes());
        out.extend_from_slice(&(piece.len() as i32).to_le_bytes());
        out.extend_from_slice(piece.as_bytes());
    }
    out
}

/// tokenizer_llama2c: `encode` sized a buffer as 2 × the header's
/// max_token_length. A file claiming 2^31 - 1 made every encode ask for
/// 4 GiB (a capacity-overflow panic on 32-bit targets). Buffers are now
/// sized by the longest piece the file really holds.
#[test]
fn a_tokenizer_claiming_huge_pieces_sizes_buffers_by_the_pieces_it_has() {
    let pieces = [
        (0.0, "<unk>"),
        (0.0, "\n<s>\n"),
        (0.0, "\n</s>\n"),
        (0.0, " "),
        (0.0, "a"),
        (0.0, "b"),
        (1.0, "ab"),
        (2.0, " ab"),
    ];
    let file = tokenizer_bin(i32::MAX, &pieces);
    let (largest, (ids, text)) = largest_allocation(|| {
        let tok = Tokenizer::from_bytes(&file).expect("a valid tokenizer.bin");
        let ids = tok.encode("ab", true, false);
        let text = tok.decode(&ids);
        (ids, text)
    });
    assert_eq!(ids, vec![1, 7], "BOS, then ' ' + 'a' + 'b' merged into ' ab'");
    assert_eq!(text, b"ab");
    assert!(
        largest < 4096,
        "encoding 2 characters allocated {largest} bytes at once"
    );
    // The same vocabulary with an honest header encodes the same way.
    let honest = Tokenizer::from_bytes(&tokenizer_bin(6, &pieces)).unwrap();
    assert_eq!(honest.encode("ab", true, false), vec![1, 7]);
}

/// sampler: no logits had no valid id, yet `sample` returned 0. It is now a
/// Shape error.
#[test]
fn sampling_no_logits_is_a_shape_error() {
    for (temperature, top_p) in [(0.0, 0.9), (1.0, 1.0), (0.8, 0.5)] {
        let mut s = Sampler::new(0, temperature, top_p, 1);
        let e = s.sample(&mut []).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Shape);
        assert_eq!(e.message, "no logits to sample from (a vocabulary of 0 tokens)");
    }
}

/// sampler: with a flat distribution and a small top-p, the pre-filter
/// ((1 - p) / (n - 1)) dropped every token and the draw fell through to the
/// last id, outside the nucleus (which is the first token alone). Found
/// while writing the sampler target, which now checks it (all-equal mode).
#[test]
fn top_p_on_a_flat_distribution_keeps_the_first_token() {
    for seed in 0..64 {
        let mut s = Sampler::new(2, 1.0, 0.01, seed);
        assert_eq!(s.sample(&mut [0.0, 0.0]), Ok(0), "seed {seed}");
        let mut s = Sampler::new(3, 1.0, 0.3, seed);
        assert_eq!(s.sample(&mut [5.0; 3]), Ok(0), "seed {seed}");
    }
    // A nucleus wider than one token still draws from all of it.
    let mut s = Sampler::new(2, 1.0, 0.6, 9);
    let ones = (0..400).filter(|_| s.sample(&mut [0.0, 0.0]) == Ok(1)).count();
    assert!((100..300).contains(&ones), "token 1 drawn {ones} times of 400");
}
