//! Every loader validation rule, each rejected with the right error kind and
//! a message naming the field. The files are built by mutating a valid model.

use legacy_ml::core::file::LoadMode;
use legacy_ml::core::tensor::WType;
use legacy_ml::model::format::{Header, Layout, HEADER_BYTES};
use legacy_ml::model::gen::GenConfig;
use legacy_ml::model::Model;
use legacy_ml::ErrorKind;

/// The model the tests mutate: the default one, or under Miri (which
/// interprets every instruction) a smaller one with the same rules to break.
fn cfg() -> GenConfig {
    if cfg!(miri) {
        GenConfig {
            dim: 32,
            n_layers: 1,
            hidden_dim: 32,
            vocab: 16,
            max_seq: 8,
            ..GenConfig::default()
        }
    } else {
        GenConfig::default()
    }
}

fn valid() -> Vec<u8> {
    static VALID: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    VALID.get_or_init(|| cfg().to_bytes().expect("generate model")).clone()
}

/// Sets header u32 word `i` (0 = magic, 1 = version, 2 = dim, ...).
fn set_word(bytes: &mut [u8], i: usize, v: u32) {
    bytes[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
}

#[track_caller]
fn rejects(bytes: &[u8], kind: ErrorKind, needle: &str) {
    match Model::from_bytes(bytes) {
        Ok(_) => panic!("accepted a file that should fail with {kind:?} ({needle})"),
        Err(e) => {
            assert_eq!(e.kind, kind, "wrong kind for: {}", e.message);
            assert!(
                e.message.contains(needle),
                "message {:?} does not name {needle:?}",
                e.message
            );
        }
    }
}

#[test]
fn accepts_the_generated_model_and_its_layout_is_exact() {
    let bytes = valid();
    let model = Model::from_bytes(&bytes).expect("valid model");
    let layout = model.layout();
    assert_eq!(layout.file_bytes, bytes.len());
    let h = cfg().header();
    // tok_emb; 9 per layer; final_norm; wcls.
    assert_eq!(layout.tensors.len(), 1 + 9 * h.n_layers as usize + 2);
    for t in &layout.tensors {
        assert_eq!(t.q_offset % 64, 0, "{}", t.name);
        assert_eq!(t.d_offset % 64, 0, "{}", t.name);
    }
    assert_eq!(layout.tensors[0].q_offset, HEADER_BYTES);
}

#[test]
fn layout_of_a_shared_classifier_has_no_wcls() {
    let h = Header {
        shared_classifier: true,
        ..cfg().header()
    };
    let layout = Layout::from_header(h).unwrap();
    assert!(layout.tensors.iter().all(|t| t.name != "wcls"));
    assert_eq!(layout.tensors.last().unwrap().name, "final_norm");
}

#[test]
fn rejects_short_file() {
    rejects(&valid()[..100], ErrorKind::Format, "shorter than the 256-byte");
    rejects(&[], ErrorKind::Format, "shorter than the 256-byte");
}

#[test]
fn rejects_truncated_file() {
    let bytes = valid();
    rejects(&bytes[..bytes.len() - 1], ErrorKind::Format, "truncated");
    rejects(&bytes[..HEADER_BYTES + 10], ErrorKind::Format, "tok_emb");
}

#[test]
fn rejects_trailing_bytes() {
    let mut bytes = valid();
    bytes.extend_from_slice(&[0; 3]);
    rejects(&bytes, ErrorKind::Format, "3 unexplained trailing bytes");
}

#[test]
fn rejects_bad_magic() {
    let mut bytes = valid();
    bytes[0] ^= 0x01;
    rejects(&bytes, ErrorKind::Format, "magic");
}

#[test]
fn rejects_unknown_version() {
    let mut bytes = valid();
    set_word(&mut bytes, 1, 2);
    rejects(&bytes, ErrorKind::Format, "version is 2");
}

#[test]
fn rejects_each_zero_dimension() {
    for (word, name) in [
        (2, "dim"),
        (3, "n_layers"),
        (4, "n_heads"),
        (5, "n_kv_heads"),
        (6, "hidden_dim"),
        (7, "vocab"),
        (8, "max_seq"),
    ] {
        let mut bytes = valid();
        set_word(&mut bytes, word, 0);
        rejects(&bytes, ErrorKind::Format, &format!("{name} is 0"));
    }
}

#[test]
fn rejects_dimensions_whose_product_overflows() {
    let mut bytes = valid();
    // dim × vocab ≈ 2^64: must not wrap into a small, plausible size.
    set_word(&mut bytes, 2, 0xFFFF_FFE0);
    set_word(&mut bytes, 4, 0x7FFF_FFF0);
    set_word(&mut bytes, 5, 0x7FFF_FFF0);
    set_word(&mut bytes, 7, u32::MAX);
    rejects(&bytes, ErrorKind::Format, "overflows");
}

#[test]
fn rejects_dimensions_larger_than_the_file() {
    let mut bytes = valid();
    // 2^20 × 64 bytes: addressable even on 32-bit targets, so this is the
    // length check speaking, not the overflow check.
    set_word(&mut bytes, 7, 1 << 20);
    rejects(&bytes, ErrorKind::Format, "truncated");
}

#[test]
fn rejects_k_not_a_multiple_of_32() {
    let mut bytes = valid();
    set_word(&mut bytes, 6, 100); // hidden_dim: the K of w2
    rejects(&bytes, ErrorKind::Shape, "hidden_dim 100 is not a multiple of 32");
    let mut bytes = valid();
    set_word(&mut bytes, 2, 48); // dim 48, 4 heads of 12
    rejects(&bytes, ErrorKind::Shape, "dim 48 is not a multiple of 32");
}

#[test]
fn rejects_heads_that_do_not_group() {
    let mut bytes = valid();
    set_word(&mut bytes, 5, 3); // 4 heads, 3 KV heads
    rejects(&bytes, ErrorKind::Shape, "n_heads 4 is not a multiple of n_kv_heads 3");
}

#[test]
fn rejects_dim_not_divisible_by_heads() {
    let mut bytes = valid();
    set_word(&mut bytes, 4, 6);
    set_word(&mut bytes, 5, 6);
    let dim = cfg().dim;
    rejects(
        &bytes,
        ErrorKind::Shape,
        &format!("dim {dim} is not a multiple of n_heads 6"),
    );
}

#[test]
fn rejects_odd_head_dim() {
    let mut bytes = valid();
    set_word(&mut bytes, 2, 96);
    set_word(&mut bytes, 4, 32);
    set_word(&mut bytes, 5, 32);
    rejects(&bytes, ErrorKind::Shape, "head_dim 3");
}

#[test]
fn rejects_unknown_wtype() {
    let mut bytes = valid();
    set_word(&mut bytes, 11, 5);
    rejects(&bytes, ErrorKind::Format, "wtype is 5");
}

#[test]
fn rejects_bad_shared_classifier_flag() {
    let mut bytes = valid();
    set_word(&mut bytes, 12, 7);
    rejects(&bytes, ErrorKind::Format, "shared_classifier is 7");
}

#[test]
fn rejects_non_finite_rope_theta_and_eps() {
    let mut bytes = valid();
    set_word(&mut bytes, 9, f32::NAN.to_bits());
    rejects(&bytes, ErrorKind::Format, "rope_theta");
    let mut bytes = valid();
    set_word(&mut bytes, 10, (-1.0f32).to_bits());
    rejects(&bytes, ErrorKind::Format, "norm_eps");
}

#[test]
fn rejects_nonzero_header_padding() {
    for offset in [52, 200, 255] {
        let mut bytes = valid();
        bytes[offset] = 1;
        rejects(&bytes, ErrorKind::Format, &format!("offset {offset}"));
    }
}

#[test]
fn rejects_nonzero_padding_between_arrays() {
    // One row more (257 for the default model) makes tok_emb's scale array
    // end off a 64-byte boundary.
    let bytes = GenConfig {
        vocab: cfg().vocab + 1,
        ..cfg()
    }
    .to_bytes()
    .unwrap();
    let layout = Model::from_bytes(&bytes).expect("valid").layout().clone();
    let tok_emb = &layout.tensors[0];
    let gap = tok_emb.d_offset + tok_emb.d_bytes;
    assert!(layout.tensors[1].q_offset > gap, "the layout pads after tok_emb");
    let mut bytes = bytes;
    bytes[gap] = 0xAA;
    rejects(&bytes, ErrorKind::Format, "padding byte");
}

#[test]
fn rejects_non_finite_scale() {
    let bytes = valid();
    let layout = Model::from_bytes(&bytes).unwrap().layout().clone();
    let name = format!("layers.{}.wq", cfg().n_layers - 1);
    let wq = layout.tensors.iter().find(|t| t.name == name).unwrap();
    let mut bytes = bytes;
    bytes[wq.d_offset + 8..wq.d_offset + 12].copy_from_slice(&f32::INFINITY.to_le_bytes());
    rejects(&bytes, ErrorKind::Format, &format!("{name} scale #2"));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "Miri stops at an allocation it cannot make instead of returning null"
)]
fn rejects_context_too_large_to_allocate() {
    // The file is valid, but its KV cache (max_seq × layers × kv_dim × 8
    // bytes ≈ 2^40) cannot be allocated: NoMem, not an abort or OOM kill.
    let cfg = GenConfig {
        max_seq: u32::MAX,
        ..GenConfig::default()
    };
    let model = Model::from_bytes(&cfg.to_bytes().unwrap()).expect("weights are fine");
    match legacy_ml::model::transformer::Transformer::new(&model) {
        Ok(_) => panic!("allocated a terabyte-sized KV cache"),
        Err(e) => assert_eq!(e.kind, ErrorKind::NoMem, "{}", e.message),
    }
}

#[test]
fn open_reports_missing_file_as_io() {
    match Model::open(std::path::Path::new("/nonexistent/model.mlb")) {
        Ok(_) => panic!("opened a missing file"),
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::Io);
            assert!(e.message.contains("/nonexistent/model.mlb"), "{}", e.message);
        }
    }
}

#[test]
fn open_reads_or_maps_a_file_and_agrees_with_memory() {
    let dir = std::env::temp_dir().join(format!("legacy-ml-loader-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.mlb");
    let bytes = GenConfig {
        wtype: WType::Q4_0,
        ..cfg()
    }
    .to_bytes()
    .unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let from_mem = Model::from_bytes(&bytes).unwrap();
    for mode in [LoadMode::Auto, LoadMode::Read, LoadMode::Map] {
        let from_file = Model::open_with(&path, mode).expect("open");
        assert_eq!(from_file.layout().tensors, from_mem.layout().tensors, "{mode:?}");
        assert_eq!(from_file.header(), from_mem.header(), "{mode:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gen_is_byte_identical_for_a_seed() {
    let a = valid();
    let b = cfg().to_bytes().unwrap();
    let c = GenConfig {
        seed: cfg().seed + 1,
        ..cfg()
    }
    .to_bytes()
    .unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn rejects_q8_quant_of_minus_128() {
    let bytes = valid();
    let layout = Model::from_bytes(&bytes).unwrap().layout().clone();
    let w2 = layout.tensors.iter().find(|t| t.name == "layers.0.w2").unwrap();
    let mut bytes = bytes;
    bytes[w2.q_offset + 5] = 0x80;
    rejects(&bytes, ErrorKind::Format, "layers.0.w2 quant #5 is -128");
}
