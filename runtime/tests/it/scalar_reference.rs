//! The scalar kernels against independent f64 arithmetic on dequantized
//! values: the reference itself must be right before the ISA tiers are held
//! to it.

use legacy_ml::core::quant::*;
use legacy_ml::core::rng::Rng;
use legacy_ml::core::tensor::{QAct, QTensor, WType};
use legacy_ml::kernels::scalar;

fn random(rng: &mut Rng, n: usize, a: f32) -> Vec<f32> {
    (0..n).map(|_| rng.symmetric(a)).collect()
}

/// A quantized matrix plus its dequantized f32 copy.
struct Matrix {
    q: Vec<u8>,
    d: Vec<f32>,
    deq: Vec<f32>,
    wtype: WType,
    rows: usize,
    cols: usize,
}

impl Matrix {
    fn random(rng: &mut Rng, wtype: WType, rows: usize, cols: usize) -> Matrix {
        let w = random(rng, rows * cols, 1.0);
        let mut d = vec![0.0; rows * cols / QK];
        let mut deq = vec![0.0; rows * cols];
        let q = match wtype {
            WType::Q8_0 => {
                let mut q = vec![0i8; rows * cols];
                quantize_row_q8(&w, &mut q, &mut d);
                dequantize_row_q8(&q, &d, &mut deq);
                q.into_iter().map(|v| v as u8).collect()
            }
            WType::Q4_0 => {
                let mut q = vec![0u8; rows * cols / 2];
                quantize_row_q4(&w, &mut q, &mut d);
                dequantize_row_q4(&q, &d, &mut deq);
                q
            }
        };
        Matrix {
            q,
            d,
            deq,
            wtype,
            rows,
            cols,
        }
    }
    fn view(&self) -> QTensor<'_> {
        QTensor {
            wtype: self.wtype,
            rows: self.rows,
            cols: self.cols,
            q: &self.q,
            d: &self.d,
            packed: false,
        }
    }
}

#[test]
fn matvec_equals_the_dequantized_dot_for_every_row_range() {
    let mut rng = Rng::new(11);
    for wtype in [WType::Q8_0, WType::Q4_0] {
        // Miri interprets every instruction: the smaller shapes only.
        let shapes: &[(usize, usize)] = if cfg!(miri) {
            &[(1, 32), (5, 64), (7, 96)]
        } else {
            &[(1, 32), (5, 64), (7, 96), (13, 256)]
        };
        for &(rows, cols) in shapes {
            let m = Matrix::random(&mut rng, wtype, rows, cols);
            let x = random(&mut rng, cols, 2.0);
            let (mut xq, mut xd) = (vec![0i8; cols], vec![0.0f32; cols / QK]);
            scalar::quantize_q8(&mut xq, &mut xd, &x);
            let mut x_deq = vec![0.0f32; cols];
            dequantize_row_q8(&xq, &xd, &mut x_deq);
            let act = QAct { q: &xq, d: &xd };
            for (r0, r1) in [(0, rows), (rows / 2, rows), (0, rows.div_ceil(2)), (rows - 1, rows)] {
                let mut y = vec![f32::NAN; r1 - r0];
                match wtype {
                    WType::Q8_0 => scalar::matvec_q8(&mut y, &m.view(), &act, r0, r1),
                    WType::Q4_0 => scalar::matvec_q4(&mut y, &m.view(), &act, r0, r1),
                }
                for (i, &got) in y.iter().enumerate() {
                    let row = &m.deq[(r0 + i) * cols..(r0 + i + 1) * cols];
                    let want: f64 = row.iter().zip(&x_deq).map(|(&a, &b)| a as f64 * b as f64).sum();
                    let mag: f64 = row.iter().zip(&x_deq).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                    assert!(
                        (got as f64 - want).abs() <= 1e-5 * mag.max(1e-30),
                        "{wtype:?} {rows}x{cols} rows {r0}..{r1} row {}: {got} vs {want}",
                        r0 + i
                    );
                }
            }
        }
    }
}

#[test]
fn block_dots_are_exact_integer_sums() {
    let w: Vec<i8> = (0..32).map(|i| if i % 2 == 0 { 127 } else { -127 }).collect();
    let x: Vec<i8> = (0..32).map(|i| if i % 2 == 0 { 127 } else { -127 }).collect();
    assert_eq!(scalar::block_dot_q8(&w, &x), 32 * 127 * 127);
    // Q4: every nibble 0 means value -8; bytes 0x0F: low 15 (+7), high 0 (-8).
    let ones = [1i8; 32];
    assert_eq!(scalar::block_dot_q4(&[0x00; 16], &ones), -8 * 32);
    assert_eq!(scalar::block_dot_q4(&[0x0F; 16], &ones), 7 * 16 - 8 * 16);
    let mut first_half = [0i8; 32];
    first_half[..16].fill(1);
    assert_eq!(
        scalar::block_dot_q4(&[0x0F; 16], &first_half),
        7 * 16,
        "low nibbles are elements 0-15"
    );
}

#[test]
fn rmsnorm_matches_f64() {
    let mut rng = Rng::new(12);
    let x = random(&mut rng, 96, 3.0);
    let w = random(&mut rng, 96, 1.0);
    let mut o = vec![0.0; 96];
    scalar::rmsnorm(&mut o, &x, &w, 1e-5);
    let ms: f64 = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / 96.0;
    for i in 0..96 {
        let want = x[i] as f64 / (ms + 1e-5).sqrt() * w[i] as f64;
        assert!(
            (o[i] as f64 - want).abs() <= 1e-5 * want.abs().max(1e-3),
            "{i}: {} vs {want}",
            o[i]
        );
    }
}

#[test]
fn softmax_matches_f64_and_sums_to_one() {
    let mut rng = Rng::new(13);
    let mut x = random(&mut rng, 77, 20.0);
    let orig = x.clone();
    scalar::softmax(&mut x);
    let max = orig.iter().fold(f64::MIN, |m, &v| m.max(v as f64));
    let z: f64 = orig.iter().map(|&v| (v as f64 - max).exp()).sum();
    for (i, &p) in x.iter().enumerate() {
        let want = (orig[i] as f64 - max).exp() / z;
        assert!(
            (p as f64 - want).abs() <= 1e-5 * want.max(1e-30) + 1e-12,
            "{i}: {p} vs {want}"
        );
    }
    assert!((x.iter().map(|&p| p as f64).sum::<f64>() - 1.0).abs() < 1e-5);
    let mut big = [1000.0f32, 1000.0, -1000.0];
    scalar::softmax(&mut big);
    assert_eq!(big, [0.5, 0.5, 0.0], "stable for large inputs");
}

#[test]
fn rope_rotates_each_interleaved_pair() {
    let (head_dim, n_heads, n_kv_heads) = (8, 4, 2);
    let mut rng = Rng::new(14);
    let mut q = random(&mut rng, head_dim * n_heads, 1.0);
    let mut k = random(&mut rng, head_dim * n_kv_heads, 1.0);
    let (q0, k0) = (q.clone(), k.clone());
    let angles: Vec<f64> = (0..head_dim / 2).map(|i| 0.3 + i as f64).collect();
    let cos: Vec<f32> = angles.iter().map(|a| a.cos() as f32).collect();
    let sin: Vec<f32> = angles.iter().map(|a| a.sin() as f32).collect();
    scalar::rope(&mut q, &mut k, &cos, &sin, head_dim, n_heads, n_kv_heads);
    for (got, orig, heads) in [(&q, &q0, n_heads), (&k, &k0, n_kv_heads)] {
        for h in 0..heads {
            for i in 0..head_dim / 2 {
                let (a, b) = (orig[h * head_dim + 2 * i] as f64, orig[h * head_dim + 2 * i + 1] as f64);
                let (c, s) = (angles[i].cos(), angles[i].sin());
                assert!((got[h * head_dim + 2 * i] as f64 - (a * c - b * s)).abs() < 1e-6);
                assert!((got[h * head_dim + 2 * i + 1] as f64 - (a * s + b * c)).abs() < 1e-6);
            }
        }
    }
}

#[test]
fn silu_mul_add_dot_axpy_match_f64() {
    let mut rng = Rng::new(15);
    let n = 45;
    let (g0, u, x) = (
        random(&mut rng, n, 8.0),
        random(&mut rng, n, 2.0),
        random(&mut rng, n, 2.0),
    );
    let mut g = g0.clone();
    scalar::silu_mul(&mut g, &u);
    for i in 0..n {
        let v = g0[i] as f64;
        let want = v / (1.0 + (-v).exp()) * u[i] as f64;
        assert!((g[i] as f64 - want).abs() <= 1e-5 * want.abs().max(1e-6), "silu {i}");
    }
    let dot = scalar::dot_f32(&u, &x) as f64;
    let want: f64 = u.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
    assert!((dot - want).abs() < 1e-5 * u.iter().zip(&x).map(|(&a, &b)| (a * b).abs() as f64).sum::<f64>());
    let mut y = u.clone();
    scalar::axpy_f32(&mut y, 0.5, &x);
    let mut z = u.clone();
    scalar::add(&mut z, &x);
    for i in 0..n {
        assert_eq!(y[i], u[i] + 0.5 * x[i]);
        assert_eq!(z[i], u[i] + x[i]);
    }
}
