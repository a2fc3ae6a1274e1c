//! The sampler on arbitrary logits (NaN, ±inf, all equal, huge, tiny) with
//! arbitrary temperature, top-p and seed (input framing:
//! `fuzz_input::sampler_input`). It must return an id inside the logits or,
//! for no logits at all, a Shape error; the same seed must give the same
//! id; greedy choices (temperature 0, or non-finite logits) are the argmax;
//! top-p below one token's share of a flat distribution keeps token 0.

#![no_main]

use legacy_ml::model::sampler::{argmax, Sampler};
use legacy_ml::ErrorKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = fuzz_input::sampler_input(data);
    let n = input.logits.len();
    let mut sampler = Sampler::new(n, input.temperature, input.top_p, input.seed);
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
    if sampler.is_greedy() || input.logits.iter().any(|v| !v.is_finite()) {
        assert_eq!(id, best, "a greedy choice must be the argmax");
    }

    // Equal finite logits with a nucleus smaller than one token's
    // probability: the nucleus is the first token alone.
    let n_f = n as f32;
    if !sampler.is_greedy()
        && input.top_p > 0.0
        && input.top_p < 0.5 / n_f
        && input.logits.iter().all(|&v| v.is_finite() && v == input.logits[0])
    {
        assert_eq!(id, 0, "top-p {} over {n} equal logits must keep token 0", input.top_p);
    }

    // The same seed gives the same id.
    let mut again = Sampler::new(n, input.temperature, input.top_p, input.seed);
    assert_eq!(
        again.sample(&mut input.logits.clone()).ok(),
        Some(id),
        "not reproducible"
    );
});
