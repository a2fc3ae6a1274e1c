//! The scalar reference kernels (DESIGN.md §5). Every ISA tier is tested against
//! these, so they are written to be obviously right, not fast.
//!
//! Matvec contract: `y[i]` receives row `r0 + i` of `W · x` for rows
//! `[r0, r1)`; `y.len() == r1 - r0`. Callers split rows between threads by
//! giving each a disjoint `y` slice.
//!
//! Matmul contract (`matmul_q8`, `matmul_q4`): `W` times the activations of
//! `x.n` tokens (`QActs`, token-major). The output is token-major too: `y`
//! holds one slice per token, and `y[t][i]` receives row `r0 + i` of
//! `W · x_t` for rows `[r0, r1)` (`y.len() == x.n`, each `y[t]` at least
//! `r1 − r0` long). One slice per token, not one flat buffer, so that the
//! callers can hand each thread its rows of every token as disjoint slices
//! and write K/V rows straight into the cache.
//!
//! Batch invariance (issue 15): in every tier, `y[t][i]` must be
//! bit-identical to what that tier's own matvec gives for row `r0 + i` and
//! token t. A tiled matmul may share each loaded weight block between
//! tokens and keep several rows and tokens in registers, but for each output
//! it must add the per-block terms in the matvec's order, with the matvec's
//! float operations (the same `sumi · dw · dx` rounding, or the same FMA),
//! and cut rows into the matvec's groups (four, from `r0`). Then the logits
//! after a prompt do not depend on how it was chunked, nor on the threads.

use crate::core::quant::{self, Q4_BLOCK_BYTES, QK};
use crate::core::tensor::{QAct, QActs, QTensor};

/// Integer dot of one Q8_0 weight block with one Q8_0 activation block.
#[inline]
pub fn block_dot_q8(w: &[i8], x: &[i8]) -> i32 {
    w.iter().zip(x).map(|(&a, &b)| a as i32 * b as i32).sum()
}

/// Integer dot of one packed Q4_0 weight block with one Q8_0 activation block.
#[inline]
pub fn block_dot_q4(w: &[u8], x: &[i8]) -> i32 {
    let mut sum = 0i32;
    for i in 0..Q4_BLOCK_BYTES {
        let lo = (w[i] & 0x0F) as i32 - 8;
        let hi = (w[i] >> 4) as i32 - 8;
        sum += lo * x[i] as i32 + hi * x[i + Q4_BLOCK_BYTES] as i32;
    }
    sum
}

/// Rows four at a time, each activation block read once per group, then a
/// row-by-row tail. `block_dot(row, block)` gives that block's integer dot.
#[inline]
fn matvec_rows(
    y: &mut [f32],
    w: &QTensor,
    x: &QAct,
    r0: usize,
    r1: usize,
    block_dot: impl Fn(usize, usize, &[i8]) -> i32,
) {
    assert!(
        !w.packed,
        "the scalar matvec reads row-major matrices only, not packed ones"
    );
    let nb = w.blocks_per_row();
    let mut r = r0;
    while r + 4 <= r1 {
        let mut sums = [0.0f32; 4];
        for b in 0..nb {
            let xq = &x.q[b * QK..(b + 1) * QK];
            let xd = x.d[b];
            for (j, sum) in sums.iter_mut().enumerate() {
                let row = r + j;
                *sum += block_dot(row, b, xq) as f32 * w.d[row * nb + b] * xd;
            }
        }
        y[r - r0..r - r0 + 4].copy_from_slice(&sums);
        r += 4;
    }
    while r < r1 {
        let mut sum = 0.0f32;
        for b in 0..nb {
            sum += block_dot(r, b, &x.q[b * QK..(b + 1) * QK]) as f32 * w.d[r * nb + b] * x.d[b];
        }
        y[r - r0] = sum;
        r += 1;
    }
}

pub fn matvec_q8(y: &mut [f32], w: &QTensor, x: &QAct, r0: usize, r1: usize) {
    let q = w.q_i8();
    let cols = w.cols;
    matvec_rows(y, w, x, r0, r1, |row, b, xq| {
        let start = row * cols + b * QK;
        block_dot_q8(&q[start..start + QK], xq)
    });
}

pub fn matvec_q4(y: &mut [f32], w: &QTensor, x: &QAct, r0: usize, r1: usize) {
    let row_bytes = w.row_bytes();
    matvec_rows(y, w, x, r0, r1, |row, b, xq| {
        let start = row * row_bytes + b * Q4_BLOCK_BYTES;
        block_dot_q4(&w.q[start..start + Q4_BLOCK_BYTES], xq)
    });
}

/// The reference matmul: for each row, each weight block is read once and
/// used for every token; each output adds its blocks in ascending order as
/// `sumi · dw · dx`, exactly as `matvec_rows` does, so every output is
/// bit-identical to `matvec_q8` on that token (see the module's contract).
fn matmul_rows(
    y: &mut [&mut [f32]],
    w: &QTensor,
    x: &QActs,
    r0: usize,
    r1: usize,
    block_dot: impl Fn(usize, usize, &[i8]) -> i32,
) {
    assert!(
        !w.packed,
        "the scalar matmul reads row-major matrices only, not packed ones"
    );
    super::scaffold::check_matmul(y, x, r0, r1);
    let nb = w.blocks_per_row();
    for r in r0..r1 {
        for yt in y.iter_mut() {
            yt[r - r0] = 0.0;
        }
        for b in 0..nb {
            let wd = w.d[r * nb + b];
            for (t, yt) in y.iter_mut().enumerate() {
                let xt = x.token(t);
                yt[r - r0] += block_dot(r, b, &xt.q[b * QK..(b + 1) * QK]) as f32 * wd * xt.d[b];
            }
        }
    }
}

pub fn matmul_q8(y: &mut [&mut [f32]], w: &QTensor, x: &QActs, r0: usize, r1: usize) {
    let q = w.q_i8();
    let cols = w.cols;
    matmul_rows(y, w, x, r0, r1, |row, b, xq| {
        let start = row * cols + b * QK;
        block_dot_q8(&q[start..start + QK], xq)
    });
}

pub fn matmul_q4(y: &mut [&mut [f32]], w: &QTensor, x: &QActs, r0: usize, r1: usize) {
    let row_bytes = w.row_bytes();
    matmul_rows(y, w, x, r0, r1, |row, b, xq| {
        let start = row * row_bytes + b * Q4_BLOCK_BYTES;
        block_dot_q4(&w.q[start..start + Q4_BLOCK_BYTES], xq)
    });
}

/// Quantizes `x` (a multiple of QK long) into Q8_0 activations.
pub fn quantize_q8(q: &mut [i8], d: &mut [f32], x: &[f32]) {
    quant::quantize_row_q8(x, q, d);
}

/// o = x / sqrt(mean(x²) + eps) · w
pub fn rmsnorm(o: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
    let ss: f32 = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let scale = 1.0 / (ss + eps).sqrt();
    for ((oi, &xi), &wi) in o.iter_mut().zip(x).zip(w) {
        *oi = wi * (scale * xi);
    }
}

/// In-place softmax, shifted by the maximum for stability.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

/// Rotates each interleaved pair (2i, 2i+1) of every query and key head by
/// the angle whose cosine and sine are `cos[i]`, `sin[i]` (the row of the
/// current position).
pub fn rope(
    q: &mut [f32],
    k: &mut [f32],
    cos: &[f32],
    sin: &[f32],
    head_dim: usize,
    n_heads: usize,
    n_kv_heads: usize,
) {
    let rotate = |v: &mut [f32], heads: usize| {
        for head in v[..heads * head_dim].chunks_exact_mut(head_dim) {
            for (i, pair) in head.chunks_exact_mut(2).enumerate() {
                let (a, b) = (pair[0], pair[1]);
                pair[0] = a * cos[i] - b * sin[i];
                pair[1] = a * sin[i] + b * cos[i];
            }
        }
    };
    rotate(q, n_heads);
    rotate(k, n_kv_heads);
}

/// g = silu(g) · u, with silu(v) = v / (1 + e^(−v)).
pub fn silu_mul(g: &mut [f32], u: &[f32]) {
    for (gi, &ui) in g.iter_mut().zip(u) {
        *gi = *gi / (1.0 + (-*gi).exp()) * ui;
    }
}

/// y += x
pub fn add(y: &mut [f32], x: &[f32]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += xi;
    }
}

pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// y += a · x
pub fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

attention_by_rows!();
