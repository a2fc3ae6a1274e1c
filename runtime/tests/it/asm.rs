//! Feature `asm`: the hand-written kernels/sse2/add.S, bound as the sse2
//! tier's `add`, against the scalar reference, bit for bit (both do the same
//! single-precision additions). Without the feature the Rust `add` is bound
//! and the same test covers it.

use legacy_ml::core::rng::Rng;
use legacy_ml::kernels;

#[test]
fn bound_add_is_bit_identical_to_scalar_for_every_length_and_offset() {
    legacy_ml::guard::guard();
    let mut rng = Rng::new(5);
    for n in (0..40).chain([127, 128, 129, 1000]) {
        // Offsets 0..3 make the asm kernel's unaligned loads really unaligned.
        for offset in 0..4 {
            let y0: Vec<f32> = (0..n + offset).map(|_| rng.symmetric(100.0)).collect();
            let x: Vec<f32> = (0..n + offset).map(|_| rng.symmetric(100.0)).collect();
            let (mut got, mut want) = (y0.clone(), y0.clone());
            kernels::add(&mut got[offset..], &x[offset..]);
            kernels::scalar::add(&mut want[offset..], &x[offset..]);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "n {n} offset {offset}");
        }
    }
}

#[test]
fn add_stops_at_the_shorter_slice() {
    legacy_ml::guard::guard();
    let mut y = vec![1.0f32; 9];
    kernels::add(&mut y, &[1.0; 6]);
    assert_eq!(y, [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0]);
}

/// With `asm` on the sse2 tier, the bound `add` must really be the .S one.
#[cfg(all(
    feature = "asm",
    feature = "isa-sse2",
    not(feature = "isa-avx2"),
    target_arch = "x86_64"
))]
#[test]
fn asm_symbol_is_linked() {
    legacy_ml::guard::guard();
    extern "C" {
        fn ml_k_add_sse2(y: *mut f32, x: *const f32, n: usize);
    }
    let mut y = [1.0f32, 2.0, 3.0, 4.0, 5.0];
    // SAFETY: both arrays hold 5 floats.
    unsafe { ml_k_add_sse2(y.as_mut_ptr(), [1.0f32; 5].as_ptr(), 5) };
    assert_eq!(y, [2.0, 3.0, 4.0, 5.0, 6.0]);
}
