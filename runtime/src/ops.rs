//! Operations the model is written in: thin wrappers over the bound kernels
//! that pick the kernel by weight type and cover whole matrices.

use crate::core::quant::QK;
use crate::core::tensor::{QAct, QTensor, WType};
use crate::kernels;

/// y = W · x over all rows of W.
pub fn matvec(y: &mut [f32], w: &QTensor, x: &QAct) {
    debug_assert_eq!(y.len(), w.rows);
    debug_assert_eq!(x.len(), w.cols);
    match w.wtype {
        WType::Q8_0 => kernels::matvec_q8(y, w, x, 0, w.rows),
        WType::Q4_0 => kernels::matvec_q4(y, w, x, 0, w.rows),
    }
}

/// Quantizes `x` into the Q8_0 activation buffers and returns the view.
pub fn quantize<'a>(q: &'a mut [i8], d: &'a mut [f32], x: &[f32]) -> QAct<'a> {
    let n = x.len();
    let (q, d) = (&mut q[..n], &mut d[..n / QK]);
    kernels::quantize_q8(q, d, x);
    QAct { q, d }
}

pub use kernels::{add, axpy_f32, dot_f32, rmsnorm, rope, silu_mul, softmax};
