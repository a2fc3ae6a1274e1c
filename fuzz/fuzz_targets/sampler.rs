//! The sampler on arbitrary logits (NaN, ±inf, all equal, huge, tiny) with
//! arbitrary settings of the whole chain (temperature, top-k, top-p, min-p,
//! repetition penalty and its window, the tokens seen before) and seed
//! (input framing: `fuzz_input::sampler_input`). It must return an id inside
//! the logits or, for no logits at all, a Shape error; the same seed must
//! give the same id; the id must be one the sampler's own distribution
//! holds, and that distribution must sum to 1; greedy choices (temperature
//! 0 without a penalty, or non-finite logits) are the argmax; top-p below
//! one token's share of a flat distribution keeps token 0.

#![no_main]

use legacy_ml::model::sampler::{argmax, Sampler, SamplerOptions};
use legacy_ml::ErrorKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = fuzz_input::sampler_input(data);
    let n = input.logits.len();
    let options = SamplerOptions {
        temperature: input.temperature,
        top_k: input.top_k,
        top_p: input.top_p,
        min_p: input.min_p,
        repeat_penalty: input.repeat_penalty,
        repeat_last_n: input.repeat_last_n,
    };
    let fresh = || {
        let mut s = Sampler::with_options(n, options, input.seed);
        s.accept(&input.seen);
        s
    };
    let mut sampler = fresh();
    let mut logits = input.logits.clone();
    let id = match sampler.sample(&mut logits) {
        Ok(id) => id,
        Err(e) => {
            assert_eq!(n, 0, "sampling {n} logits failed: {}", e.message);
            assert_eq!(e.kind, ErrorKind::Shape);
            assert!(e.message.contains("logits"), "{}", e.message);
            return;
        }
    };
    assert!(n > 0, "sampled id {id} from no logits");
    assert!((id as usize) < n, "id {id} is outside the {n} logits");

    let best = argmax(&input.logits);
    assert!((best as usize) < n);
    if let Some(top) = input.logits.iter().copied().filter(|v| !v.is_nan()).reduce(f32::max) {
        assert_eq!(input.logits[best as usize], top, "argmax is not the largest value");
    }
    let penalized = sampler.options().repeat_last_n > 0 && !input.seen.is_empty();
    if input.logits.iter().any(|v| !v.is_finite()) || sampler.is_greedy() && !penalized {
        assert_eq!(id, best, "a greedy choice must be the argmax");
    }

    // The distribution it drew from holds the id and sums to 1.
    let dist = fresh().distribution(&mut input.logits.clone()).to_vec();
    assert!(!dist.is_empty(), "no distribution over {n} logits");
    assert!(dist.iter().any(|c| c.1 == id), "id {id} is not in its distribution");
    assert!(dist.iter().all(|c| (c.1 as usize) < n && c.0.is_finite() && c.0 >= 0.0));
    let total: f32 = dist.iter().map(|c| c.0).sum();
    assert!((total - 1.0).abs() < 1e-3, "the distribution sums to {total}");

    // Equal finite logits with a nucleus smaller than one token's
    // probability: the nucleus is the first token alone.
    let n_f = n as f32;
    if !sampler.is_greedy()
        && !penalized
        && input.top_p > 0.0
        && input.top_p < 0.5 / n_f
        && input.logits.iter().all(|&v| v.is_finite() && v == input.logits[0])
    {
        assert_eq!(id, 0, "top-p {} over {n} equal logits must keep token 0", input.top_p);
    }

    // The same seed gives the same id.
    assert_eq!(
        fresh().sample(&mut input.logits.clone()).ok(),
        Some(id),
        "not reproducible"
    );
});
