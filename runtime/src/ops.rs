//! Operations the model is written in: thin wrappers over the bound kernels
//! that pick the kernel by weight type, cover whole matrices, and (with the
//! `threads` feature) split the work across the pool.

use crate::core::quant::QK;
use crate::core::tensor::{QAct, QTensor, WType};
use crate::kernels;

pub use kernels::{add, axpy_f32, dot_f32, rmsnorm, rope, silu_mul, softmax};

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

/// Quantizes `x` into the Q8_0 activation buffers and returns the view.
pub fn quantize<'a>(q: &'a mut [i8], d: &'a mut [f32], x: &[f32]) -> QAct<'a> {
    let n = x.len();
    let (q, d) = (&mut q[..n], &mut d[..n / QK]);
    kernels::quantize_q8(q, d, x);
    QAct { q, d }
}
