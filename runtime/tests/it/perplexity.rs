//! `model::perplexity` and `ml perplexity`: the window arithmetic against a
//! logits source computed by hand, the scoring against `forward` run
//! directly, and a pinned perplexity of the in-tree stories260K that every
//! build of the matrix must reproduce; `--batch`: `feed_logits` against
//! `forward` bit for bit, and every scored log-prob the same bits for
//! every batch.

use crate::support::ml_command;
use legacy_ml::core::tensor::WType;
use legacy_ml::model::gen::GenConfig;
use legacy_ml::model::perplexity::{nll, perplexity, Plan, Tally, WindowLogits};
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::Model;
use std::io::Write;
use std::process::Stdio;

fn stories_path() -> std::path::PathBuf {
    // Under qemu the harness points insta at the checkout, as golden.rs reads it.
    let root = match std::env::var_os("INSTA_WORKSPACE_ROOT") {
        Some(root) => std::path::PathBuf::from(root),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    };
    root.join("testdata/stories260K-q8_0.mlb")
}

fn stories() -> Model {
    Model::open(&stories_path()).expect("testdata/stories260K-q8_0.mlb")
}

/// 128 ids of stories260K's own output (`ml run … --tokens 1 -n 255 -s 7`,
/// scalar build, the first 127 after BOS), with BOS (1) at every 32nd.
/// This model (dim 64) is so small that an activation rounded to the other
/// Q8_0 step moves its logits by up to a few 1e-2 of their range, and that
/// happens at different positions on different tiers: on most sequences the
/// x86 tiers' perplexities differ from the scalar one by 0.1–1.5%. On this
/// one, at ctx 32, scalar, avx2 and avx512vnni agree to 1e-7.
const STORIES_IDS: [u32; 128] = [
    1, 306, 463, 283, 452, 465, 465, 466, 473, 473, 460, 341, 341, 341, 264, 264, 283, 339, 303, 397, 369, 302, 397,
    422, 442, 456, 327, 309, 422, 422, 271, 271, 1, 263, 437, 380, 275, 426, 402, 264, 264, 275, 422, 343, 341, 341,
    329, 309, 422, 416, 292, 292, 264, 323, 189, 341, 341, 341, 341, 438, 429, 333, 299, 304, 1, 469, 277, 277, 341,
    341, 341, 438, 294, 436, 330, 408, 417, 429, 304, 304, 422, 288, 152, 264, 303, 283, 465, 57, 465, 465, 465, 465,
    465, 465, 465, 465, 1, 465, 465, 465, 465, 466, 471, 380, 356, 453, 304, 304, 304, 304, 304, 304, 304, 360, 319,
    361, 325, 423, 463, 458, 456, 361, 395, 458, 461, 458, 292, 333,
];

fn stories_ids() -> Vec<u32> {
    STORIES_IDS.to_vec()
}

/// The pinned run: 4 windows of 32 over `STORIES_IDS`, BOS (1) starting
/// each (as the ids already do).
const STORIES_CTX: usize = 32;
const STORIES_BOS: u32 = 1;

/// Recorded by the scalar build on x86-64
/// (`cargo test -p runtime --test it perplexity::pins -- --nocapture`
/// prints it); every tier and target must land within 1e-4 relative.
const STORIES_PPL: f64 = 331.3153865486091;

fn run(source: &mut dyn WindowLogits, tokens: &[u32], ctx: usize, bos: Option<u32>) -> Tally {
    let plan = Plan::new(tokens.len(), ctx, None).unwrap();
    perplexity(source, tokens, plan, bos, &mut |_, _| {}).unwrap()
}

#[test]
fn pins_stories260k_perplexity() {
    legacy_ml::guard::guard();
    let model = stories();
    for batch in [1, 32] {
        let mut tf = Transformer::with_context(&model, 1, STORIES_CTX).unwrap();
        tf.set_batch(batch).unwrap();
        let t = run(&mut tf, &stories_ids(), STORIES_CTX, Some(STORIES_BOS));
        println!(
            "stories260K perplexity, batch {batch}: {:.17e} ({} tokens)",
            t.ppl(),
            t.count
        );
        assert_eq!(t.count, 4 * 15);
        let rel = (t.ppl() - STORIES_PPL).abs() / STORIES_PPL;
        assert!(
            rel <= 1e-4,
            "batch {batch}: perplexity {} vs pinned {STORIES_PPL}: {rel:e} relative",
            t.ppl()
        );
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Generated models for the batch tests: a separate classifier (Q8_0),
/// and a shared one (the embedding table, Q4_0) with a vocabulary and K/V
/// rows that are not multiples of 4.
fn generated() -> Vec<Model> {
    let max_seq = if cfg!(miri) { 12 } else { 80 };
    [
        GenConfig {
            seed: 3,
            wtype: WType::Q8_0,
            max_seq,
            ..GenConfig::default()
        },
        GenConfig {
            seed: 23,
            wtype: WType::Q4_0,
            vocab: 250,
            dim: 96,
            n_heads: 6,
            n_kv_heads: 3,
            hidden_dim: 160,
            max_seq,
            shared_classifier: true,
            ..GenConfig::default()
        },
    ]
    .iter()
    .map(|cfg| Model::from_bytes(&cfg.to_bytes().unwrap()).unwrap())
    .collect()
}

fn thread_counts() -> &'static [usize] {
    if cfg!(feature = "threads") {
        &[1, 2]
    } else {
        &[1]
    }
}

/// `feed_logits` after a prefix fed by `feed` hands over, for each of its
/// positions in order, `forward`'s logits there, bit for bit: at chunk
/// sizes that divide the tokens, that do not, that exceed them, and 1.
#[test]
fn feed_logits_are_forwards_logits_bit_for_bit() {
    legacy_ml::guard::guard();
    let mut models = generated();
    models.push(stories());
    for model in &models {
        let h = *model.header();
        let n = (h.max_seq as usize).min(if cfg!(miri) { 12 } else { 70 });
        let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 37 + 1) % h.vocab).collect();
        let mut tf = Transformer::with_context(model, 1, n).unwrap();
        let want: Vec<Vec<u32>> = (0..n).map(|p| bits(tf.forward(tokens[p], p).unwrap())).collect();
        let prefix = n / 4;
        for &threads in thread_counts() {
            for batch in [1, 2, 7, 16, 64, 128] {
                let mut tf = Transformer::with_context(model, threads, n).unwrap();
                tf.set_batch(batch).unwrap();
                tf.feed(&tokens[..prefix], 0).unwrap();
                let mut got = Vec::new();
                tf.feed_logits(&tokens[prefix..], prefix, &mut |pos, logits| {
                    got.push((pos, bits(logits)))
                })
                .unwrap();
                let positions: Vec<usize> = got.iter().map(|g| g.0).collect();
                assert_eq!(positions, (prefix..n).collect::<Vec<_>>(), "batch {batch}");
                for (pos, row) in got {
                    assert!(
                        row == want[pos],
                        "batch {batch}, {threads} thread(s), vocab {}: position {pos} differs from forward",
                        h.vocab
                    );
                }
                // A second pass over the same positions (the buffer reused)
                // gives the same bits again.
                let mut again = 0;
                tf.feed_logits(&tokens[1..n], 1, &mut |pos, logits| {
                    assert!(
                        bits(logits) == want[pos],
                        "batch {batch}: reused buffer, position {pos}"
                    );
                    again += 1;
                })
                .unwrap();
                assert_eq!(again, n - 1);
                // Checked as `feed` checks: nothing to run, past the end,
                // outside the vocabulary.
                let mut called = false;
                let mut note = |_: usize, _: &[f32]| called = true;
                let e = tf.feed_logits(&[], 0, &mut note).unwrap_err();
                assert!(e.message.contains("no tokens"), "{e}");
                let e = tf.feed_logits(&tokens[..2], n - 1, &mut note).unwrap_err();
                assert!(e.message.contains("past the end"), "{e}");
                let e = tf.feed_logits(&[0, h.vocab], 0, &mut note).unwrap_err();
                assert!(e.message.contains("outside the vocabulary"), "{e}");
                assert!(!called);
            }
        }
    }
}

/// A transformer that records the NLL bits of every scored position.
struct Recording<'a, 'm> {
    tf: &'a mut Transformer<'m>,
    nlls: Vec<(usize, u64)>,
}

impl WindowLogits for Recording<'_, '_> {
    fn vocab(&self) -> usize {
        WindowLogits::vocab(&*self.tf)
    }

    fn window_logits(
        &mut self,
        window: &[u32],
        first: usize,
        each: &mut dyn FnMut(usize, &[f32]),
    ) -> legacy_ml::Result<()> {
        let nlls = &mut self.nlls;
        self.tf.window_logits(window, first, &mut |pos, logits| {
            nlls.push((pos, nll(logits, window[pos + 1]).to_bits()));
            each(pos, logits);
        })
    }
}

/// The tally and every scored log-prob, as bits, for a batch.
fn scored(
    model: &Model,
    threads: usize,
    batch: usize,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
) -> (Tally, Vec<(usize, u64)>) {
    let mut tf = Transformer::with_context(model, threads, ctx).unwrap();
    tf.set_batch(batch).unwrap();
    let mut rec = Recording {
        tf: &mut tf,
        nlls: vec![],
    };
    let t = run(&mut rec, tokens, ctx, bos);
    (t, rec.nlls)
}

#[test]
fn perplexity_is_the_same_bits_for_every_batch() {
    legacy_ml::guard::guard();
    let stories = stories();
    let mut cases: Vec<(&Model, Vec<u32>, usize, Option<u32>)> = vec![
        (&stories, stories_ids(), 32, Some(STORIES_BOS)),
        (&stories, stories_ids(), 64, None),
    ];
    let models = generated();
    for m in &models {
        let h = m.header();
        let ctx = (h.max_seq as usize).min(40);
        let ids = (0..2 * ctx as u32 + 5).map(|i| (i * 53 + 7) % h.vocab).collect();
        cases.push((m, ids, ctx, Some(1)));
    }
    for (model, ids, ctx, bos) in cases {
        let (want, want_nlls) = scored(model, 1, 1, &ids, ctx, bos);
        assert_eq!(want.count, (ctx - ctx / 2 - 1) * (ids.len() / ctx));
        assert_eq!(want_nlls.len(), want.count);
        for &threads in thread_counts() {
            for batch in [1, 7, 32, 64] {
                let (got, nlls) = scored(model, threads, batch, &ids, ctx, bos);
                assert!(
                    nlls == want_nlls,
                    "ctx {ctx}, batch {batch}, {threads} thread(s): a scored log-prob differs from batch 1"
                );
                assert_eq!(
                    (got.count, got.nll.to_bits(), got.nll2.to_bits()),
                    (want.count, want.nll.to_bits(), want.nll2.to_bits()),
                    "ctx {ctx}, batch {batch}, {threads} thread(s)"
                );
                assert_eq!(got.ppl().to_bits(), want.ppl().to_bits());
            }
        }
    }
}

/// After the first call sized the logits rows, scoring a window allocates
/// nothing.
#[test]
fn a_batched_window_allocates_nothing_after_the_first() {
    legacy_ml::guard::guard();
    let models = generated();
    let model = &models[1];
    let ctx = (model.header().max_seq as usize).min(40);
    let window: Vec<u32> = (0..ctx as u32).map(|i| (i * 5 + 2) % model.header().vocab).collect();
    let mut tf = Transformer::with_context(model, 2, ctx).unwrap();
    tf.set_batch(16).unwrap();
    let before = tf.arena_bytes();
    let mut sum = 0.0;
    tf.window_logits(&window, ctx / 2, &mut |_, l| sum += l[0] as f64)
        .unwrap();
    assert!(tf.arena_bytes() >= before + 16 * 250 * 4, "the logits rows are counted");
    let count = crate::alloc_probe::allocations_during(|| {
        tf.window_logits(&window, ctx / 2, &mut |_, l| sum += l[0] as f64)
            .unwrap();
    });
    assert_eq!(count, 0, "a batched window allocated {count} times");
    assert!(sum.is_finite());
}

/// −log softmax the long way: every probability, then the target's.
fn naive_nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let p: Vec<f64> = logits.iter().map(|&l| (l as f64 - max).exp()).collect();
    -(p[target as usize] / p.iter().sum::<f64>()).ln()
}

#[test]
fn scores_the_second_half_of_each_window_as_forward_gives_it() {
    legacy_ml::guard::guard();
    let model = stories();
    let ids = stories_ids();
    // 3 windows of 40 (the tail of 8 is not scored), positions 20..=38
    // predicting 21..=39, each window on a transformer of its own.
    let (ctx, first) = (40, 20);
    let (mut sum, mut count) = (0.0, 0);
    for w in 0..3 {
        let mut window = ids[w * ctx..(w + 1) * ctx].to_vec();
        window[0] = STORIES_BOS;
        let mut tf = Transformer::with_context(&model, 1, ctx).unwrap();
        for pos in 0..ctx - 1 {
            let logits = tf.forward(window[pos], pos).unwrap();
            if pos >= first {
                sum += naive_nll(logits, window[pos + 1]);
                count += 1;
            }
        }
    }
    // One transformer for all windows: each must start afresh at position 0.
    let mut tf = Transformer::with_context(&model, 1, ctx).unwrap();
    let t = run(&mut tf, &ids, ctx, Some(STORIES_BOS));
    assert_eq!((t.count, count), (3 * 19, 3 * 19));
    assert!((t.nll - sum).abs() <= 1e-9 * sum, "{} vs {sum}", t.nll);
    // Without BOS the first tokens of windows 1 and 2 differ, so must the sum.
    let no_bos = run(&mut tf, &ids, ctx, None);
    assert!((no_bos.nll - sum).abs() > 1e-6 * sum);
}

/// A source whose logits are known: at position p, ln 5 for the token
/// after window[p] (mod 4), 0 for the other three, so the next token costs
/// ln(8/5) when it is that one and ln 8 otherwise. Records every window.
struct Fake {
    windows: Vec<Vec<u32>>,
    positions: Vec<usize>,
}

impl WindowLogits for Fake {
    fn vocab(&self) -> usize {
        4
    }

    fn window_logits(
        &mut self,
        window: &[u32],
        first: usize,
        each: &mut dyn FnMut(usize, &[f32]),
    ) -> legacy_ml::Result<()> {
        self.windows.push(window.to_vec());
        for pos in first..window.len() - 1 {
            let mut logits = [0.0f32; 4];
            logits[(window[pos] as usize + 1) % 4] = 5f32.ln();
            self.positions.push(pos);
            each(pos, &logits);
        }
        Ok(())
    }
}

#[test]
fn window_arithmetic_matches_a_hand_computation() {
    // ctx 6: windows [0..6) and [6..12), the tail 12..14 unscored; first =
    // 3, so positions 3 and 4 predict tokens 4 and 5 of each window.
    let tokens = [0, 1, 2, 3, 0, 2, 3, 3, 3, 0, 1, 0, 1, 2];
    let mut fake = Fake {
        windows: vec![],
        positions: vec![],
    };
    let plan = Plan::new(tokens.len(), 6, None).unwrap();
    assert_eq!(
        plan,
        Plan {
            ctx: 6,
            windows: 2,
            first: 3
        }
    );
    assert_eq!(plan.scored_per_window(), 2);
    let mut running = vec![];
    let t = perplexity(&mut fake, &tokens, plan, Some(2), &mut |w, t| {
        running.push((w, t.count))
    })
    .unwrap();
    assert_eq!(fake.windows, [vec![2, 1, 2, 3, 0, 2], vec![2, 3, 3, 0, 1, 0]]);
    assert_eq!(fake.positions, [3, 4, 3, 4]);
    assert_eq!(running, [(0, 2), (1, 4)]);
    // (ln 5 is an f32 in the logits: 1e-6 covers its rounding.)
    // Window 0: 3→0 hit, 0→2 miss; window 1: 0→1 hit, 1→0 miss.
    let (hit, miss) = ((8.0f64 / 5.0).ln(), 8.0f64.ln());
    assert_eq!(t.count, 4);
    assert!((t.nll - 2.0 * (hit + miss)).abs() < 1e-6, "{}", t.nll);
    assert!((t.nll2 - 2.0 * (hit * hit + miss * miss)).abs() < 1e-6);
    let mean = (hit + miss) / 2.0;
    assert!((t.ppl() - mean.exp()).abs() < 1e-6);
    // Population variance (hit−miss)²/4 over n − 1 = 3.
    let se = ((hit - miss).powi(2) / 4.0 / 3.0).sqrt();
    assert!((t.nll_stderr().unwrap() - se).abs() < 1e-6);
    assert!((t.ppl_stderr().unwrap() - se * mean.exp()).abs() < 1e-6);
}

#[test]
fn tally_uncertainty_is_the_standard_error_of_the_mean() {
    let mut t = Tally::default();
    assert_eq!(t.nll_stderr(), None);
    for v in [1.0, 2.0, 3.0, 4.0] {
        t.add(v);
    }
    // mean 2.5, population variance 1.25, over n − 1 = 3.
    assert_eq!(t.mean_nll(), 2.5);
    assert!((t.nll_stderr().unwrap() - (1.25f64 / 3.0).sqrt()).abs() < 1e-15);
    assert!((t.ppl_stderr().unwrap() - (1.25f64 / 3.0).sqrt() * 2.5f64.exp()).abs() < 1e-12);
    let mut same = Tally::default();
    same.add(0.5);
    same.add(0.5);
    assert_eq!(same.nll_stderr(), None);
}

#[test]
fn log_softmax_subtracts_the_maximum() {
    assert!((nll(&[0.0, 3f32.ln()], 1) - (4.0f64 / 3.0).ln()).abs() < 1e-7);
    // exp(1000) overflows; after the maximum is taken out it is 1.
    assert!((nll(&[1000.0, 1000.0], 0) - 2f64.ln()).abs() < 1e-12);
    assert!((nll(&[-1000.0, 0.0, -1000.0], 1)).abs() < 1e-12);
}

#[test]
fn plan_needs_two_windows_and_honours_chunks() {
    assert!(Plan::new(127, 64, None).is_err());
    assert!(Plan::new(100, 3, None).is_err());
    assert_eq!(Plan::new(128, 64, None).unwrap().windows, 2);
    assert_eq!(Plan::new(1000, 64, None).unwrap().windows, 15);
    assert_eq!(Plan::new(1000, 64, Some(4)).unwrap().windows, 4);
    assert_eq!(Plan::new(1000, 64, Some(40)).unwrap().windows, 15);
    assert_eq!(Plan::new(1000, 7, None).unwrap().first, 3);
}

#[test]
fn out_of_vocabulary_ids_are_an_error() {
    let mut fake = Fake {
        windows: vec![],
        positions: vec![],
    };
    let plan = Plan::new(8, 4, None).unwrap();
    let e = perplexity(&mut fake, &[0, 1, 2, 3, 4, 0, 1, 2], plan, None, &mut |_, _| {}).unwrap_err();
    assert!(e.message.contains("token id 4"), "{e}");
    assert!(fake.windows.is_empty());
}

#[test]
fn cli_json_matches_the_library() {
    let ids = stories_ids();
    let text: Vec<String> = ids.iter().map(|t| t.to_string()).collect();
    let model_path = stories_path();
    let mut child = ml_command(&[
        "perplexity",
        model_path.to_str().unwrap(),
        "-f",
        "-",
        "--ctx",
        "32",
        "--chunks",
        "3",
        "--json",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.join(" ").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Token ids from a file are scored as given: no BOS.
    let model = stories();
    let mut tf = Transformer::with_context(&model, 1, 32).unwrap();
    let plan = Plan::new(ids.len(), 32, Some(3)).unwrap();
    let t = perplexity(&mut tf, &ids, plan, None, &mut |_, _| {}).unwrap();
    assert_eq!(v["windows"], 3);
    assert_eq!(v["scored"], 3 * 15);
    assert_eq!(v["tokens"], 128);
    assert_eq!(v["running_ppl"].as_array().unwrap().len(), 3);
    let ppl = v["ppl"].as_f64().unwrap();
    assert!((ppl - t.ppl()).abs() <= 1e-12 * ppl, "{ppl} vs {}", t.ppl());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[3/3]"), "{stderr}");
}

/// `ml perplexity` with the stories ids on stdin and `extra` arguments.
fn cli(extra: &[&str]) -> std::process::Output {
    let text: Vec<String> = stories_ids().iter().map(|t| t.to_string()).collect();
    let model_path = stories_path();
    let mut args = vec!["perplexity", model_path.to_str().unwrap(), "-f", "-", "--ctx", "64"];
    args.extend_from_slice(extra);
    let mut child = ml_command(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A refused argument ends the process before it reads stdin, so the
    // write may meet a closed pipe; the exit status tells the outcome.
    let _ = child.stdin.take().unwrap().write_all(text.join(" ").as_bytes());
    child.wait_with_output().unwrap()
}

#[test]
fn cli_batch_changes_no_number_and_refuses_a_bad_batch() {
    let json = |batch: &str| {
        let out = cli(&["--json", "--batch", batch]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["batch"].to_string(), batch);
        v
    };
    let one = json("1");
    assert_eq!(one["scored"], 2 * 31);
    for batch in ["7", "32", "128"] {
        let v = json(batch);
        for key in ["scored", "nll", "nll_stderr", "ppl", "ppl_stderr", "running_ppl"] {
            assert_eq!(v[key], one[key], "--batch {batch}: {key}");
        }
    }
    // The default batch is the other commands' default, and the text line
    // up to its timing is the same as at batch 1.
    let default = cli(&[]);
    let single = cli(&["--batch", "1"]);
    assert!(default.status.success() && single.status.success());
    let stderr = String::from_utf8_lossy(&default.stderr);
    assert!(stderr.contains("batch 32,"), "{stderr}");
    let upto_time = |o: &std::process::Output| {
        let s = String::from_utf8_lossy(&o.stdout).into_owned();
        s[..s.rfind(';').unwrap()].to_string()
    };
    assert_eq!(upto_time(&default), upto_time(&single));
    for bad in ["0", "1000", "x"] {
        let out = cli(&["--batch", bad]);
        assert_eq!(out.status.code(), Some(2), "--batch {bad}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("from 1 to 128"), "--batch {bad}: {stderr}");
    }
}
