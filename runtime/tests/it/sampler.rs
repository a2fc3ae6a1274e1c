//! The sampler: greedy is argmax, a seed reproduces a run, top-p narrows.

use legacy_ml::core::rng::Rng;
use legacy_ml::model::sampler::{argmax, Sampler};

/// Draws per case. Miri interprets every instruction, so it checks the same
/// properties on fewer draws (the statistical bounds below widen to match).
const DRAWS: usize = if cfg!(miri) { 400 } else { 20000 };

fn logits(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.symmetric(4.0)).collect()
}

fn draw(temp: f32, top_p: f32, seed: u64, rounds: usize) -> Vec<u32> {
    let mut s = Sampler::new(100, temp, top_p, seed);
    (0..rounds)
        .map(|r| s.sample(&mut logits(r as u64, 100)).unwrap())
        .collect()
}

#[test]
fn greedy_is_argmax_with_lowest_index_on_ties() {
    let mut s = Sampler::new(4, 0.0, 0.9, 1);
    assert_eq!(s.sample(&mut [0.1, 3.0, -2.0, 3.0]), Ok(1));
    assert_eq!(argmax(&[f32::NAN, 1.0, 2.0]), 2);
    assert_eq!(argmax(&[1.0, f32::NAN, 0.5]), 0);
    assert_eq!(argmax(&[7.0; 5]), 0);
    assert_eq!(argmax(&[f32::NEG_INFINITY, f32::INFINITY]), 1);
}

/// The plain definition `argmax` must agree with: the first value above
/// all before it, a NaN best giving way to any number.
fn argmax_reference(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] || logits[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best as u32
}

#[test]
fn argmax_agrees_with_its_definition_on_every_kind_of_input() {
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        f32::MAX,
        -f32::MAX,
    ];
    let mut rng = Rng::new(11);
    let lengths: &[usize] = if cfg!(miri) {
        &[1, 17, 40]
    } else {
        &[1, 2, 15, 16, 17, 31, 32, 33, 100, 32000]
    };
    for &n in lengths {
        for case in 0..if cfg!(miri) { 4 } else { 60 } {
            // Few distinct values, so ties and specials land anywhere,
            // the maximum in the tail or the first lanes included.
            let l: Vec<f32> = (0..n)
                .map(|_| {
                    let r = rng.symmetric(1.0);
                    match case % 4 {
                        0 => r,
                        1 => (r * 3.0).round(),
                        2 => specials[((r + 1.0) * 4.0) as usize % specials.len()],
                        _ if r > 0.9 => 2.0,
                        _ => f32::NAN,
                    }
                })
                .collect();
            assert_eq!(argmax(&l), argmax_reference(&l), "n {n}, case {case}: {l:?}");
        }
    }
    assert_eq!(argmax(&[f32::NAN; 40]), 0);
    assert_eq!(argmax(&[-0.0, 0.0, -0.0]), 0);
    let mut tail = vec![f32::NEG_INFINITY; 35];
    tail[34] = -1.0;
    assert_eq!(argmax(&tail), 34);
}

#[test]
fn same_seed_same_tokens() {
    let rounds = DRAWS / 100;
    for (temp, top_p) in [(0.8, 0.9), (1.0, 1.0), (1.5, 0.5)] {
        let a = draw(temp, top_p, 7, rounds);
        let b = draw(temp, top_p, 7, rounds);
        assert_eq!(a, b, "temp {temp} top_p {top_p}");
        let c = draw(temp, top_p, 8, rounds);
        assert_ne!(a, c, "a different seed must give a different run");
    }
}

#[test]
fn sampling_follows_the_distribution() {
    // Two tokens with probabilities 0.25 and 0.75 at temperature 1.
    let mut s = Sampler::new(2, 1.0, 1.0, 3);
    let l = [0.0f32, 3.0f32.ln()];
    let ones = (0..DRAWS).filter(|_| s.sample(&mut l.clone()) == Ok(1)).count();
    let frac = ones as f64 / DRAWS as f64;
    // 0.02 (6.5 standard deviations) for 20000 draws; five for fewer.
    let bound = (5.0 * (0.75 * 0.25 / DRAWS as f64).sqrt()).max(0.02);
    assert!(
        (frac - 0.75).abs() < bound,
        "token 1 drawn {frac} of the time, expected 0.75 ± {bound}"
    );
}

#[test]
fn tiny_top_p_keeps_only_the_most_likely_token() {
    let mut s = Sampler::new(100, 1.0, 1e-6, 5);
    for r in 0..(DRAWS / 400) as u64 {
        let mut l = logits(r, 100);
        let best = argmax(&l);
        assert_eq!(s.sample(&mut l), Ok(best));
    }
}

#[test]
fn negative_zero_ties_with_zero_and_the_lower_token_wins() {
    // A fuzz find: -0.0 and 0.0 are one probability, so a nucleus smaller
    // than either holds the lower token, as for any other tie.
    for seed in 0..20 {
        let mut s = Sampler::new(2, 1.0, 1e-30, seed);
        assert_eq!(s.sample(&mut [-0.0, 0.0]), Ok(0));
        assert_eq!(s.sample(&mut [0.0, -0.0]), Ok(0));
    }
}

#[test]
fn top_p_never_picks_outside_the_nucleus() {
    // probabilities ≈ 0.6, 0.3, 0.1 (and tiny): with top_p 0.8 only 0 and 1.
    let l = [0.6f32.ln(), 0.3f32.ln(), 0.1f32.ln(), -30.0];
    let mut s = Sampler::new(4, 1.0, 0.8, 11);
    let mut seen = [0usize; 4];
    for _ in 0..DRAWS / 4 {
        seen[s.sample(&mut l.clone()).unwrap() as usize] += 1;
    }
    assert_eq!(seen[2] + seen[3], 0, "{seen:?}");
    assert!(seen[0] > seen[1] && seen[1] > 0, "{seen:?}");
}

#[test]
fn degenerate_logits_give_a_valid_token() {
    let mut s = Sampler::new(3, 0.8, 0.9, 1);
    assert_eq!(s.sample(&mut [f32::NAN, f32::NAN, f32::NAN]), Ok(0));
    assert_eq!(s.sample(&mut [1.0, f32::INFINITY, 2.0]), Ok(1));
    assert!(s.sample(&mut [0.5; 3]).unwrap() < 3);
}

// --- llama.cpp's chain: repetition penalty, top-k, top-p, min-p, temperature.

use legacy_ml::model::sampler::SamplerOptions;

/// The chain written out plainly, in f64: the tokens kept, most probable
/// first, with their probabilities. `recent` is every token seen so far.
fn reference(logits: &[f32], o: &SamplerOptions, recent: &[u32]) -> Vec<(u32, f64)> {
    let mut l: Vec<f64> = logits.iter().map(|&x| f64::from(x)).collect();
    if o.repeat_penalty != 1.0 && o.repeat_last_n > 0 {
        let window = &recent[recent.len().saturating_sub(o.repeat_last_n)..];
        let mut done: Vec<u32> = Vec::new();
        for &t in window {
            if !done.contains(&t) {
                done.push(t);
                let p = f64::from(o.repeat_penalty);
                let v = &mut l[t as usize];
                *v = if *v <= 0.0 { *v * p } else { *v / p };
            }
        }
    }
    let mut c: Vec<(u32, f64)> = l.iter().enumerate().map(|(i, &v)| (i as u32, v)).collect();
    c.sort_by(|a, b| {
        let by_value = b.1.partial_cmp(&a.1).expect("the reference takes no NaN");
        by_value.then(a.0.cmp(&b.0))
    });
    if o.top_k > 0 && o.top_k < c.len() {
        c.truncate(o.top_k);
    }
    let softmax = |c: &[(u32, f64)], t: f64| -> Vec<f64> {
        let e: Vec<f64> = c.iter().map(|x| ((x.1 - c[0].1) / t).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|v| v / s).collect()
    };
    if o.top_p < 1.0 {
        let p = softmax(&c, 1.0);
        let mut mass = 0.0;
        let keep = p
            .iter()
            .position(|&q| {
                mass += q;
                mass >= f64::from(o.top_p)
            })
            .map_or(c.len(), |i| i + 1);
        c.truncate(keep);
    }
    if o.min_p > 0.0 {
        let floor = c[0].1 + f64::from(o.min_p).ln();
        let keep = c.iter().take_while(|x| x.1 >= floor).count().max(1);
        c.truncate(keep);
    }
    let p = softmax(&c, f64::from(o.temperature));
    c.iter().zip(p).map(|(x, q)| (x.0, q)).collect()
}

fn options(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> SamplerOptions {
    SamplerOptions {
        temperature,
        top_k,
        top_p,
        min_p,
        repeat_penalty: 1.0,
        repeat_last_n: 0,
    }
}

fn assert_same_distribution(got: &[(f32, u32)], want: &[(u32, f64)], what: &str) {
    let got_tokens: Vec<u32> = got.iter().map(|g| g.1).collect();
    let want_tokens: Vec<u32> = want.iter().map(|w| w.0).collect();
    assert_eq!(got_tokens, want_tokens, "{what}: kept tokens");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (f64::from(g.0) - w.1).abs() < 1e-5,
            "{what}: token {} has probability {}, reference {}",
            g.1,
            g.0,
            w.1
        );
    }
}

#[test]
fn llama_cpp_defaults() {
    assert_eq!(
        SamplerOptions::default(),
        SamplerOptions {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
        }
    );
}

#[test]
fn each_filter_keeps_what_the_reference_keeps() {
    let cases = [
        ("top-k 5", options(1.0, 5, 1.0, 0.0)),
        ("top-k 1", options(1.0, 1, 1.0, 0.0)),
        ("top-p 0.5", options(1.0, 0, 0.5, 0.0)),
        ("top-p 0.9", options(1.0, 0, 0.9, 0.0)),
        ("min-p 0.1", options(1.0, 0, 1.0, 0.1)),
        ("min-p 0.5", options(1.0, 0, 1.0, 0.5)),
        ("temperature 0.5", options(0.5, 0, 1.0, 0.0)),
        ("temperature 2", options(2.0, 0, 1.0, 0.0)),
        ("top-k 10 and top-p 0.8", options(1.0, 10, 0.8, 0.0)),
        ("llama.cpp's defaults", SamplerOptions::LLAMA_CPP),
        ("all, temperature 1.5", options(1.5, 20, 0.9, 0.02)),
    ];
    for (what, o) in cases {
        for seed in 0..8u64 {
            // Spread wide enough that every filter cuts somewhere.
            let mut rng = Rng::new(seed);
            let l: Vec<f32> = (0..64).map(|_| rng.symmetric(6.0)).collect();
            let mut s = Sampler::with_options(64, o, 1);
            let got = s.distribution(&mut l.clone()).to_vec();
            assert_same_distribution(&got, &reference(&l, &o, &[]), &format!("{what}, logits {seed}"));
        }
    }
}

#[test]
fn filters_cut_where_expected_on_known_logits() {
    // Probabilities at temperature 1: 0.5, 0.25, 0.125, 0.0625, 0.0625.
    let l: Vec<f32> = [0.5f32, 0.25, 0.125, 0.0625, 0.0625].iter().map(|p| p.ln()).collect();
    let kept = |o: SamplerOptions| -> Vec<u32> {
        let mut s = Sampler::with_options(5, o, 1);
        s.distribution(&mut l.clone()).iter().map(|c| c.1).collect()
    };
    assert_eq!(kept(options(1.0, 2, 1.0, 0.0)), [0, 1]);
    // Mass reaches 0.75 at the second token, 0.875 at the third.
    assert_eq!(kept(options(1.0, 0, 0.75, 0.0)), [0, 1]);
    assert_eq!(kept(options(1.0, 0, 0.8, 0.0)), [0, 1, 2]);
    // At least a quarter of the best's probability: 0.5, 0.25, 0.125.
    assert_eq!(kept(options(1.0, 0, 1.0, 0.25)), [0, 1, 2]);
    assert_eq!(kept(options(1.0, 0, 1.0, 0.3)), [0, 1]);
    // Temperature after the cut: 0.5 and 0.25 at temperature 0.5 become
    // 0.25 : 0.0625, i.e. 0.8 and 0.2.
    let mut s = Sampler::with_options(5, options(0.5, 2, 1.0, 0.0), 1);
    let d = s.distribution(&mut l.clone()).to_vec();
    assert!((d[0].0 - 0.8).abs() < 1e-6 && (d[1].0 - 0.2).abs() < 1e-6, "{d:?}");
}

#[test]
fn repetition_penalty_divides_positive_and_multiplies_negative_logits_once() {
    let o = SamplerOptions {
        repeat_penalty: 2.0,
        repeat_last_n: 3,
        ..options(1.0, 0, 1.0, 0.0)
    };
    let l = [2.0f32, -1.0, 1.0, 0.5];
    // Token 3 has left the window of 3; token 1 is in it twice but is
    // penalised once.
    let recent = [3, 0, 1, 1];
    let mut s = Sampler::with_options(4, o, 1);
    s.accept(&recent);
    let got = s.distribution(&mut l.to_vec()).to_vec();
    let want = reference(&l, &o, &recent);
    assert_same_distribution(&got, &want, "penalty 2 over the last 3");
    // The penalised logits: [1.0, -2.0, 1.0, 0.5].
    let z: f64 = [1.0f64, -2.0, 1.0, 0.5].iter().map(|v| v.exp()).sum();
    let p0 = 1.0f64.exp() / z;
    assert!((f64::from(got[0].0) - p0).abs() < 1e-6, "{got:?}");
    assert_eq!(got.iter().map(|c| c.1).collect::<Vec<_>>(), [0, 2, 3, 1]);
}

#[test]
fn greedy_sees_the_penalty_and_sampled_tokens_enter_the_window() {
    let o = SamplerOptions {
        repeat_penalty: 10.0,
        repeat_last_n: 1,
        ..options(0.0, 0, 1.0, 0.0)
    };
    let mut s = Sampler::with_options(3, o, 1);
    // Token 0 is the best until it was just chosen; then the penalty makes
    // token 1 the best, and so on: greedy alternates.
    let l = [3.0f32, 2.0, -1.0];
    assert_eq!(s.sample(&mut l.to_vec()), Ok(0));
    assert_eq!(s.sample(&mut l.to_vec()), Ok(1));
    assert_eq!(s.sample(&mut l.to_vec()), Ok(0));
}

#[test]
fn every_option_stays_deterministic_for_a_seed() {
    let o = SamplerOptions {
        repeat_penalty: 1.1,
        ..SamplerOptions::LLAMA_CPP
    };
    let run = |seed: u64| -> Vec<u32> {
        let mut s = Sampler::with_options(100, o, seed);
        s.accept(&[1, 2, 3]);
        (0..200).map(|r| s.sample(&mut logits(r, 100)).unwrap()).collect()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}
