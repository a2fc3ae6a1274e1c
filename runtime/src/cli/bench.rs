//! `ml bench`: kernel throughput at model shapes, a memory read-bandwidth
//! probe, and model decode speed against its memory roofline.
//!
//! At batch 1 a decode step reads every weight once, so tok/s cannot beat
//! bandwidth ÷ weight bytes per token: that quotient is the roofline, and
//! the fraction of it reached says how much speed is left on the table.

use super::stdout_error;
use legacy_ml::core::aligned::{bytes_as_f32, AlignedBytes};
use legacy_ml::core::quant::QK;
use legacy_ml::core::rng::Rng;
use legacy_ml::core::tensor::{QAct, QTensor, WType};
use legacy_ml::kernels;
use legacy_ml::model::format::TensorKind;
use legacy_ml::model::sampler::argmax;
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::Model;
use legacy_ml::ops::Exec;
use legacy_ml::Result;
use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// A .mlb model to time decoding with (prompt, then generated tokens),
    /// against its roofline: the bandwidth of a bare sum over its own weights.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Prompt tokens fed before timing decode.
    #[arg(long, default_value_t = 16)]
    prompt: usize,
    /// Tokens generated while timing decode, at least 1.
    #[arg(short = 'n', long, default_value_t = 64, allow_negative_numbers = true, value_parser = super::count)]
    steps: usize,
    /// Size of the peak bandwidth probe's buffer in MiB (far larger than the last-level cache).
    #[arg(long, default_value_t = 512)]
    probe_mib: usize,
    /// Seconds spent on each measurement (more is steadier).
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Skip the per-kernel table.
    #[arg(long)]
    no_kernels: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Time matvec at these shapes (ROWSxK, e.g. 49152x576) instead of the
    /// built-in model shapes; may be repeated.
    #[arg(long = "shape", value_parser = parse_shape)]
    shapes: Vec<(usize, usize)>,
    #[command(flatten)]
    ctx: super::CtxArg,
    #[command(flatten)]
    threads: super::ThreadsArg,
}

fn parse_shape(s: &str) -> std::result::Result<(usize, usize), String> {
    let (r, k) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("'{s}' is not ROWSxK, e.g. 4096x4096"))?;
    let num = |v: &str| v.trim().parse::<usize>().map_err(|e| format!("'{v}' in '{s}': {e}"));
    let (rows, k) = (num(r)?, num(k)?);
    if rows == 0 || k == 0 || !k.is_multiple_of(QK) || rows.checked_mul(k).is_none_or(|n| n as u64 > 1u64 << 32) {
        return Err(format!(
            "'{s}': need rows ≥ 1, K a positive multiple of {QK}, rows×K ≤ 2^32"
        ));
    }
    Ok((rows, k))
}

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

struct KernelRow {
    kernel: String,
    threads: usize,
    shape: String,
    bytes: usize,
    ops: usize,
    seconds: f64,
}

impl KernelRow {
    fn gbps(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e9
    }
    fn gops(&self) -> f64 {
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
            packed: legacy_ml::core::isa::streaming().pack_row_groups,
        })
    }
}

/// One matvec's best time at `rows`×`cols` through `exec` (its threads, as
/// the model runs it): hot repeats one matrix (it stays in whatever cache
/// holds it); cold rotates through copies that together far exceed the
/// last-level cache, so every call streams its weights from memory as a
/// model's decode step does.
fn time_matvec(
    exec: &Exec,
    rng: &mut Rng,
    wtype: WType,
    (rows, cols): (usize, usize),
    cold: bool,
    seconds: f64,
) -> Result<KernelRow> {
    let x: Vec<f32> = (0..cols).map(|_| rng.symmetric(1.0)).collect();
    let (mut xq, mut xd) = (vec![0i8; cols], vec![0.0f32; cols / QK]);
    kernels::quantize_q8(&mut xq, &mut xd, &x);
    let bytes = wtype.quant_bytes((rows * cols) as u64) as usize + rows * cols / QK * 4;
    let copies = if cold { COLD_SET_BYTES.div_ceil(bytes).max(2) } else { 1 };
    let mats = Matrices::random(rng, wtype, rows, cols, copies)?;
    let views = (0..copies).map(|i| mats.view(i)).collect::<Result<Vec<_>>>()?;
    let act = QAct { q: &xq, d: &xd };
    let mut y = vec![0.0f32; rows];
    let t = best_time(seconds, || {
        for w in &views {
            exec.matvec(&mut y, w, &act);
            black_box(&y);
        }
    });
    Ok(KernelRow {
        threads: exec.threads(),
        kernel: format!("matvec_{}", wtype.name()),
        shape: String::new(),
        bytes: mats.bytes_each(),
        ops: 2 * rows * cols,
        seconds: t.as_secs_f64() / copies as f64,
    })
}

/// matvec at the largest shape through the thread pool, as the model runs
/// it, in and out of cache.
fn bench_threaded_matvec(seconds: f64, threads: usize) -> Result<Vec<KernelRow>> {
    let exec = Exec::new(threads)?;
    let mut rng = Rng::new(2);
    let mut out = Vec::new();
    for wtype in [WType::Q8_0, WType::Q4_0] {
        for cold in [false, true] {
            let mut row = time_matvec(&exec, &mut rng, wtype, (4096, 4096), cold, seconds)?;
            row.shape = format!("4096x4096 (4096x4096){}", if cold { " cold" } else { "" });
            out.push(row);
        }
    }
    Ok(out)
}

fn bench_kernels(seconds: f64, custom: &[(usize, usize)]) -> Result<Vec<KernelRow>> {
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
            for cold in [false, true].into_iter().filter(|&c| !c || big) {
                let mut row = time_matvec(&exec, &mut rng, wtype, (rows, cols), cold, seconds)?;
                row.shape = format!("{name} ({rows}x{cols}){}", if cold { " cold" } else { "" });
                rows_out.push(row);
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
    Ok(rows_out)
}

/// The memory read-bandwidth probe: a buffer far larger than any cache,
/// summed by `threads` threads that each stream their own slice.
struct Probe {
    buf: AlignedBytes,
}

impl Probe {
    fn new(mib: usize) -> Result<Probe> {
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
    fn peak_gbps(&self, threads: usize, seconds: f64) -> f64 {
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
const READERS: [bool; 2] = [false, true];

/// One pass of a bare sum over `slices`, `threads` threads each reading its
/// own share of every slice, as the thread pool splits each matrix by rows.
/// Over a model's weights, the time a decode step would take if it did
/// nothing but read them, from the memory and caches they are in.
fn sum_pass(slices: &[&[u8]], threads: usize, prefetch: bool) -> Duration {
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

struct ModelRun {
    path: String,
    wtype: &'static str,
    bytes_per_token: usize,
    prompt_tokens: usize,
    prompt_tok_s: f64,
    decode_tokens: usize,
    decode_tok_s: f64,
    /// Read bandwidth of the sum passes over the weights interleaved with
    /// the decode.
    decode_bandwidth_gbps: f64,
}

/// The bytes one decode step reads, in the model's own memory: every
/// matrix (quants and scales) and norm vector once, and of the embedding
/// table one row, unless it doubles as the classifier and is read whole.
fn weights_read_per_token(model: &Model) -> Vec<&[u8]> {
    let h = model.header();
    let mut out = Vec::new();
    for t in &model.layout().tensors {
        let (q, d) = model.tensor_bytes(t);
        if t.kind == TensorKind::Quant && t.name == "tok_emb" && !h.shared_classifier {
            out.extend([&q[..q.len() / t.rows], &d[..d.len() / t.rows]]);
        } else {
            out.extend([q, d]);
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Decode tokens timed between passes of a bare sum over the same weights
/// (`sum_pass`, by either reader). The roofline is that sum's bandwidth, not
/// a probe's over a buffer of its own: the sum reads the very bytes the decode reads, in the
/// same memory, cache state and contention, so the fraction reached
/// measures the runtime rather than the neighbours or the cache size (on a
/// machine whose last-level cache holds much of the model, a probe over a
/// separate buffer underrates the bandwidth the model is read at). A pass
/// leaves the caches as a decode step would.
const DECODE_CHUNK: usize = 4;

fn bench_model(
    path: &std::path::Path,
    model: &Model,
    mut tf: Transformer<'_>,
    prompt: usize,
    steps: usize,
    threads: usize,
) -> Result<ModelRun> {
    let weights = weights_read_per_token(model);
    let bytes_per_token: usize = weights.iter().map(|s| s.len()).sum();
    let h = *tf.header();
    let max_seq = h.max_seq as usize;
    let prompt = prompt.clamp(1, max_seq.saturating_sub(1).max(1));
    let steps = steps.min(max_seq - prompt).max(1);
    let tokens: Vec<u32> = (0..prompt as u32).map(|i| (i * 7919 + 1) % h.vocab).collect();
    // Warm-up pass: page the weights in so the first timing is not disk.
    tf.prefill(&tokens)?;
    let start = Instant::now();
    let mut next = argmax(tf.prefill(&tokens)?);
    let prompt_time = start.elapsed().as_secs_f64();
    // Passes alternate between the two readers; the roofline takes the
    // faster one's bandwidth.
    let (mut decode_time, mut sum_time, mut passes) = (0.0, [0.0; 2], [0usize; 2]);
    let mut done = 0;
    while done < steps {
        let reader = (passes[0] + passes[1]) % 2;
        sum_time[reader] += sum_pass(&weights, threads, READERS[reader]).as_secs_f64();
        passes[reader] += 1;
        let chunk = DECODE_CHUNK.min(steps - done);
        let start = Instant::now();
        for pos in prompt + done..prompt + done + chunk {
            next = argmax(tf.forward(next, pos)?);
        }
        decode_time += start.elapsed().as_secs_f64();
        done += chunk;
    }
    Ok(ModelRun {
        path: path.display().to_string(),
        wtype: h.wtype.name(),
        bytes_per_token,
        prompt_tokens: prompt,
        prompt_tok_s: prompt as f64 / prompt_time,
        decode_tokens: steps,
        decode_tok_s: steps as f64 / decode_time,
        decode_bandwidth_gbps: (0..2)
            .filter(|&r| passes[r] > 0)
            .map(|r| (passes[r] * bytes_per_token) as f64 / sum_time[r] / 1e9)
            .fold(0.0, f64::max),
    })
}

/// How the matrices of a model read into memory, and the kernel rows' own,
/// are laid out on this CPU (`core::isa::streaming`).
fn matrix_order() -> &'static str {
    match (
        legacy_ml::core::isa::streaming().pack_row_groups,
        kernels::PACKS_ROW_GROUPS,
    ) {
        (true, _) => "matrices packed in four-row groups",
        (false, true) => "matrices row-major (this CPU streams them faster so; ML_PACK=1 packs them)",
        (false, false) => "matrices row-major",
    }
}

pub fn run(a: BenchArgs) -> Result<()> {
    let threads = a.threads.count();
    // The model is validated before anything is measured.
    let model = a.model.as_deref().map(Model::open).transpose()?;
    let tf = model.as_ref().map(|m| a.ctx.transformer(m, threads)).transpose()?;
    note!(
        "bench: tier {}, probing memory bandwidth ({} MiB buffer)...",
        kernels::TIER,
        a.probe_mib
    );
    let probe = Probe::new(a.probe_mib)?;
    let bw1 = probe.peak_gbps(1, a.seconds);
    let bwn = if threads > 1 {
        probe.peak_gbps(threads, a.seconds)
    } else {
        bw1
    };
    let bandwidth = |t: usize| if t > 1 { bwn } else { bw1 };
    let mut kernel_rows = Vec::new();
    if !a.no_kernels {
        note!("bench: kernels...");
        kernel_rows = bench_kernels(a.seconds, &a.shapes)?;
        if threads > 1 {
            kernel_rows.extend(bench_threaded_matvec(a.seconds, threads)?);
        }
    }
    let model_run = match (&a.model, &model, tf) {
        (Some(p), Some(model), Some(tf)) => {
            note!("bench: decoding {} on {threads} thread(s)...", p.display());
            Some(bench_model(p, model, tf, a.prompt, a.steps, threads)?)
        }
        _ => None,
    };
    let roofline = |m: &ModelRun| m.decode_bandwidth_gbps * 1e9 / m.bytes_per_token as f64;
    let peak_roofline = |m: &ModelRun| bandwidth(threads) * 1e9 / m.bytes_per_token as f64;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if a.json {
        let kernels_json: Vec<String> = kernel_rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"kernel\": \"{}\", \"shape\": \"{}\", \"threads\": {}, \"bytes\": {}, \"ops\": {}, \"seconds\": {:e}, \"gb_per_s\": {:.3}, \"gops\": {:.3}, \"bandwidth_fraction\": {:.4}}}",
                    r.kernel,
                    r.shape,
                    r.threads,
                    r.bytes,
                    r.ops,
                    r.seconds,
                    r.gbps(),
                    r.gops(),
                    r.gbps() / bandwidth(r.threads)
                )
            })
            .collect();
        let model_json = match &model_run {
            Some(m) => format!(
                "{{\"path\": {:?}, \"wtype\": \"{}\", \"threads\": {threads}, \"weight_bytes_per_token\": {}, \"prompt_tokens\": {}, \"prompt_tok_per_s\": {:.3}, \"decode_tokens\": {}, \"decode_tok_per_s\": {:.3}, \"decode_bandwidth_gb_per_s\": {:.6}, \"roofline_tok_per_s\": {:.3}, \"roofline_fraction\": {:.4}, \"peak_roofline_fraction\": {:.4}}}",
                m.path,
                m.wtype,
                m.bytes_per_token,
                m.prompt_tokens,
                m.prompt_tok_s,
                m.decode_tokens,
                m.decode_tok_s,
                m.decode_bandwidth_gbps,
                roofline(m),
                m.decode_tok_s / roofline(m),
                m.decode_tok_s / peak_roofline(m)
            ),
            None => "null".to_string(),
        };
        writeln!(
            out,
            "{{\"tier\": \"{}\", \"packed_matrices\": {}, \"threads\": {threads}, \"bandwidth_gb_per_s\": {{\"1\": {bw1:.6}, \"{threads}\": {bwn:.6}}}, \"kernels\": [{}], \"model\": {model_json}}}",
            kernels::TIER,
            legacy_ml::core::isa::streaming().pack_row_groups,
            kernels_json.join(", ")
        )
        .map_err(stdout_error)?;
        return Ok(());
    }
    let w = |out: &mut std::io::StdoutLock, s: String| writeln!(out, "{s}").map_err(stdout_error);
    w(&mut out, format!("tier: {}; {}", kernels::TIER, matrix_order()))?;
    w(
        &mut out,
        format!("memory read bandwidth: {bw1:.2} GB/s (1 thread), {bwn:.2} GB/s ({threads} threads)"),
    )?;
    if !kernel_rows.is_empty() {
        w(&mut out, String::new())?;
        w(
            &mut out,
            format!(
                "{:<12} {:<35} {:>3} {:>10} {:>8} {:>8} {:>7}",
                "kernel", "shape", "thr", "time (us)", "GB/s", "GOPS", "of bw"
            ),
        )?;
        for r in &kernel_rows {
            w(
                &mut out,
                format!(
                    "{:<12} {:<35} {:>3} {:>10.2} {:>8.2} {:>8.2} {:>6.0}%",
                    r.kernel,
                    r.shape,
                    r.threads,
                    r.seconds * 1e6,
                    r.gbps(),
                    r.gops(),
                    100.0 * r.gbps() / bandwidth(r.threads)
                ),
            )?;
        }
    }
    if let Some(m) = &model_run {
        w(&mut out, String::new())?;
        w(
            &mut out,
            format!(
                "model {} ({}), {:.1} MB of weights per token",
                m.path,
                m.wtype,
                m.bytes_per_token as f64 / 1e6
            ),
        )?;
        w(
            &mut out,
            format!("prompt: {} tokens at {:.1} tok/s", m.prompt_tokens, m.prompt_tok_s),
        )?;
        w(
            &mut out,
            format!(
                "decode: {} tokens at {:.1} tok/s on {threads} thread(s); roofline {:.1} tok/s at {:.2} GB/s; {:.0}% of it",
                m.decode_tokens,
                m.decode_tok_s,
                roofline(m),
                m.decode_bandwidth_gbps,
                100.0 * m.decode_tok_s / roofline(m)
            ),
        )?;
        w(
            &mut out,
            format!(
                "  (bandwidth of a bare sum over the same weights, a pass between every {DECODE_CHUNK} decoded \
                 tokens; against the probe's peak {:.2} GB/s the decode reached {:.0}%)",
                bandwidth(threads),
                100.0 * m.decode_tok_s / peak_roofline(m)
            ),
        )?;
    }
    Ok(())
}
