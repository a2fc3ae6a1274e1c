//! Block quantization formats (DESIGN.md §4). Weights and activations are split
//! into blocks of `QK` elements; each block has one f32 scale `d`.
//!
//! * Q8_0: int8 quants in [-127, 127], value = q · d.
//! * Q4_0: 16 bytes per block; the low nibble of byte i holds element i, the
//!   high nibble element i + 16; value = (nibble − 8) · d.
//!
//! These functions quantize whole rows; they are the reference the loader's
//! writer and the `quantize_q8` kernels are held to.

/// Elements per quantization block.
pub const QK: usize = 32;
/// Bytes of quants per Q4_0 block.
pub const Q4_BLOCK_BYTES: usize = QK / 2;

/// Quantizes one Q8_0 block: d = amax / 127, q = trunc(x·id + copysign(0.5, x))
/// with id = 127 / amax, clamped to [-127, 127]. A block of zeros gives d = 0.
///
/// The rounding is written so every ISA can reproduce it bit for bit (no
/// round-half-even instruction is needed, which ARMv7 NEON lacks).
pub fn quantize_block_q8(x: &[f32], q: &mut [i8]) -> f32 {
    debug_assert_eq!(x.len(), QK);
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    for (qi, &xi) in q.iter_mut().zip(x) {
        let r = (xi * id + 0.5f32.copysign(xi)).trunc();
        *qi = r.clamp(-127.0, 127.0) as i8;
    }
    d
}

/// Quantizes a row whose length is a multiple of `QK` into Q8_0.
pub fn quantize_row_q8(x: &[f32], q: &mut [i8], d: &mut [f32]) {
    for ((xb, qb), db) in x.chunks_exact(QK).zip(q.chunks_exact_mut(QK)).zip(d.iter_mut()) {
        *db = quantize_block_q8(xb, qb);
    }
}

/// Quantizes one Q4_0 block with ggml's rule: the element of largest
/// magnitude, with its sign, maps to −8, so d = that element / −8 and the
/// full nibble range [0, 15] is used. Quants are packed as in the module doc.
pub fn quantize_block_q4(x: &[f32], q: &mut [u8]) -> f32 {
    debug_assert_eq!(x.len(), QK);
    debug_assert_eq!(q.len(), Q4_BLOCK_BYTES);
    let mut max = 0.0f32;
    for &v in x {
        if v.abs() > max.abs() {
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let nibble = |v: f32| -> u8 { (v * id + 8.5).trunc().clamp(0.0, 15.0) as u8 };
    for i in 0..Q4_BLOCK_BYTES {
        q[i] = nibble(x[i]) | (nibble(x[i + Q4_BLOCK_BYTES]) << 4);
    }
    d
}

/// Quantizes a row whose length is a multiple of `QK` into Q4_0.
pub fn quantize_row_q4(x: &[f32], q: &mut [u8], d: &mut [f32]) {
    for ((xb, qb), db) in x
        .chunks_exact(QK)
        .zip(q.chunks_exact_mut(Q4_BLOCK_BYTES))
        .zip(d.iter_mut())
    {
        *db = quantize_block_q4(xb, qb);
    }
}

/// Expands Q8_0 quants back to f32.
pub fn dequantize_row_q8(q: &[i8], d: &[f32], out: &mut [f32]) {
    for ((ob, qb), &db) in out.chunks_exact_mut(QK).zip(q.chunks_exact(QK)).zip(d) {
        for (o, &qi) in ob.iter_mut().zip(qb) {
            *o = qi as f32 * db;
        }
    }
}

/// Expands Q4_0 quants back to f32.
pub fn dequantize_row_q4(q: &[u8], d: &[f32], out: &mut [f32]) {
    for ((ob, qb), &db) in out.chunks_exact_mut(QK).zip(q.chunks_exact(Q4_BLOCK_BYTES)).zip(d) {
        for i in 0..Q4_BLOCK_BYTES {
            ob[i] = ((qb[i] & 0x0F) as i32 - 8) as f32 * db;
            ob[i + Q4_BLOCK_BYTES] = ((qb[i] >> 4) as i32 - 8) as f32 * db;
        }
    }
}
