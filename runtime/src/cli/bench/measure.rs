//! Timing: the best of repeated runs, matvec at model shapes in and out of
//! cache, the other kernels, and the memory read-bandwidth probe.

use legacy_ml::core::aligned::{bytes_as_f32, AlignedBytes};
use legacy_ml::core::quant::QK;
use legacy_ml::core::rng::Rng;
use legacy_ml::core::tensor::{QAct, QTensor, WType};
use legacy_ml::kernels;
use legacy_ml::ops::Exec;
use legacy_ml::Result;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// A matrix counts as out of cache when one pass over the whole rotation
/// reads at least this much: several times any last-level cache in sight, so
/// each matrix is evicted before it comes round again.
const COLD_SET_BYTES: usize = 256 << 20;

/// Matrix shapes (rows × K) that real models run, per model family.
const SHAPES: &[(&str, usize, usize)] = &[
    ("stories15M wq", 288, 288),
    ("stories15M w1", 768, 288),
    ("stories15M w2", 288, 768),
    ("stories15M wcls", 32000, 288),
    ("smollm2-135M wq", 576, 576),
    ("smollm2-135M w1", 1536, 576),
    ("smollm2-135M w2", 576, 1536),
    ("smollm2-135M wcls", 49152, 576),
    ("4096x4096", 4096, 4096),
];

/// Runs `f` repeatedly for about `seconds` and returns the best time of one call.
fn best_time(seconds: f64, mut f: impl FnMut()) -> Duration {
    f(); // warm caches and page in
    let budget = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut best = Duration::MAX;
    let mut runs = 0;
    while runs < 3 || start.elapsed() < budget {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
        runs += 1;
    }
    best
}

pub(super) struct KernelRow {
    pub(super) kernel: String,
    pub(super) threads: usize,
    pub(super) shape: String,
    pub(super) bytes: usize,
    pub(super) ops: usize,
    pub(super) seconds: f64,
}

impl KernelRow {
    pub(super) fn gbps(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e9
    }
    pub(super) fn gops(&self) -> f64 {
        self.ops as f64 / self.seconds / 1e9
    }
}

/// `copies` random matrices of one shape, back to back in the same kind of
/// memory a model is read into (`AlignedBytes`: huge pages where the OS has
/// them).
struct Matrices {
    wtype: WType,
    rows: usize,
    cols: usize,
    copies: usize,
    q: AlignedBytes,
    d: AlignedBytes,
}

impl Matrices {
    fn random(rng: &mut Rng, wtype: WType, rows: usize, cols: usize, copies: usize) -> Result<Matrices> {
        let q_len = wtype.quant_bytes((rows * cols) as u64) as usize;
        let d_len = rows * cols / QK * 4;
        let mut q = AlignedBytes::zeroed(q_len * copies, "benchmark weights")?;
        let mut d = AlignedBytes::zeroed(d_len * copies, "benchmark scales")?;
        for b in &mut q.as_bytes_mut()[..q_len] {
            *b = match wtype {
                WType::Q8_0 => (rng.next_u32() % 255) as u8 ^ 0x80,
                WType::Q4_0 => rng.next_u32() as u8,
            };
        }
        for s in d.as_bytes_mut()[..d_len].chunks_exact_mut(4) {
            s.copy_from_slice(&(rng.next_f32() * 0.01).to_le_bytes());
        }
        for c in 1..copies {
            q.as_bytes_mut().copy_within(..q_len, c * q_len);
            d.as_bytes_mut().copy_within(..d_len, c * d_len);
        }
        Ok(Matrices {
            wtype,
            rows,
            cols,
            copies,
            q,
            d,
        })
    }

    fn bytes_each(&self) -> usize {
        (self.q.len() + self.d.len()) / self.copies
    }

    fn view(&self, i: usize) -> Result<QTensor<'_>> {
        let (q_len, d_len) = (self.q.len() / self.copies, self.d.len() / self.copies);
        Ok(QTensor {
            wtype: self.wtype,
            rows: self.rows,
            cols: self.cols,
            q: &self.q.as_bytes()[i * q_len..(i + 1) * q_len],
            d: bytes_as_f32(&self.d.as_bytes()[i * d_len..(i + 1) * d_len])?,
            // Read as the model's matrices are (see Model::open). The bytes
            // are random, so packing them would only permute them.
            packed: legacy_ml::model::streaming::streaming().pack_row_groups,
        })
    }
}

/// Tokens per matmul row of the kernel table: a chunk at `--batch`'s default.
const MATMUL_TOKENS: usize = crate::cli::DEFAULT_BATCH;

/// One matvec's (`tokens` = 1) or matmul's (`tokens` activation rows, the
/// batched prefill's kernel) best time at `rows`×`cols` through `exec` (its
/// threads, as the model runs it): hot repeats one matrix (it stays in
/// whatever cache holds it); cold rotates through copies that together far
/// exceed the last-level cache, so every call streams its weights from
/// memory as a model's decode step or prompt chunk does.
fn time_matvec(
    exec: &Exec,
    rng: &mut Rng,
    wtype: WType,
    (rows, cols): (usize, usize),
    tokens: usize,
    cold: bool,
    seconds: f64,
) -> Result<KernelRow> {
    let x: Vec<f32> = (0..cols * tokens).map(|_| rng.symmetric(1.0)).collect();
    let (mut xq, mut xd) = (vec![0i8; cols * tokens], vec![0.0f32; cols / QK * tokens]);
    let acts = legacy_ml::ops::quantize_rows(&mut xq, &mut xd, &x, cols, tokens);
    let bytes = wtype.quant_bytes((rows * cols) as u64) as usize + rows * cols / QK * 4;
    let copies = if cold { COLD_SET_BYTES.div_ceil(bytes).max(2) } else { 1 };
    let mats = Matrices::random(rng, wtype, rows, cols, copies)?;
    let views = (0..copies).map(|i| mats.view(i)).collect::<Result<Vec<_>>>()?;
    let mut y = vec![0.0f32; rows * tokens];
    let t = if tokens == 1 {
        let act = QAct { q: acts.q, d: acts.d };
        best_time(seconds, || {
            for w in &views {
                exec.matvec(&mut y, w, &act);
                black_box(&y);
            }
        })
    } else {
        best_time(seconds, || {
            for w in &views {
                exec.matmul(y.chunks_exact_mut(rows), w, &acts);
                black_box(&y);
            }
        })
    };
    let kernel = match tokens {
        1 => format!("matvec_{}", wtype.name()),
        n => format!("matmul_{}×{n}", wtype.name()),
    };
    Ok(KernelRow {
        threads: exec.threads(),
        kernel,
        shape: String::new(),
        bytes: mats.bytes_each(),
        ops: 2 * rows * cols * tokens,
        seconds: t.as_secs_f64() / copies as f64,
    })
}

/// matvec at the largest shape through the thread pool, as the model runs
/// it, in and out of cache.
pub(super) fn bench_threaded_matvec(seconds: f64, threads: usize) -> Result<Vec<KernelRow>> {
    let exec = Exec::new(threads)?;
    let mut rng = Rng::new(2);
    let mut out = Vec::new();
    for wtype in [WType::Q8_0, WType::Q4_0] {
        for cold in [false, true] {
            let mut row = time_matvec(&exec, &mut rng, wtype, (4096, 4096), 1, cold, seconds)?;
            row.shape = format!("4096x4096 (4096x4096){}", if cold { " cold" } else { "" });
            out.push(row);
        }
    }
    Ok(out)
}

pub(super) fn bench_kernels(seconds: f64, custom: &[(usize, usize)]) -> Result<Vec<KernelRow>> {
    let exec = Exec::new(1)?;
    let mut rng = Rng::new(1);
    let mut rows_out = Vec::new();
    let shapes: Vec<(String, usize, usize)> = if custom.is_empty() {
        SHAPES.iter().map(|&(n, r, c)| (n.to_string(), r, c)).collect()
    } else {
        custom.iter().map(|&(r, c)| (format!("{r}x{c}"), r, c)).collect()
    };
    for (name, rows, cols) in shapes {
        for wtype in [WType::Q8_0, WType::Q4_0] {
            // Matrices under 1 MiB live in L2 inside a model too; only the
            // larger ones are worth timing from memory.
            let big = wtype.quant_bytes((rows * cols) as u64) >= 1 << 20;
            // The matmul at the shapes a prompt chunk runs (SmolLM2's and
            // 4096×4096, or the ones asked for).
            let matmul = !custom.is_empty() || !name.starts_with("stories15M");
            let token_counts = if matmul { &[1, MATMUL_TOKENS][..] } else { &[1][..] };
            for &tokens in token_counts {
                for cold in [false, true].into_iter().filter(|&c| !c || big) {
                    let mut row = time_matvec(&exec, &mut rng, wtype, (rows, cols), tokens, cold, seconds)?;
                    row.shape = format!("{name} ({rows}x{cols}){}", if cold { " cold" } else { "" });
                    rows_out.push(row);
                }
            }
        }
    }
    if !custom.is_empty() {
        return Ok(rows_out);
    }
    for n in [576usize, 4096] {
        let x: Vec<f32> = (0..n).map(|_| rng.symmetric(1.0)).collect();
        let w: Vec<f32> = (0..n).map(|_| rng.symmetric(1.0)).collect();
        let (mut q, mut d, mut o) = (vec![0i8; n], vec![0.0f32; n / QK], vec![0.0f32; n]);
        let mut push = |kernel: &str, bytes: usize, ops: usize, t: Duration| {
            rows_out.push(KernelRow {
                threads: 1,
                kernel: kernel.to_string(),
                shape: format!("n={n}"),
                bytes,
                ops,
                seconds: t.as_secs_f64(),
            })
        };
        let t = best_time(seconds / 4.0, || kernels::quantize_q8(black_box(&mut q), &mut d, &x));
        push("quantize_q8", n * 4, 3 * n, t);
        let t = best_time(seconds / 4.0, || kernels::rmsnorm(black_box(&mut o), &x, &w, 1e-5));
        push("rmsnorm", n * 12, 4 * n, t);
        let mut s = x.clone();
        let t = best_time(seconds / 4.0, || {
            s.copy_from_slice(&x);
            kernels::softmax(black_box(&mut s))
        });
        push("softmax", n * 8, 4 * n, t);
        let t = best_time(seconds / 4.0, || {
            black_box(kernels::dot_f32(black_box(&x), &w));
        });
        push("dot_f32", n * 8, 2 * n, t);
    }
    // Attention at SmolLM2's shape (head_dim 64 in rows of 192, its KV
    // width): decode's 16-key tile, a prompt chunk's 64-key tile, and a
    // whole 2048-position history as a decoded token reads it.
    let (head_dim, stride) = (64usize, 192usize);
    for keys in [16usize, 64, 2048] {
        let cache: Vec<f32> = (0..keys * stride).map(|_| rng.symmetric(1.0)).collect();
        let q: Vec<f32> = (0..head_dim).map(|_| rng.symmetric(1.0)).collect();
        let mut scores = vec![0.0f32; keys];
        let mut out = vec![0.0f32; head_dim];
        let shape = format!("keys={keys} head_dim={head_dim}");
        let mut push = |kernel: &str, t: Duration| {
            rows_out.push(KernelRow {
                threads: 1,
                kernel: kernel.to_string(),
                shape: shape.clone(),
                bytes: keys * head_dim * 4,
                ops: 2 * keys * head_dim,
                seconds: t.as_secs_f64(),
            })
        };
        let t = best_time(seconds / 4.0, || {
            kernels::attn_scores(black_box(&mut scores), &q, &cache, stride, 0.125)
        });
        push("attn_scores", t);
        let p: Vec<f32> = (0..keys).map(|_| rng.symmetric(1.0).abs() / keys as f32).collect();
        let t = best_time(seconds / 4.0, || {
            kernels::attn_mix(black_box(&mut out), &p, &cache, stride)
        });
        push("attn_mix", t);
    }
    Ok(rows_out)
}

/// The memory read-bandwidth probe: a buffer far larger than any cache,
/// summed by `threads` threads that each stream their own slice.
pub(super) struct Probe {
    buf: AlignedBytes,
}

impl Probe {
    pub(super) fn new(mib: usize) -> Result<Probe> {
        // The same kind of memory a model is read into (AlignedBytes: huge
        // pages where the OS has them), so the roofline holds the model to
        // the bandwidth its own weights could stream at.
        let mut buf = AlignedBytes::zeroed(mib << 20, "bandwidth probe buffer")?;
        for (i, b) in buf.as_bytes_mut().iter_mut().enumerate() {
            *b = i as u8;
        }
        Ok(Probe { buf })
    }

    /// Peak read bandwidth in GB/s: the best pass over the whole buffer in
    /// about `seconds`, by the better of the two readers.
    pub(super) fn peak_gbps(&self, threads: usize, seconds: f64) -> f64 {
        let bytes = [self.buf.as_bytes()];
        READERS
            .iter()
            .map(|&prefetch| {
                let t = best_time(seconds / 2.0, || {
                    sum_pass(&bytes, threads, prefetch);
                });
                bytes[0].len() as f64 / t.as_secs_f64() / 1e9
            })
            .fold(0.0, f64::max)
    }
}

/// The probe's two ways to read (`kernels::stream_sum`): plainly, and
/// prefetching ahead.
pub(super) const READERS: [bool; 2] = [false, true];

/// One pass of a bare sum over `slices`, `threads` threads each reading its
/// own share of every slice, as the thread pool splits each matrix by rows.
/// Over a model's weights, the time a decode step would take if it did
/// nothing but read them, from the memory and caches they are in.
pub(super) fn sum_pass(slices: &[&[u8]], threads: usize, prefetch: bool) -> Duration {
    let share = |part: usize, parts: usize| {
        slices.iter().fold(0u64, |acc, s| {
            let chunk = s.len().div_ceil(parts).next_multiple_of(64).max(64);
            let sum = s
                .chunks(chunk)
                .nth(part)
                .map_or(0, |c| kernels::stream_sum(c, prefetch));
            acc.wrapping_add(sum)
        })
    };
    if threads <= 1 {
        let start = Instant::now();
        black_box(share(0, 1));
        return start.elapsed();
    }
    // From the first thread's start to the last one's end, all started
    // together: the pass times memory, not starting and joining threads.
    let barrier = std::sync::Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|part| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    black_box(share(part, threads));
                    (start, Instant::now())
                })
            })
            .collect();
        workers.into_iter().filter_map(|w| w.join().ok()).collect()
    });
    let start = spans.iter().map(|s| s.0).min();
    let end = spans.iter().map(|s| s.1).max();
    start.zip(end).map_or(Duration::ZERO, |(a, b)| b - a)
}
