//! What every tier's kernels share around their instructions: the safe
//! entry points' bounds checks (each SIMD kernel checks its slices once, so
//! its pointer loops stay inside them, and panics where the scalar kernel
//! would panic by indexing), and the drivers that are the same in every tier
//! but for the one routine they call (`attention_by_rows!`, `rope_by_heads!`).
//!
//! Macros are textually scoped: `kernels/mod.rs` declares this module before
//! any tier, with `#[macro_use]`.

/// Attention over a KV cache's rows, built on the tier's own `dot_f32`
/// and `axpy_f32` (one call per position): what a tier without a fused
/// version binds. Row `t` is `rows[t·stride ..][.. n]`.
///
/// * `attn_scores`: out[t] = dot(q, row t) · scale, for t < out.len().
/// * `attn_mix`: out += p[t] · row t, for t < p.len() in order (axpy's
///   element operations, so a fused tier can match it bit for bit).
///
/// Both panic (`check_rows`), as slice indexing would, if a row runs past
/// `rows`.
macro_rules! attention_by_rows {
    () => {
        pub fn attn_scores(out: &mut [f32], q: &[f32], rows: &[f32], stride: usize, scale: f32) {
            let n = q.len();
            super::scaffold::check_rows(rows, out.len(), stride, n);
            for (t, score) in out.iter_mut().enumerate() {
                super::prefetch::prefetch_f32(
                    rows.as_ptr()
                        .wrapping_add((t + super::prefetch::ROWS_AHEAD) * stride),
                    n,
                );
                *score = dot_f32(q, &rows[t * stride..t * stride + n]) * scale;
            }
        }

        pub fn attn_mix(out: &mut [f32], p: &[f32], rows: &[f32], stride: usize) {
            let n = out.len();
            super::scaffold::check_rows(rows, p.len(), stride, n);
            for (t, &pt) in p.iter().enumerate() {
                super::prefetch::prefetch_f32(
                    rows.as_ptr()
                        .wrapping_add((t + super::prefetch::ROWS_AHEAD) * stride),
                    n,
                );
                axpy_f32(out, pt, &rows[t * stride..t * stride + n]);
            }
        }
    };
}

/// The rows `attn_scores`/`attn_mix` read; panics as slice indexing would
/// (before any unsafe code) when row `keys − 1` runs past `rows`.
pub(crate) fn check_rows(rows: &[f32], keys: usize, stride: usize, n: usize) {
    if keys > 0 {
        let end = (keys - 1).checked_mul(stride).and_then(|s| s.checked_add(n));
        assert!(
            end.is_some_and(|e| e <= rows.len()),
            "attention rows: {keys} rows of {n} every {stride} exceed {} floats",
            rows.len()
        );
    }
}

/// The safe `matvec_q8` and `matvec_q4` of a tier whose driver is
/// `unsafe fn matvec<const Q4: bool>(y, wq, wd, x, nb, row_stride, r0, r1)`
/// over row-major matrices: each checks its operands once (`check_matvec`)
/// and hands the driver raw pointers. `prologue` runs first (ARMv7 keeps its
/// guard linked that way).
#[allow(unused_macros)]
macro_rules! matvec_entry_points {
    () => {
        matvec_entry_points!(prologue = ());
    };
    (prologue = $prologue:expr) => {
        pub fn matvec_q8(
            y: &mut [f32],
            w: &crate::core::tensor::QTensor,
            x: &crate::core::tensor::QAct,
            r0: usize,
            r1: usize,
        ) {
            $prologue;
            let nb = super::scaffold::check_matvec(y, w, x, r0, r1, w.cols, crate::core::quant::QK);
            // SAFETY: the tier's features are verified by `guard::check`
            // before any kernel runs; check_matvec bounded
            // every row, block and scale the driver touches.
            unsafe { matvec::<false>(y.as_mut_ptr(), w.q.as_ptr(), w.d.as_ptr(), x, nb, w.cols, r0, r1) }
        }

        pub fn matvec_q4(
            y: &mut [f32],
            w: &crate::core::tensor::QTensor,
            x: &crate::core::tensor::QAct,
            r0: usize,
            r1: usize,
        ) {
            $prologue;
            let block_bytes = crate::core::quant::Q4_BLOCK_BYTES;
            let nb = super::scaffold::check_matvec(y, w, x, r0, r1, w.row_bytes(), block_bytes);
            // SAFETY: as in matvec_q8, with Q4's row stride and block size.
            unsafe {
                matvec::<true>(
                    y.as_mut_ptr(),
                    w.q.as_ptr(),
                    w.d.as_ptr(),
                    x,
                    nb,
                    w.row_bytes(),
                    r0,
                    r1,
                )
            }
        }
    };
}

/// The shapes every matmul relies on: one output row per token, each
/// holding the rows asked for. Panics, as indexing would, before any kernel
/// runs.
pub(crate) fn check_matmul(y: &[&mut [f32]], x: &crate::core::tensor::QActs, r0: usize, r1: usize) {
    assert_eq!(y.len(), x.n, "matmul: {} output rows for {} tokens", y.len(), x.n);
    assert!(r0 <= r1, "matmul rows {r0}..{r1} are reversed");
    assert!(
        y.iter().all(|yt| yt.len() >= r1 - r0),
        "matmul: an output row holds fewer than {} values",
        r1 - r0
    );
    assert!(
        x.q.len() >= x.n * x.cols && x.d.len() >= x.n * (x.cols / crate::core::quant::QK),
        "matmul: the activations are shorter than {} tokens of {} columns",
        x.n,
        x.cols
    );
}

/// The safe `matmul_q8` / `matmul_q4` of a tier with a tiled matmul over
/// row-major matrices: `check_matmul_operands`, then the tier's unsafe
/// `$driver::<Q4>(y, wq, wd, x, nb, row_stride, r0, r1)` (x86's
/// `matmul_rows`, AArch64's `matmul` in `neon_matmul!`).
#[cfg(any(
    all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")),
    all(feature = "isa-neon", any(target_arch = "aarch64", target_arch = "arm"))
))]
macro_rules! tiled_matmul_entry_points {
    ($driver:ident) => {
        pub fn matmul_q8(
            y: &mut [&mut [f32]],
            w: &crate::core::tensor::QTensor,
            x: &crate::core::tensor::QActs,
            r0: usize,
            r1: usize,
        ) {
            let nb = super::scaffold::check_matmul_operands(y, w, x, r0, r1, w.cols, crate::core::quant::QK, false);
            if x.n == 0 || r0 == r1 {
                return;
            }
            // SAFETY: the tier's features are verified by `guard::check`
            // before any kernel runs; check_matmul_operands bounded every
            // row, block and scale of W, every token's activations and every
            // output row.
            unsafe { $driver::<false>(y, w.q.as_ptr(), w.d.as_ptr(), x, nb, w.cols, r0, r1) }
        }

        pub fn matmul_q4(
            y: &mut [&mut [f32]],
            w: &crate::core::tensor::QTensor,
            x: &crate::core::tensor::QActs,
            r0: usize,
            r1: usize,
        ) {
            let block_bytes = crate::core::quant::Q4_BLOCK_BYTES;
            let nb = super::scaffold::check_matmul_operands(y, w, x, r0, r1, w.row_bytes(), block_bytes, false);
            if x.n == 0 || r0 == r1 {
                return;
            }
            // SAFETY: as in matmul_q8, with Q4's row stride and block size.
            unsafe { $driver::<true>(y, w.q.as_ptr(), w.d.as_ptr(), x, nb, w.row_bytes(), r0, r1) }
        }
    };
}

/// The bounds a tiled matmul relies on, before any unsafe code:
/// `check_matmul`'s shapes, and each token's matvec bounds (`check_matvec`,
/// or with `any_layout` `check_matvec_any_layout`), so the matmul panics
/// where the tier's matvec would. Returns the blocks per row. One check for
/// the x86 (`tiled_matmul_entry_points!`, avx512vnni) and AArch64
/// (`aarch64::neon_matmul!`) tiles.
#[cfg(any(
    all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")),
    all(feature = "isa-neon", any(target_arch = "aarch64", target_arch = "arm"))
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_matmul_operands(
    y: &[&mut [f32]],
    w: &crate::core::tensor::QTensor,
    x: &crate::core::tensor::QActs,
    r0: usize,
    r1: usize,
    row_stride: usize,
    block_bytes: usize,
    any_layout: bool,
) -> usize {
    check_matmul(y, x, r0, r1);
    for (t, yt) in y.iter().enumerate() {
        let xt = x.token(t);
        if any_layout {
            check_matvec_any_layout(yt, w, &xt, r0, r1, row_stride, block_bytes);
        } else {
            check_matvec(yt, w, &xt, r0, r1, row_stride, block_bytes);
        }
    }
    w.blocks_per_row()
}

/// The bounds `rope` relies on: q and k hold their heads, cos/sin hold
/// head_dim / 2 angles. Panics, as the scalar kernel would by slice
/// indexing, before any pointer arithmetic. Returns the pairs per head.
#[allow(dead_code)]
pub(crate) fn check_rope(
    q: &[f32],
    k: &[f32],
    cos: &[f32],
    sin: &[f32],
    head_dim: usize,
    n_heads: usize,
    n_kv_heads: usize,
) -> usize {
    let pairs = head_dim / 2;
    assert!(
        q.len() >= n_heads * head_dim && k.len() >= n_kv_heads * head_dim,
        "rope: q or k shorter than its heads"
    );
    assert!(
        cos.len() >= pairs && sin.len() >= pairs,
        "rope: cos/sin shorter than head_dim / 2"
    );
    pairs
}

/// `rope` for a tier whose `rotate(v, cos, sin, pairs)` turns all `pairs`
/// pairs of one head (an `unsafe fn` with the tier's `#[target_feature]`,
/// reading `v` for 2·pairs floats and cos/sin for `pairs`): rotates each
/// interleaved pair (2i, 2i+1) of every query and key head by the angle
/// whose cosine and sine are `cos[i]`, `sin[i]`.
#[allow(unused_macros)]
macro_rules! rope_by_heads {
    () => {
        pub fn rope(
            q: &mut [f32],
            k: &mut [f32],
            cos: &[f32],
            sin: &[f32],
            head_dim: usize,
            n_heads: usize,
            n_kv_heads: usize,
        ) {
            let pairs = super::scaffold::check_rope(q, k, cos, sin, head_dim, n_heads, n_kv_heads);
            for (v, heads) in [(q, n_heads), (k, n_kv_heads)] {
                for h in 0..heads {
                    // SAFETY: the tier's features are verified by `guard::check`
                    // before any kernel runs; head h spans
                    // [h·head_dim, h·head_dim + 2·pairs) inside v, and cos/sin
                    // hold `pairs` elements (check_rope).
                    unsafe {
                        rotate(
                            v.as_mut_ptr().add(h * head_dim),
                            cos.as_ptr(),
                            sin.as_ptr(),
                            pairs,
                        )
                    }
                }
            }
        }
    };
}

/// The bounds every SIMD matvec relies on, checked once per call so that its
/// pointer loops stay inside the slices whatever the caller passes. Rows are
/// `row_stride` bytes apart and a block's quants are `block_bytes` long (as
/// the scalar kernels index them). Returns the number of blocks per row.
///
/// Inputs the scalar kernels would panic on (by slice indexing) panic here
/// too, before any unsafe code runs.
#[cfg(any(
    all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")),
    all(feature = "isa-neon", any(target_arch = "aarch64", target_arch = "arm"))
))]
pub(crate) fn check_matvec(
    y: &[f32],
    w: &crate::core::tensor::QTensor,
    x: &crate::core::tensor::QAct,
    r0: usize,
    r1: usize,
    row_stride: usize,
    block_bytes: usize,
) -> usize {
    assert!(
        !w.packed,
        "this tier's matvec reads row-major matrices only, not packed ones"
    );
    check_matvec_any_layout(y, w, x, r0, r1, row_stride, block_bytes)
}

/// `check_matvec` for a matvec that also reads packed matrices
/// (`core::tensor::pack_row_groups`): a packed group spans the same bytes as
/// its four rows, and [r0, r1) must cut the matrix only between groups, or
/// at its end.
#[cfg(any(
    all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")),
    all(feature = "isa-neon", any(target_arch = "aarch64", target_arch = "arm"))
))]
pub(crate) fn check_matvec_any_layout(
    y: &[f32],
    w: &crate::core::tensor::QTensor,
    x: &crate::core::tensor::QAct,
    r0: usize,
    r1: usize,
    row_stride: usize,
    block_bytes: usize,
) -> usize {
    use crate::core::quant::QK;
    let nb = w.blocks_per_row();
    assert!(r0 <= r1, "matvec rows {r0}..{r1} are reversed");
    // Packed rows lie in groups: a range may cut between them, or anywhere
    // among the row-major rows after the last whole group.
    let between_groups = |r: usize| r.is_multiple_of(4) || r >= w.rows / 4 * 4;
    assert!(
        !w.packed || (between_groups(r0) && between_groups(r1) && row_stride == nb * block_bytes),
        "matvec rows {r0}..{r1} of a packed matrix must start and end between four-row groups"
    );
    assert!(
        y.len() >= r1 - r0,
        "matvec output holds {} rows, not {}",
        y.len(),
        r1 - r0
    );
    assert!(
        x.q.len() >= nb * QK && x.d.len() >= nb,
        "matvec activation is shorter than {} columns",
        nb * QK
    );
    if r1 > r0 {
        // The last row read ends at (r1 - 1) * row_stride + nb * block_bytes.
        let q_end = (r1 - 1)
            .checked_mul(row_stride)
            .and_then(|v| v.checked_add(nb * block_bytes));
        assert!(
            q_end.is_some_and(|e| e <= w.q.len()),
            "matvec weights are shorter than row {r1}"
        );
        assert!(
            r1.checked_mul(nb).is_some_and(|e| e <= w.d.len()),
            "matvec scales are shorter than row {r1}"
        );
    }
    nb
}

/// `quantize_q8` for a tier whose `unsafe fn quantize_block(q: *mut i8,
/// x: *const f32) -> f32` quantizes one block of QK floats and returns its
/// scale: as the scalar kernel's zip, the whole blocks all three slices hold.
#[allow(unused_macros)]
macro_rules! quantize_by_blocks {
    () => {
        pub fn quantize_q8(q: &mut [i8], d: &mut [f32], x: &[f32]) {
            use crate::core::quant::QK;
            let blocks = (x.len() / QK).min(q.len() / QK).min(d.len());
            for b in 0..blocks {
                let (xb, qb) = (&x[b * QK..(b + 1) * QK], &mut q[b * QK..(b + 1) * QK]);
                // SAFETY: the tier's features are verified by the guard
                // (`guard`) before any kernel runs; both slices are
                // exactly QK long.
                d[b] = unsafe { quantize_block(qb.as_mut_ptr(), xb.as_ptr()) };
            }
        }
    };
}

/// `dot_f32`, `rmsnorm` and `axpy_f32` (and `add`, unless the tier says
/// `without add`) for a tier with `unsafe fn dot(a, b, n) -> f32`,
/// `unsafe fn scale_mul(o, x, w, scale, n)` (o = w · (scale · x)) and
/// `unsafe fn axpy(y, a: Option<f32>, x, n)`, each reading n elements of
/// each pointer.
#[allow(unused_macros)]
macro_rules! float_entry_points {
    () => {
        float_entry_points!(without add);

        /// y += x
        pub fn add(y: &mut [f32], x: &[f32]) {
            let n = y.len().min(x.len());
            // SAFETY: the tier's features are verified by the guard
            // (`guard`); both slices hold n elements.
            unsafe { axpy(y.as_mut_ptr(), None, x.as_ptr(), n) }
        }
    };
    (without add) => {
        pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
            let n = a.len().min(b.len());
            // SAFETY: the tier's features are verified by the guard
            // (`guard`); both slices hold n elements.
            unsafe { dot(a.as_ptr(), b.as_ptr(), n) }
        }

        /// o = x / sqrt(mean(x²) + eps) · w
        pub fn rmsnorm(o: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
            // SAFETY: as in dot_f32; x holds x.len() elements.
            let ss = unsafe { dot(x.as_ptr(), x.as_ptr(), x.len()) } / x.len() as f32;
            let scale = 1.0 / (ss + eps).sqrt();
            let n = o.len().min(x.len()).min(w.len());
            // SAFETY: as above; all three slices hold n elements.
            unsafe { scale_mul(o.as_mut_ptr(), x.as_ptr(), w.as_ptr(), scale, n) }
        }

        /// y += a · x
        pub fn axpy_f32(y: &mut [f32], a: f32, x: &[f32]) {
            let n = y.len().min(x.len());
            // SAFETY: as in dot_f32.
            unsafe { axpy(y.as_mut_ptr(), Some(a), x.as_ptr(), n) }
        }
    };
}
