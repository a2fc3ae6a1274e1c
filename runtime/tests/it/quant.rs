//! Quantization (DESIGN.md §4): error bounds, zero blocks, the ±127 clamp, the
//! Q4_0 nibble order and rounding.

use legacy_ml::core::quant::*;
use legacy_ml::core::rng::Rng;

/// Random blocks per case: Miri interprets every instruction, so it checks
/// the same rules on fewer blocks.
const BLOCKS: usize = if cfg!(miri) { 4 } else { 200 };

fn random_block(rng: &mut Rng, scale: f32) -> Vec<f32> {
    (0..QK).map(|_| rng.symmetric(scale)).collect()
}

#[test]
fn q8_round_trip_error_is_at_most_half_a_step() {
    let mut rng = Rng::new(1);
    for scale in [1e-6f32, 0.01, 1.0, 300.0, 1e6] {
        for _ in 0..BLOCKS {
            let x = random_block(&mut rng, scale);
            let mut q = [0i8; QK];
            let d = quantize_block_q8(&x, &mut q);
            let mut back = [0.0f32; QK];
            dequantize_row_q8(&q, &[d], &mut back);
            for (a, b) in x.iter().zip(&back) {
                // d/2 plus f32 rounding of x·id and q·d.
                assert!((a - b).abs() <= d / 2.0 * (1.0 + 1e-5), "x {a} back {b} d {d}");
            }
        }
    }
}

#[test]
fn q8_zero_block_has_zero_scale_and_quants() {
    let mut q = [5i8; QK];
    let d = quantize_block_q8(&[0.0; QK], &mut q);
    assert_eq!(d.to_bits(), 0.0f32.to_bits());
    assert_eq!(q, [0i8; QK]);
    let mut q = [5i8; QK];
    let d = quantize_block_q8(&[-0.0; QK], &mut q);
    assert_eq!(d, 0.0);
    assert_eq!(q, [0i8; QK]);
}

#[test]
fn q8_clamps_to_plus_minus_127_and_never_minus_128() {
    let mut x = [0.5f32; QK];
    x[3] = 10.0;
    x[9] = -10.0;
    let mut q = [0i8; QK];
    let d = quantize_block_q8(&x, &mut q);
    assert_eq!(d, 10.0 / 127.0);
    assert_eq!(q[3], 127);
    assert_eq!(q[9], -127);
    assert_eq!(q[0], 6); // 0.5 · 12.7 = 6.35 → 6
    let mut rng = Rng::new(2);
    for _ in 0..5 * BLOCKS {
        let x = random_block(&mut rng, 1.0);
        quantize_block_q8(&x, &mut q);
        assert!(q.iter().all(|&v| v >= -127));
    }
}

#[test]
fn q8_rounds_half_away_from_zero() {
    // amax 127 makes id = 1, so x·id + copysign(0.5, x) is exact.
    let mut x = [0.0f32; QK];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = -2.5;
    x[3] = 1.49;
    x[4] = -0.5;
    let mut q = [0i8; QK];
    quantize_block_q8(&x, &mut q);
    assert_eq!(&q[..5], &[127, 3, -3, 1, -1]);
}

#[test]
fn q4_nibble_order_low_is_first_half() {
    // Values chosen so element i quantizes to nibble (i % 16): the largest
    // magnitude is -8 (element 0), so d = 1 and nibble = x + 8.
    let x: Vec<f32> = (0..QK).map(|i| (i % 16) as f32 - 8.0).collect();
    let mut q = [0u8; Q4_BLOCK_BYTES];
    let d = quantize_block_q4(&x, &mut q);
    assert_eq!(d, 1.0);
    for (i, &byte) in q.iter().enumerate() {
        assert_eq!(byte & 0x0F, i as u8, "low nibble holds element {i}");
        assert_eq!(byte >> 4, i as u8, "high nibble holds element {}", i + 16);
    }
    // Distinguish the halves: first half all -8, second half all +4.
    let mut x = [-8.0f32; QK];
    x[16..].fill(4.0);
    quantize_block_q4(&x, &mut q);
    assert!(q.iter().all(|&b| b == (12 << 4)), "{q:?}");
}

#[test]
fn q4_round_trip_error_is_at_most_half_a_step_except_at_the_top_clamp() {
    let mut rng = Rng::new(3);
    for _ in 0..5 * BLOCKS / 2 {
        let x = random_block(&mut rng, 2.0);
        let mut q = [0u8; Q4_BLOCK_BYTES];
        let d = quantize_block_q4(&x, &mut q);
        let mut back = [0.0f32; QK];
        dequantize_row_q4(&q, &[d], &mut back);
        let step = d.abs();
        for (i, (a, b)) in x.iter().zip(&back).enumerate() {
            let nibble = if i < 16 { q[i] & 15 } else { q[i - 16] >> 4 };
            // ggml's rule maps the signed max to -8; the opposite extreme
            // can need +8, which clamps to 7: up to one step of error.
            let bound = if nibble == 15 { step } else { step / 2.0 };
            assert!(
                (a - b).abs() <= bound * (1.0 + 1e-5),
                "x {a} back {b} d {d} nibble {nibble}"
            );
        }
    }
}

#[test]
fn q4_zero_block() {
    let mut q = [0xFFu8; Q4_BLOCK_BYTES];
    let d = quantize_block_q4(&[0.0; QK], &mut q);
    assert_eq!(d, 0.0);
    // value = (nibble − 8) · 0 = 0 whatever the nibble; ggml stores 8.
    assert!(q.iter().all(|&b| b == 0x88));
}

#[test]
fn rows_quantize_block_by_block() {
    let mut rng = Rng::new(4);
    let x: Vec<f32> = (0..4 * QK).map(|_| rng.symmetric(1.0)).collect();
    let (mut q, mut d) = (vec![0i8; 4 * QK], vec![0.0f32; 4]);
    quantize_row_q8(&x, &mut q, &mut d);
    for b in 0..4 {
        let mut qb = [0i8; QK];
        let db = quantize_block_q8(&x[b * QK..(b + 1) * QK], &mut qb);
        assert_eq!(db.to_bits(), d[b].to_bits());
        assert_eq!(&qb[..], &q[b * QK..(b + 1) * QK]);
    }
}

/// Packing (`pack_row_groups`) moves every byte of a whole four-row group
/// to `packed_offset`, a permutation of the group; rows past the last whole
/// group stay; `pack_scale_groups` transposes each group's scales; and
/// `row_pieces` and `scale` read any row back in order, packed or not.
#[test]
fn packed_row_groups_permute_bytes_and_read_back_row_by_row() {
    use legacy_ml::core::tensor::{
        pack_row_groups, pack_scale_groups, packed_offset, row_pieces, scale, QTensor, WType,
    };
    let mut rng = Rng::new(5);
    for (wtype, cols) in [
        (WType::Q8_0, 32),
        (WType::Q8_0, 96),
        (WType::Q8_0, 576),
        (WType::Q4_0, 32),
        (WType::Q4_0, 160),
        (WType::Q4_0, 576),
    ] {
        let row_bytes = match wtype {
            WType::Q8_0 => cols,
            WType::Q4_0 => cols / 2,
        };
        let mut seen = vec![false; 4 * row_bytes];
        for j in 0..4 {
            for o in 0..row_bytes {
                let at = packed_offset(j, o, row_bytes);
                assert!(
                    at < 4 * row_bytes && !seen[at],
                    "{wtype:?} K={cols}: row {j} byte {o} lands on {at} twice or outside"
                );
                seen[at] = true;
            }
        }
        for rows in [1, 3, 4, 5, 8, 11] {
            let q: Vec<u8> = (0..rows * row_bytes).map(|_| rng.next_u32() as u8).collect();
            let d: Vec<f32> = (0..rows * cols / QK).map(|_| rng.next_f32()).collect();
            let mut packed = q.clone();
            pack_row_groups(&mut packed, rows, row_bytes, &mut Vec::new());
            let whole = rows / 4 * 4;
            assert_eq!(
                packed[whole * row_bytes..],
                q[whole * row_bytes..],
                "{wtype:?} rows={rows}: the tail moved"
            );
            for r in 0..whole {
                for o in 0..row_bytes {
                    let at = (r - r % 4) * row_bytes + packed_offset(r % 4, o, row_bytes);
                    assert_eq!(
                        packed[at],
                        q[r * row_bytes + o],
                        "{wtype:?} rows={rows} row {r} byte {o}"
                    );
                }
            }
            let nb = cols / QK;
            let mut packed_d = d.clone();
            pack_scale_groups(&mut packed_d, rows, nb, &mut Vec::new());
            for r in 0..rows {
                for b in 0..nb {
                    let at = if r < whole {
                        (r - r % 4) * nb + 4 * b + r % 4
                    } else {
                        r * nb + b
                    };
                    assert_eq!(
                        packed_d[at].to_bits(),
                        d[r * nb + b].to_bits(),
                        "{wtype:?} rows={rows} scale {r},{b}"
                    );
                }
            }
            for (bytes, scales, is_packed) in [(&q, &d, false), (&packed, &packed_d, true)] {
                let w = QTensor {
                    wtype,
                    rows,
                    cols,
                    q: bytes,
                    d: scales,
                    packed: is_packed,
                };
                for r in 0..rows {
                    for b in 0..nb {
                        assert_eq!(
                            scale(&w, r, b).to_bits(),
                            d[r * nb + b].to_bits(),
                            "{wtype:?} rows={rows} packed={is_packed} scale({r}, {b})"
                        );
                    }
                }
                for r in 0..rows {
                    let mut row = Vec::new();
                    for (offset, piece) in row_pieces(&w, r) {
                        assert_eq!(offset, row.len());
                        assert_eq!(piece.len() % (row_bytes / (cols / QK)), 0, "a piece holds whole blocks");
                        row.extend_from_slice(piece);
                    }
                    assert_eq!(
                        row,
                        q[r * row_bytes..(r + 1) * row_bytes],
                        "{wtype:?} rows={rows} row {r} packed={is_packed}"
                    );
                }
            }
        }
    }
}
