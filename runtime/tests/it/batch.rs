//! Batched prompt processing (issue 15): the matmul kernels and the
//! chunked `Transformer::feed` give the very bits of the matvec and of
//! token-by-token decoding.
//!
//! * `matmul_q8`/`matmul_q4` of this build, on each token, bit-identical to
//!   this build's matvec on that token; the scalar reference matmul
//!   bit-identical to the scalar matvec; edge shapes: 1 token, token counts
//!   that no tile divides, rows not a multiple of 4, K = 32, row ranges
//!   starting on a four-row group as the thread pool cuts them.
//! * The logits after a prompt of more than 40 tokens, and at the decode
//!   steps after it, bit-identical (f32 bits) for batches 1, 7 and 64, and
//!   with feature `threads` on 1, 2 and 3 threads; golden-shaped models.
//!
//! Bit-identical, not close: the matmul keeps every output's block sums in
//! the matvec's order (`kernels::scalar`'s contract), so no tier has an
//! exception. Every test calls the CPU guard first.

use legacy_ml::core::quant::QK;
use legacy_ml::core::rng::Rng;
use legacy_ml::core::tensor::{pack_row_groups, pack_scale_groups, QAct, QActs, QTensor, WType};
use legacy_ml::kernels::{self, scalar};
use legacy_ml::model::gen::GenConfig;
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::Model;

type Matvec = fn(&mut [f32], &QTensor, &QAct, usize, usize);
type Matmul = fn(&mut [&mut [f32]], &QTensor, &QActs, usize, usize);

struct Matrix {
    wtype: WType,
    rows: usize,
    cols: usize,
    q: Vec<u8>,
    d: Vec<f32>,
    packed: bool,
}

impl Matrix {
    fn random(rng: &mut Rng, wtype: WType, rows: usize, cols: usize) -> Matrix {
        let bytes = rows * wtype.quant_bytes(cols as u64) as usize;
        let q = (0..bytes)
            .map(|_| match wtype {
                WType::Q8_0 => ((rng.next_u32() % 255) as i32 - 127) as i8 as u8,
                WType::Q4_0 => rng.next_u32() as u8,
            })
            .collect();
        let d = (0..rows * cols / QK).map(|_| rng.symmetric(0.05)).collect();
        Matrix {
            wtype,
            rows,
            cols,
            q,
            d,
            packed: false,
        }
    }

    /// The same matrix in four-row groups (`pack_row_groups`).
    fn packed(&self) -> Matrix {
        let (mut q, mut d) = (self.q.clone(), self.d.clone());
        let row_bytes = self.view().row_bytes();
        pack_row_groups(&mut q, self.rows, row_bytes, &mut Vec::new());
        pack_scale_groups(&mut d, self.rows, self.cols / QK, &mut Vec::new());
        Matrix {
            q,
            d,
            packed: true,
            ..*self
        }
    }

    fn view(&self) -> QTensor<'_> {
        QTensor {
            wtype: self.wtype,
            rows: self.rows,
            cols: self.cols,
            q: &self.q,
            d: &self.d,
            packed: self.packed,
        }
    }
}

/// `n` tokens of `cols` activations, quantized by this build's kernel.
fn activations(rng: &mut Rng, cols: usize, n: usize) -> (Vec<i8>, Vec<f32>) {
    let x: Vec<f32> = (0..cols * n).map(|_| rng.symmetric(2.0)).collect();
    let (mut q, mut d) = (vec![0i8; cols * n], vec![0f32; cols * n / QK]);
    for t in 0..n {
        kernels::quantize_q8(
            &mut q[t * cols..(t + 1) * cols],
            &mut d[t * cols / QK..(t + 1) * cols / QK],
            &x[t * cols..(t + 1) * cols],
        );
    }
    (q, d)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `matmul` over rows r0..r1 against `matvec` per token, bit for bit.
/// Output rows are longer than asked, and what lies past r1 − r0 must
/// stay untouched.
fn check_against_matvec(what: &str, matmul: Matmul, matvec: Matvec, w: &QTensor, x: &QActs, r0: usize, r1: usize) {
    const SENTINEL: f32 = -12345.5;
    let width = r1 - r0 + 3;
    let mut out = vec![SENTINEL; x.n * width];
    let mut ys: Vec<&mut [f32]> = out.chunks_exact_mut(width).collect();
    matmul(&mut ys, w, x, r0, r1);
    for t in 0..x.n {
        let mut want = vec![0f32; r1 - r0];
        matvec(&mut want, w, &x.token(t), r0, r1);
        let got = &out[t * width..(t + 1) * width];
        assert_eq!(
            bits(&got[..r1 - r0]),
            bits(&want),
            "{what}: token {t} of {}, rows {r0}..{r1} of {}x{}",
            x.n,
            w.rows,
            w.cols
        );
        assert!(
            got[r1 - r0..].iter().all(|&v| v == SENTINEL),
            "{what}: wrote past its rows"
        );
    }
}

fn kernels_for(wtype: WType) -> [(&'static str, Matmul, Matvec); 2] {
    match wtype {
        WType::Q8_0 => [
            ("bound matmul_q8", kernels::matmul_q8, kernels::matvec_q8),
            ("scalar matmul_q8", scalar::matmul_q8, scalar::matvec_q8),
        ],
        WType::Q4_0 => [
            ("bound matmul_q4", kernels::matmul_q4, kernels::matvec_q4),
            ("scalar matmul_q4", scalar::matmul_q4, scalar::matvec_q4),
        ],
    }
}

fn check_matmul(wtype: WType, seed: u64) {
    legacy_ml::guard::guard();
    let mut rng = Rng::new(seed);
    let (ks, rows_list, tokens): (&[usize], &[usize], &[usize]) = if cfg!(miri) {
        (&[32, 96], &[5], &[1, 3])
    } else {
        (
            &[32, 64, 96, 128, 160, 224, 576, 4256, 5792],
            &[1, 3, 4, 5, 13, 36],
            &[1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33],
        )
    };
    // K = 4256: one lane group a pass for avx512vnni, and for the 256-bit
    // tiers' Q8_0; 5792: past both lane buffers (Q8_0 back to the tiles).
    // At those widths every edge is still met (a lone row and token, a
    // rest of rows after the four-row groups, tokens short of a lane group,
    // exactly one, and groups with a rest), without the whole cross product
    // that made this test a quarter of an emulated cell's time. The scalar
    // pair is the same loop at every K, so it runs at the narrow ones.
    const WIDE_K: usize = 1024;
    let wide_rows: &[usize] = &[1, 13];
    let wide_tokens: &[usize] = &[1, 7, 8, 9, 16, 17, 33];
    for &k in ks {
        let wide = k > WIDE_K;
        for &rows in if wide { wide_rows } else { rows_list } {
            let m = Matrix::random(&mut rng, wtype, rows, k);
            // More tokens than `--batch` gives (128): kernels that take
            // tokens in passes of at most that many must start another.
            let past_a_pass = (!cfg!(miri) && k == 96 && rows == 5).then_some(130);
            for n in if wide { wide_tokens } else { tokens }
                .iter()
                .copied()
                .chain(past_a_pass)
            {
                let (q, d) = activations(&mut rng, k, n);
                let x = QActs {
                    q: &q,
                    d: &d,
                    cols: k,
                    n,
                };
                // All rows, from a later four-row group (as a thread's
                // share starts), a single row, and none.
                let mut ranges = vec![(0, rows), (rows - 1, rows), (0, 0)];
                if rows > 4 {
                    ranges.push((4, rows));
                }
                let pairs = kernels_for(wtype);
                let pairs = if wide { &pairs[..1] } else { &pairs[..] };
                for (r0, r1) in ranges {
                    for &(what, matmul, matvec) in pairs {
                        check_against_matvec(what, matmul, matvec, &m.view(), &x, r0, r1);
                    }
                }
                if kernels::PACKS_ROW_GROUPS && rows >= 4 {
                    let p = m.packed();
                    let (what, matmul, matvec) = kernels_for(wtype)[0];
                    for (r0, r1) in [(0, rows), (4, rows), (0, 4)] {
                        check_against_matvec(what, matmul, matvec, &p.view(), &x, r0, r1);
                    }
                }
            }
        }
    }
}

#[test]
fn matmul_q8_is_the_matvec_per_token() {
    check_matmul(WType::Q8_0, 151);
}

#[test]
fn matmul_q4_is_the_matvec_per_token() {
    check_matmul(WType::Q4_0, 152);
}

#[test]
fn matmul_refuses_a_token_count_it_was_not_given_rows_for() {
    legacy_ml::guard::guard();
    let mut rng = Rng::new(153);
    let m = Matrix::random(&mut rng, WType::Q8_0, 4, 32);
    let (q, d) = activations(&mut rng, 32, 2);
    let x = QActs {
        q: &q,
        d: &d,
        cols: 32,
        n: 2,
    };
    for matmul in [kernels::matmul_q8 as Matmul, scalar::matmul_q8] {
        let mut one = vec![0f32; 4];
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut ys: Vec<&mut [f32]> = vec![&mut one];
            matmul(&mut ys, &m.view(), &x, 0, 4);
        }));
        assert!(result.is_err(), "one output row for two tokens must panic");
    }
}

// ---------------------------------------------------------------------------
// The transformer

/// The logits after `prompt` and after each of `decode` greedy-free steps
/// (fixed tokens), as f32 bits.
fn run(model: &Model, threads: usize, batch: usize, prompt: &[u32], decode: &[u32]) -> Vec<Vec<u32>> {
    let mut tf = Transformer::with_threads(model, threads).unwrap();
    tf.set_batch(batch).unwrap();
    assert_eq!(tf.batch(), batch);
    let mut out = vec![bits(tf.prefill(prompt).unwrap())];
    for (i, &t) in decode.iter().enumerate() {
        out.push(bits(tf.forward(t, prompt.len() + i).unwrap()));
    }
    out
}

fn models() -> Vec<GenConfig> {
    // The golden models' shapes (tests/it/golden.rs), with room for a
    // prompt of 70 tokens (a whole chunk of 64 and a rest), and an odd one:
    // vocab and K/V rows not multiples of 4, six heads.
    let max_seq = if cfg!(miri) { 12 } else { 80 };
    vec![
        GenConfig {
            seed: 1,
            wtype: WType::Q8_0,
            max_seq,
            ..GenConfig::default()
        },
        GenConfig {
            seed: 2,
            wtype: WType::Q4_0,
            max_seq,
            ..GenConfig::default()
        },
        GenConfig {
            seed: 22,
            wtype: WType::Q4_0,
            vocab: 250,
            dim: 96,
            n_heads: 6,
            n_kv_heads: 3,
            hidden_dim: 160,
            max_seq,
            ..GenConfig::default()
        },
    ]
}

#[test]
fn logits_are_bit_identical_for_every_batch_and_thread_count() {
    legacy_ml::guard::guard();
    let (prompt_len, batches, decode): (u32, &[usize], &[u32]) = if cfg!(miri) {
        (9, &[1, 4], &[3])
    } else {
        (70, &[1, 7, 64, 2, 128], &[5, 77, 200, 1, 9, 31, 64, 128])
    };
    // 3 threads cut a chunk's (position, head) pairs mid-position.
    let threads: &[usize] = if cfg!(feature = "threads") { &[1, 2, 3] } else { &[1] };
    for cfg in models() {
        let model = Model::from_bytes(&cfg.to_bytes().unwrap()).unwrap();
        let prompt: Vec<u32> = (0..prompt_len).map(|i| (i * 37 + 1) % cfg.vocab).collect();
        let want = run(&model, 1, 1, &prompt, decode);
        for &t in threads {
            for &b in batches {
                let got = run(&model, t, b, &prompt, decode);
                for (step, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g == w,
                        "batch {b}, {t} thread(s): step {step} differs from batch 1 ({:?} {})",
                        cfg.wtype,
                        cfg.seed
                    );
                }
            }
        }
    }
}

/// A chat feeds turns after what the cache holds: feeding a prompt in
/// pieces at their positions gives the bits of one prefill.
#[test]
fn feeding_in_pieces_is_one_prefill() {
    legacy_ml::guard::guard();
    let cfg = &models()[0];
    let model = Model::from_bytes(&cfg.to_bytes().unwrap()).unwrap();
    let n = if cfg!(miri) { 9 } else { 45 };
    let prompt: Vec<u32> = (0..n).map(|i| (i * 11 + 3) % cfg.vocab).collect();
    let mut whole = Transformer::new(&model).unwrap();
    let want = bits(whole.prefill(&prompt).unwrap());
    for batch in [1, 7, 16] {
        let mut tf = Transformer::new(&model).unwrap();
        tf.set_batch(batch).unwrap();
        let cuts = [0, 1, n as usize / 3, n as usize - 1, n as usize];
        let mut got = Vec::new();
        for w in cuts.windows(2) {
            got = bits(tf.feed(&prompt[w[0]..w[1]], w[0]).unwrap());
        }
        assert_eq!(got, want, "batch {batch}");
    }
}

#[test]
fn a_batch_outside_1_to_max_is_refused_and_feed_checks_its_tokens() {
    legacy_ml::guard::guard();
    let cfg = &models()[0];
    let model = Model::from_bytes(&cfg.to_bytes().unwrap()).unwrap();
    let mut tf = Transformer::new(&model).unwrap();
    assert_eq!(tf.batch(), 1);
    for bad in [0, legacy_ml::ops::MAX_BATCH + 1] {
        let e = tf.set_batch(bad).unwrap_err();
        assert_eq!(e.kind, legacy_ml::ErrorKind::Shape, "{bad}");
        assert!(e.message.contains("must be 1 to"), "{}", e.message);
    }
    tf.set_batch(8).unwrap();
    let e = tf.feed(&[1, cfg.vocab, 2], 0).unwrap_err();
    assert!(e.message.contains("outside the vocabulary"), "{}", e.message);
    let e = tf.feed(&[1, 2], cfg.max_seq as usize - 1).unwrap_err();
    assert!(e.message.contains("past the end"), "{}", e.message);
    assert!(tf.feed(&[], 0).is_err());
}

// ---------------------------------------------------------------------------
// The command line

/// `ml logits --batch N` prints the same JSON for every N, `ml run` names
/// the time to its first token (and `--no-stats` nothing), and a batch
/// outside 1..=128 is a usage error.
#[test]
fn the_cli_batch_changes_no_logit() {
    use crate::support::ml_command;
    let dir = std::env::temp_dir().join(format!("legacy-ml-batch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("m.mlb").to_string_lossy().into_owned();
    let o = ml_command(&["gen", "--out", &model, "--seed", "5", "--max-seq", "64"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let tokens: Vec<String> = (0..41).map(|i| ((i * 13 + 1) % 256).to_string()).collect();
    let tokens = tokens.join(",");
    let logits = |batch: &str| {
        let o = ml_command(&["logits", &model, "--tokens", &tokens, "-n", "3", "--batch", batch])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    let one = logits("1");
    assert!(one.starts_with(b"{\"tier\""));
    for batch in ["7", "64", "128"] {
        assert!(logits(batch) == one, "--batch {batch} changed the logits");
    }
    for bad in ["0", "129", "x"] {
        let o = ml_command(&["logits", &model, "--tokens", "1", "--batch", bad])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "--batch {bad}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("from 1 to 128"),
            "--batch {bad}"
        );
    }
    let run = |extra: &[&str]| {
        let mut args = vec!["run", model.as_str(), "--tokens", tokens.as_str(), "-n", "4", "-t", "0"];
        args.extend_from_slice(extra);
        let o = ml_command(&args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (text, stats) = run(&[]);
    assert!(stats.contains("first token after"), "{stats}");
    let (same, quiet) = run(&["--no-stats", "--batch", "5"]);
    assert_eq!(same, text);
    assert!(!quiet.contains("first token"), "{quiet}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Batched prompts allocate nothing after `set_batch`: the chunk's buffers
/// were sized then, and each thread's share of a matmul is on the stack.
#[test]
fn a_batched_prompt_allocates_nothing() {
    legacy_ml::guard::guard();
    let cfg = &models()[2];
    let model = Model::from_bytes(&cfg.to_bytes().unwrap()).unwrap();
    let mut tf = Transformer::with_threads(&model, 2).unwrap();
    tf.set_batch(16).unwrap();
    let n = if cfg!(miri) { 9 } else { 40 };
    let prompt: Vec<u32> = (0..n).map(|i| (i * 5 + 2) % cfg.vocab).collect();
    let count = crate::alloc_probe::allocations_during(|| {
        tf.prefill(&prompt).unwrap();
        tf.feed(&prompt[..3], n as usize).unwrap();
    });
    assert_eq!(count, 0, "a batched prefill allocated {count} times");
}
