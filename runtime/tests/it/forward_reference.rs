//! The forward pass against an independent, naive f64 transformer written
//! from the spec (§6): dequantized weights, activations quantized to Q8_0 at
//! the same points as the runtime, GQA with KV head h / (n_heads / n_kv_heads),
//! interleaved RoPE with θ^(−2i/head_dim). Catches wrong head mapping, RoPE
//! convention, cache indexing or norm placement that a golden snapshot of
//! the runtime's own output could not.

use legacy_ml::core::quant::*;
use legacy_ml::core::tensor::{row_pieces, scale, QTensor, WType};
use legacy_ml::model::format::TensorKind;
use legacy_ml::model::gen::GenConfig;
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::{MatrixOrder, Model};

/// Dequantized matrix, row-major.
struct Mat {
    rows: usize,
    cols: usize,
    w: Vec<f64>,
}

/// The model's quants may be packed for the tier (`pack_row_groups`); rows
/// are read back in order with `row_pieces` and `scale`, tested on their
/// own in quant.rs.
fn dequant(t: &QTensor) -> Mat {
    let q: Vec<u8> = (0..t.rows)
        .flat_map(|r| row_pieces(t, r).flat_map(|(_, piece)| piece.iter().copied()))
        .collect();
    let nb = t.cols / QK;
    let d: Vec<f32> = (0..t.rows * nb).map(|i| scale(t, i / nb, i % nb)).collect();
    let mut out = vec![0.0f32; t.rows * t.cols];
    match t.wtype {
        WType::Q8_0 => dequantize_row_q8(legacy_ml::core::aligned::bytes_as_i8(&q), &d, &mut out),
        WType::Q4_0 => dequantize_row_q4(&q, &d, &mut out),
    }
    Mat {
        rows: t.rows,
        cols: t.cols,
        w: out.into_iter().map(f64::from).collect(),
    }
}

/// The runtime quantizes activations before every matvec; so does the
/// reference, or the comparison would measure quantization, not logic.
fn q8(x: &[f64]) -> Vec<f64> {
    let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let (mut q, mut d) = (vec![0i8; xf.len()], vec![0.0f32; xf.len() / QK]);
    quantize_row_q8(&xf, &mut q, &mut d);
    let mut out = vec![0.0f32; xf.len()];
    dequantize_row_q8(&q, &d, &mut out);
    out.into_iter().map(f64::from).collect()
}

fn matvec(m: &Mat, x: &[f64]) -> Vec<f64> {
    (0..m.rows)
        .map(|r| (0..m.cols).map(|c| m.w[r * m.cols + c] * x[c]).sum())
        .collect()
}

fn rmsnorm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    x.iter().zip(w).map(|(v, g)| v / (ms + eps).sqrt() * g).collect()
}

fn reference_logits(model: &Model, tokens: &[u32]) -> Vec<Vec<f64>> {
    let h = *model.header();
    let (dim, hd, nh, nkv) = (
        h.dim as usize,
        h.head_dim() as usize,
        h.n_heads as usize,
        h.n_kv_heads as usize,
    );
    let tensors = &model.layout().tensors;
    let get = |name: &str| {
        tensors
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name}"))
    };
    let mat = |name: &str| dequant(&model.matrix(get(name)).unwrap());
    let vec = |name: &str| -> Vec<f64> {
        assert_eq!(get(name).kind, TensorKind::F32);
        model.vector(get(name)).unwrap().iter().map(|&v| v as f64).collect()
    };
    let emb = mat("tok_emb");
    let wcls = if h.shared_classifier {
        mat("tok_emb")
    } else {
        mat("wcls")
    };
    let mut k_cache: Vec<Vec<Vec<f64>>> = vec![Vec::new(); h.n_layers as usize];
    let mut v_cache = k_cache.clone();
    let mut all = Vec::new();
    for (pos, &tok) in tokens.iter().enumerate() {
        let mut x: Vec<f64> = emb.w[tok as usize * dim..(tok as usize + 1) * dim].to_vec();
        for l in 0..h.n_layers as usize {
            let p = |n: &str| format!("layers.{l}.{n}");
            let xn = q8(&rmsnorm(&x, &vec(&p("attn_norm")), h.norm_eps as f64));
            let mut q = matvec(&mat(&p("wq")), &xn);
            let mut k = matvec(&mat(&p("wk")), &xn);
            let v = matvec(&mat(&p("wv")), &xn);
            for vecs in [&mut q, &mut k] {
                for head in vecs.chunks_mut(hd) {
                    for i in 0..hd / 2 {
                        let angle = pos as f64 * (h.rope_theta as f64).powf(-2.0 * i as f64 / hd as f64);
                        let (a, b) = (head[2 * i], head[2 * i + 1]);
                        head[2 * i] = a * angle.cos() - b * angle.sin();
                        head[2 * i + 1] = a * angle.sin() + b * angle.cos();
                    }
                }
            }
            k_cache[l].push(k);
            v_cache[l].push(v);
            let mut att_out = vec![0.0; dim];
            for head in 0..nh {
                let kvh = head / (nh / nkv);
                let qh = &q[head * hd..(head + 1) * hd];
                let scores: Vec<f64> = (0..=pos)
                    .map(|t| {
                        qh.iter()
                            .zip(&k_cache[l][t][kvh * hd..(kvh + 1) * hd])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                for t in 0..=pos {
                    let p = (scores[t] - m).exp() / z;
                    for i in 0..hd {
                        att_out[head * hd + i] += p * v_cache[l][t][kvh * hd + i];
                    }
                }
            }
            let o = matvec(&mat(&p("wo")), &q8(&att_out));
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let xn = q8(&rmsnorm(&x, &vec(&p("ffn_norm")), h.norm_eps as f64));
            let g = matvec(&mat(&p("w1")), &xn);
            let u = matvec(&mat(&p("w3")), &xn);
            let hidden: Vec<f64> = g.iter().zip(&u).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
            let down = matvec(&mat(&p("w2")), &q8(&hidden));
            x.iter_mut().zip(&down).for_each(|(a, b)| *a += b);
        }
        all.push(matvec(&wcls, &q8(&rmsnorm(&x, &vec("final_norm"), h.norm_eps as f64))));
    }
    all
}

/// Miri interprets every instruction: the tests' models at a smaller size
/// (dim 32, one layer, 16 tokens) there, unchanged elsewhere.
fn small(c: GenConfig) -> GenConfig {
    if !cfg!(miri) {
        return c;
    }
    GenConfig {
        dim: 32,
        n_layers: 1,
        hidden_dim: 32,
        vocab: 16,
        max_seq: 4,
        ..c
    }
}

#[test]
fn forward_matches_an_independent_f64_transformer() {
    legacy_ml::guard::guard();
    // 40 positions: attention runs in tiles of 16, so the last steps span
    // three tiles, a partial one included.
    let tokens: Vec<u32> = (0..40u32).map(|i| (i * 97 + 1) % 251).collect();
    // Miri runs the same three shapes smaller (`small`) for two positions.
    let tokens = if cfg!(miri) { &tokens[..2] } else { &tokens[..] };
    for cfg in [
        GenConfig {
            wtype: WType::Q8_0,
            seed: 3,
            ..GenConfig::default()
        },
        GenConfig {
            wtype: WType::Q4_0,
            seed: 4,
            shared_classifier: true,
            ..GenConfig::default()
        },
        // Multi-query attention: one KV head for all query heads.
        GenConfig {
            n_heads: 8,
            n_kv_heads: 1,
            seed: 5,
            ..GenConfig::default()
        },
    ]
    .map(small)
    {
        let tokens: Vec<u32> = tokens.iter().map(|t| t % cfg.vocab).collect();
        let model = Model::from_bytes(&cfg.to_bytes().unwrap()).unwrap();
        let want = reference_logits(&model, &tokens);
        let mut tf = Transformer::new(&model).unwrap();
        for (pos, &tok) in tokens.iter().enumerate() {
            let got = tf.forward(tok, pos).unwrap();
            let scale = want[pos].iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let worst = got
                .iter()
                .zip(&want[pos])
                .fold(0.0f64, |m, (&g, &w)| m.max((g as f64 - w).abs()));
            // f32 vs f64 accumulation, and activations that quantize a
            // rounding step apart, stay far below 1e-3 of the largest logit.
            assert!(
                worst <= 1e-3 * scale,
                "{cfg:?} pos {pos}: max |Δ| {worst} vs scale {scale}"
            );
        }
    }
}

/// A model read into memory is packed for a tier whose matvec wants it
/// (`kernels::PACKS_ROW_GROUPS`), a mapped one never is, and both decode to
/// bit-identical logits: packing moves bytes, not arithmetic. Both wtypes,
/// with and without a shared classifier (whose embedding rows are then read
/// from the packed table).
#[test]
fn a_read_model_is_packed_for_the_tier_and_decodes_as_the_mapped_one() {
    legacy_ml::guard::guard();
    use legacy_ml::core::file::LoadMode;
    // Miri cannot map a file: there both models are read.
    let cfg = || small(GenConfig::default());
    let dir = std::env::temp_dir().join(format!("legacy-ml-packed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Under Miri, one of the four cases (each runs two models): the shared
    // Q4_0 table, whose embedding rows and classifier are the same tensor.
    let cases: &[(WType, bool)] = if cfg!(miri) {
        &[(WType::Q4_0, true)]
    } else {
        &[
            (WType::Q8_0, false),
            (WType::Q8_0, true),
            (WType::Q4_0, false),
            (WType::Q4_0, true),
        ]
    };
    for &(wtype, shared_classifier) in cases {
        let path = dir.join(format!("{wtype:?}-{shared_classifier}.mlb"));
        let config = GenConfig {
            wtype,
            shared_classifier,
            ..cfg()
        };
        std::fs::write(&path, config.to_bytes().unwrap()).unwrap();
        // Packed wherever the tier reads packed groups, whatever this CPU
        // would choose (`MatrixOrder::Auto`, checked below).
        let read = Model::open_with_order(&path, LoadMode::Read, MatrixOrder::Packed).unwrap();
        let mapped = Model::open_with(&path, LoadMode::Map).unwrap();
        assert_eq!(read.is_packed(), legacy_ml::kernels::PACKS_ROW_GROUPS, "{wtype:?}");
        let auto = Model::open_with(&path, LoadMode::Read).unwrap();
        assert_eq!(
            auto.is_packed(),
            legacy_ml::model::streaming::streaming().pack_row_groups,
            "{wtype:?}"
        );
        let row_major = Model::open_with_order(&path, LoadMode::Read, MatrixOrder::RowMajor).unwrap();
        assert!(!row_major.is_packed(), "{wtype:?}");
        assert!(
            !mapped.is_packed() || !mapped.is_mapped(),
            "{wtype:?}: a mapping was packed"
        );
        let (mut a, mut b) = (Transformer::new(&read).unwrap(), Transformer::new(&mapped).unwrap());
        let vocab = config.vocab;
        for (pos, token) in [1, vocab - 1, 7 % vocab, 0].into_iter().enumerate() {
            let la = a.forward(token, pos).unwrap().to_vec();
            let lb = b.forward(token, pos).unwrap().to_vec();
            let same = la.iter().zip(&lb).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "{wtype:?} shared={shared_classifier} pos {pos}: read and mapped logits differ"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
