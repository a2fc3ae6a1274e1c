//! The constants of the SIMD exp (softmax, silu) shared by every tier that
//! has one: range reduction by Cody–Waite ln 2, then Cephes' polynomial.
//! Tiers without a SIMD exp (scalar) leave them unused.
#![allow(dead_code)]

/// Below EXP_LO e^x rounds to 0 in f32 (and n ≥ −150 keeps both 2ⁿ
/// factors normal); above EXP_HI it overflows.
pub const EXP_LO: f32 = -104.0;
pub const EXP_HI: f32 = 88.722_83;
/// ln 2 = LN2_HI + LN2_LO (Cody–Waite): LN2_HI = 0.693359375 has 9
/// significant bits, so n·LN2_HI is exact for every n the clamp allows.
pub const LN2_HI: f32 = 355.0 / 512.0;
#[allow(clippy::excessive_precision)]
pub const LN2_LO: f32 = -2.121_944_40e-4;
/// Cephes expf: e^r ≈ 1 + r + r²·P(r), coefficients as published.
#[allow(clippy::excessive_precision)]
pub const EXP_POLY: [f32; 6] = [
    1.987_569_150_0e-4,
    1.398_199_950_7e-3,
    8.333_451_907_3e-3,
    4.166_579_589_4e-2,
    1.666_666_545_9e-1,
    5.000_000_120_1e-1,
];
