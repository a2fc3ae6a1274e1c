//! criterion benches of the bound matvec kernels, and of the matmul kernels
//! of the batched prefill over a chunk of 32 tokens, for comparing a change
//! against a saved baseline:
//!
//! ```sh
//! cargo bench -p kernel-bench --features isa-avx2 --bench matvec -- --save-baseline before
//! # change something
//! cargo bench -p kernel-bench --features isa-avx2 --bench matvec -- --baseline before
//! ```

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use legacy_ml::core::quant::QK;
use legacy_ml::core::rng::Rng;
use legacy_ml::core::tensor::{QAct, QActs, QTensor, WType};
use legacy_ml::kernels;
use std::hint::black_box;

const SHAPES: &[(usize, usize)] = &[(576, 576), (1536, 576), (576, 1536), (4096, 4096)];

/// Tokens of the matmul benches: a chunk at `--batch`'s default.
const TOKENS: usize = 32;

/// Random weights of one shape, as `matvec` and `matmul` read them.
fn weights(rng: &mut Rng, wtype: WType, rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
    let q = (0..wtype.quant_bytes((rows * cols) as u64) as usize)
        .map(|_| rng.next_u32() as u8 & 0x7F)
        .collect();
    let d = (0..rows * cols / QK).map(|_| rng.next_f32() * 0.01).collect();
    (q, d)
}

fn matmul(c: &mut Criterion) {
    legacy_ml::guard::guard();
    let mut rng = Rng::new(2);
    let mut group = c.benchmark_group(format!("matmul_x{TOKENS}/{}", kernels::TIER));
    for &(rows, cols) in SHAPES {
        let x: Vec<f32> = (0..cols * TOKENS).map(|_| rng.symmetric(1.0)).collect();
        let (mut xq, mut xd) = (vec![0i8; cols * TOKENS], vec![0.0f32; cols / QK * TOKENS]);
        for (t, xt) in x.chunks_exact(cols).enumerate() {
            let nb = cols / QK;
            kernels::quantize_q8(&mut xq[t * cols..(t + 1) * cols], &mut xd[t * nb..(t + 1) * nb], xt);
        }
        let acts = QActs {
            q: &xq,
            d: &xd,
            cols,
            n: TOKENS,
        };
        for wtype in [WType::Q8_0, WType::Q4_0] {
            let (q, d) = weights(&mut rng, wtype, rows, cols);
            let w = QTensor {
                wtype,
                rows,
                cols,
                q: &q,
                d: &d,
                packed: legacy_ml::model::streaming::streaming().pack_row_groups,
            };
            let mut y = vec![0.0f32; rows * TOKENS];
            // Multiply-adds, as GOPS counts them: two operations each.
            group.throughput(Throughput::Elements((2 * rows * cols * TOKENS) as u64));
            group.bench_function(BenchmarkId::new(wtype.name(), format!("{rows}x{cols}")), |b| {
                b.iter(|| {
                    let mut ys: Vec<&mut [f32]> = y.chunks_exact_mut(rows).collect();
                    match wtype {
                        WType::Q8_0 => kernels::matmul_q8(black_box(&mut ys), &w, &acts, 0, rows),
                        WType::Q4_0 => kernels::matmul_q4(black_box(&mut ys), &w, &acts, 0, rows),
                    }
                })
            });
        }
    }
    group.finish();
}

fn matvec(c: &mut Criterion) {
    legacy_ml::guard::guard();
    let mut rng = Rng::new(1);
    let mut group = c.benchmark_group(format!("matvec/{}", kernels::TIER));
    for &(rows, cols) in SHAPES {
        let x: Vec<f32> = (0..cols).map(|_| rng.symmetric(1.0)).collect();
        let (mut xq, mut xd) = (vec![0i8; cols], vec![0.0f32; cols / QK]);
        kernels::quantize_q8(&mut xq, &mut xd, &x);
        for wtype in [WType::Q8_0, WType::Q4_0] {
            let (q, d) = weights(&mut rng, wtype, rows, cols);
            let w = QTensor {
                wtype,
                rows,
                cols,
                q: &q,
                d: &d,
                // As a model read into memory is on this CPU (Model::open,
                // model::streaming::streaming); the bytes are random, so packing
                // them would only permute them.
                packed: legacy_ml::model::streaming::streaming().pack_row_groups,
            };
            let act = QAct { q: &xq, d: &xd };
            let mut y = vec![0.0f32; rows];
            group.throughput(Throughput::Bytes((q.len() + d.len() * 4) as u64));
            group.bench_function(BenchmarkId::new(wtype.name(), format!("{rows}x{cols}")), |b| {
                b.iter(|| match wtype {
                    WType::Q8_0 => kernels::matvec_q8(black_box(&mut y), &w, &act, 0, rows),
                    WType::Q4_0 => kernels::matvec_q4(black_box(&mut y), &w, &act, 0, rows),
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, matvec, matmul);
criterion_main!(benches);
