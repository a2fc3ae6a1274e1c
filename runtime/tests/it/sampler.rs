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
