//! Operations the model is written in: thin wrappers over the bound kernels
//! that pick the kernel by weight type, cover whole matrices, and (with the
//! `threads` feature) split the work across the pool.

use crate::core::quant::QK;
use crate::core::tensor::{QAct, QActs, QTensor, WType};
use crate::kernels;

pub use kernels::{add, attn_mix, attn_scores, axpy_f32, dot_f32, prefetch_l2, rmsnorm, rope, silu_mul, softmax};

/// Runs work on one thread, or with feature `threads` on a pool. Work is
/// split statically into contiguous ranges of whole units, so every unit is
/// computed by the same code whatever the thread count: results are
/// bit-identical for any number of threads.
pub struct Exec {
    #[cfg(feature = "threads")]
    pool: crate::core::threads::Pool,
}

impl Exec {
    /// `threads` is ignored without the `threads` feature.
    pub fn new(threads: usize) -> crate::Result<Exec> {
        #[cfg(feature = "threads")]
        return Ok(Exec {
            pool: crate::core::threads::Pool::new(threads)?,
        });
        #[cfg(not(feature = "threads"))]
        {
            let _ = threads;
            Ok(Exec {})
        }
    }

    pub fn threads(&self) -> usize {
        #[cfg(feature = "threads")]
        return self.pool.threads();
        #[cfg(not(feature = "threads"))]
        1
    }

    /// Units per thread when `units` are split into contiguous ranges of
    /// whole `step`-unit groups (the last range may be short).
    pub fn units_per_thread(&self, units: usize, step: usize) -> usize {
        (units.div_ceil(step).div_ceil(self.threads()) * step).max(step)
    }

    /// Runs `f` once per part, the parts spread over the threads (part i on
    /// thread i). The caller splits its data so that parts are disjoint.
    pub fn for_parts<P: Send>(&self, parts: impl Iterator<Item = P>, f: &(dyn Fn(P) + Sync)) {
        #[cfg(feature = "threads")]
        if self.pool.threads() > 1 {
            use crate::core::threads::MAX_THREADS;
            use std::sync::Mutex;
            let slots: [Mutex<Option<P>>; MAX_THREADS] = std::array::from_fn(|_| Mutex::new(None));
            for (i, part) in parts.enumerate() {
                match slots.get(i).filter(|_| i < self.pool.threads()) {
                    Some(slot) => *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(part),
                    // More parts than threads: run the surplus here rather than drop it.
                    None => f(part),
                }
            }
            self.pool.run(&|i| {
                if let Some(part) = slots
                    .get(i)
                    .and_then(|s| s.lock().unwrap_or_else(|e| e.into_inner()).take())
                {
                    f(part);
                }
            });
            return;
        }
        for part in parts {
            f(part);
        }
    }

    /// y = W · x over all rows of W, rows split between threads in
    /// multiples of 4 (the kernels' row group), so each row is computed by
    /// the same code path whatever the thread count.
    pub fn matvec(&self, y: &mut [f32], w: &QTensor, x: &QAct) {
        debug_assert_eq!(y.len(), w.rows);
        debug_assert_eq!(x.len(), w.cols);
        let per = self.units_per_thread(w.rows, 4);
        let parts = y[..w.rows].chunks_mut(per).enumerate().map(|(i, part)| (i * per, part));
        self.for_parts(parts, &|(r0, part): (usize, &mut [f32])| {
            let r1 = r0 + part.len();
            match w.wtype {
                WType::Q8_0 => kernels::matvec_q8(part, w, x, r0, r1),
                WType::Q4_0 => kernels::matvec_q4(part, w, x, r0, r1),
            }
        });
    }
}

impl Exec {
    /// y_m = W_m · x for matrices that read the same activation (wq, wk and
    /// wv; w1 and w3) in one pass of the pool, so the threads meet once
    /// instead of once per matrix. Their 4-row groups are laid end to end
    /// and split between threads in contiguous runs; each matrix's share
    /// still starts on one of its own group boundaries, so every row is
    /// computed by the same code whatever the thread count.
    pub fn matvecs<const N: usize>(&self, ys: [&mut [f32]; N], ws: [&QTensor; N], x: &QAct) {
        let groups = ws.map(|w| w.rows.div_ceil(4));
        let total: usize = groups.iter().sum();
        let per = self.units_per_thread(total, 1);
        let mut rest = ys;
        for (y, w) in rest.iter_mut().zip(ws) {
            debug_assert!(y.len() >= w.rows && x.len() == w.cols);
            let whole = std::mem::take(y);
            *y = &mut whole[..w.rows];
        }
        let parts = (0..total.div_ceil(per)).map(move |t| {
            let (g0, g1) = (t * per, ((t + 1) * per).min(total));
            let mut segments: [Option<(usize, usize, &mut [f32])>; N] = std::array::from_fn(|_| None);
            let mut first = 0;
            for m in 0..N {
                let (a, b) = (g0.max(first), g1.min(first + groups[m]));
                if a < b {
                    let (r0, r1) = (4 * (a - first), (4 * (b - first)).min(ws[m].rows));
                    let (mine, left) = std::mem::take(&mut rest[m]).split_at_mut(r1 - r0);
                    rest[m] = left;
                    segments[m] = Some((r0, r1, mine));
                }
                first += groups[m];
            }
            segments
        });
        self.for_parts(parts, &|segments| {
            for (m, segment) in segments.into_iter().enumerate() {
                if let Some((r0, r1, y)) = segment {
                    match ws[m].wtype {
                        WType::Q8_0 => kernels::matvec_q8(y, ws[m], x, r0, r1),
                        WType::Q4_0 => kernels::matvec_q4(y, ws[m], x, r0, r1),
                    }
                }
            }
        });
    }
}

/// The most tokens one `Exec::matmul` takes: the largest prompt chunk
/// (`Transformer::set_batch`). Each thread's share of a matmul carries one
/// output slice per token on the stack, so this bounds that.
pub const MAX_BATCH: usize = 128;

impl Exec {
    /// y_t = W · x_t for the `x.n` tokens of `x` (at most `MAX_BATCH`),
    /// `ys` yielding one output row per token (`w.rows` long at least):
    /// each weight matrix is run once over all tokens. Rows are split
    /// between threads as `matvec` splits them, in multiples of 4 (the
    /// kernels' row group), and the matmul kernels are bit-identical to the
    /// matvec per token (`kernels::scalar`'s contract), so every output is
    /// the one `matvec` gives, whatever the thread count or the batch.
    pub fn matmul<'y>(&self, ys: impl IntoIterator<Item = &'y mut [f32]>, w: &QTensor, x: &QActs) {
        self.matmuls([ys], [w], x);
    }

    /// `matmul` for matrices that read the same activations (wq, wk and
    /// wv; w1 and w3) in one pass of the pool, so the threads meet once
    /// instead of once per matrix: their 4-row groups laid end to end and
    /// split as `matvecs` splits them, each share starting on one of its
    /// matrix's group boundaries, so every output is still the matvec's.
    pub fn matmuls<'y, Y: IntoIterator<Item = &'y mut [f32]>, const N: usize>(
        &self,
        ys: [Y; N],
        ws: [&QTensor; N],
        x: &QActs,
    ) {
        let n = x.n;
        assert!(n <= MAX_BATCH, "matmul: {n} tokens, more than MAX_BATCH ({MAX_BATCH})");
        let mut rest: [[&mut [f32]; MAX_BATCH]; N] =
            std::array::from_fn(|_| std::array::from_fn(|_| Default::default()));
        for ((rows, ys), w) in rest.iter_mut().zip(ys).zip(ws) {
            debug_assert_eq!(x.cols, w.cols);
            let mut given = 0;
            for (slot, y) in rows.iter_mut().zip(ys) {
                *slot = &mut y[..w.rows];
                given += 1;
            }
            assert_eq!(given, n, "matmul: {given} output rows for {n} tokens");
        }
        let groups = ws.map(|w| w.rows.div_ceil(4));
        let total: usize = groups.iter().sum();
        let per = self.units_per_thread(total, 1);
        type Segment<'a> = Option<(usize, usize, [&'a mut [f32]; MAX_BATCH])>;
        let parts = (0..total.div_ceil(per)).map(move |p| {
            let (g0, g1) = (p * per, ((p + 1) * per).min(total));
            let mut segments: [Segment; N] = std::array::from_fn(|_| None);
            let mut first = 0;
            for m in 0..N {
                let (a, b) = (g0.max(first), g1.min(first + groups[m]));
                if a < b {
                    let (r0, r1) = (4 * (a - first), (4 * (b - first)).min(ws[m].rows));
                    let mut mine: [&mut [f32]; MAX_BATCH] = std::array::from_fn(|_| Default::default());
                    for (mine, rest) in mine.iter_mut().zip(rest[m].iter_mut()).take(n) {
                        (*mine, *rest) = std::mem::take(rest).split_at_mut(r1 - r0);
                    }
                    segments[m] = Some((r0, r1, mine));
                }
                first += groups[m];
            }
            segments
        });
        self.for_parts(parts, &|segments: [Segment; N]| {
            for (m, segment) in segments.into_iter().enumerate() {
                if let Some((r0, r1, mut y)) = segment {
                    match ws[m].wtype {
                        WType::Q8_0 => kernels::matmul_q8(&mut y[..n], ws[m], x, r0, r1),
                        WType::Q4_0 => kernels::matmul_q4(&mut y[..n], ws[m], x, r0, r1),
                    }
                }
            }
        });
    }
}

/// Quantizes the first `n` rows of `x` (rows of `cols` floats) into the
/// Q8_0 activation buffers, row by row as `quantize` does each, and
/// returns the view.
pub fn quantize_rows<'a>(q: &'a mut [i8], d: &'a mut [f32], x: &[f32], cols: usize, n: usize) -> QActs<'a> {
    let nb = cols / QK;
    let (q, d) = (&mut q[..n * cols], &mut d[..n * nb]);
    for ((qt, dt), xt) in q
        .chunks_exact_mut(cols)
        .zip(d.chunks_exact_mut(nb))
        .zip(x.chunks_exact(cols))
    {
        kernels::quantize_q8(qt, dt, xt);
    }
    QActs { q, d, cols, n }
}

/// Quantizes `x` into the Q8_0 activation buffers and returns the view.
pub fn quantize<'a>(q: &'a mut [i8], d: &'a mut [f32], x: &[f32]) -> QAct<'a> {
    let n = x.len();
    let (q, d) = (&mut q[..n], &mut d[..n / QK]);
    kernels::quantize_q8(q, d, x);
    QAct { q, d }
}
