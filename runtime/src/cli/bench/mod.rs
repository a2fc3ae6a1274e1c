//! `ml bench`: kernel throughput at model shapes, a memory read-bandwidth
//! probe, and model decode speed against its memory roofline.
//!
//! At batch 1 a decode step reads every weight once, so tok/s cannot beat
//! bandwidth ÷ weight bytes per token: that quotient is the roofline, and
//! the fraction of it reached says how much speed is left on the table.
//!
//! `measure` times the kernels and probes the bandwidth, `speed` times a
//! model's prompt processing and decode as llama-bench does (pp128, pp512,
//! tg128 per thread count), `roofline` times its decode against the
//! bandwidth of its own weights, `render` prints the tables or the JSON.

mod measure;
mod render;
mod roofline;
mod speed;

use legacy_ml::core::quant::QK;
use legacy_ml::kernels;
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::Model;
use legacy_ml::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// A .mlb model to time: prompt processing and decode per thread count
    /// as llama-bench reports them (ppN, tgN: tok/s, mean ± sd of the
    /// repetitions), and decode against its roofline: the bandwidth of a
    /// bare sum over its own weights.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Prompt lengths to time (ppN: the prompt fed from position 0 in
    /// chunks of --batch), comma-separated, as llama-bench's -p.
    #[arg(short = 'p', long, value_delimiter = ',', default_value = "128,512", allow_negative_numbers = true, value_parser = super::count)]
    prompt: Vec<usize>,
    /// Tokens generated per decode run (tgN, after a one-token prompt; also
    /// the roofline decode's length), at least 1, as llama-bench's -n.
    #[arg(short = 'n', long, default_value_t = 128, allow_negative_numbers = true, value_parser = super::count)]
    steps: usize,
    /// Timed runs of each test, at least 1, after an untimed warm-up run.
    #[arg(short = 'r', long, default_value_t = 3, allow_negative_numbers = true, value_parser = super::count)]
    repetitions: usize,
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
    /// Thread counts to time the model at, comma-separated, each at least 1
    /// (default: one per CPU, at most 8; builds without feature `threads`
    /// always use 1). The kernel table, the bandwidth probe and the
    /// roofline use the largest.
    #[arg(long = "threads", value_delimiter = ',', allow_negative_numbers = true, value_parser = super::count)]
    threads: Vec<usize>,
    #[command(flatten)]
    batch: super::BatchArg,
}

/// The `--threads` list as the thread counts a run gets (capped, or 1
/// without feature `threads`), deduplicated, in the order given.
fn thread_counts(asked: &[usize]) -> Vec<usize> {
    if asked.is_empty() {
        return vec![super::ThreadsArg { threads: None }.count()];
    }
    let mut counts: Vec<usize> = Vec::new();
    for &n in asked {
        let n = super::ThreadsArg { threads: Some(n) }.count();
        if !counts.contains(&n) {
            counts.push(n);
        }
    }
    counts
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

/// Everything one `ml bench` measured, for `render`.
struct Report {
    threads: usize,
    /// Peak read bandwidth (GB/s) of the probe with one thread and with
    /// `threads` threads.
    bw1: f64,
    bwn: f64,
    kernels: Vec<measure::KernelRow>,
    /// ppN / tgN per thread count (empty without a model).
    speed: Vec<speed::SpeedRow>,
    model: Option<roofline::ModelRun>,
}

impl Report {
    /// The probe's peak read bandwidth for work split over `threads` threads.
    fn bandwidth(&self, threads: usize) -> f64 {
        if threads > 1 {
            self.bwn
        } else {
            self.bw1
        }
    }
}

pub fn run(a: BenchArgs) -> Result<()> {
    let counts = thread_counts(&a.threads);
    let threads = counts.iter().copied().max().unwrap_or(1);
    // The model and its context are validated (and a capped context said)
    // before anything is measured; the other thread counts reuse the context.
    let model = a.model.as_deref().map(Model::open).transpose()?;
    let mut first = model.as_ref().map(|m| a.ctx.transformer(m, counts[0])).transpose()?;
    let ctx = first.as_ref().map_or(0, |tf| tf.header().max_seq as usize);
    note!(
        "bench: tier {}, probing memory bandwidth ({} MiB buffer)...",
        kernels::TIER,
        a.probe_mib
    );
    let probe = measure::Probe::new(a.probe_mib)?;
    let bw1 = probe.peak_gbps(1, a.seconds);
    let bwn = if threads > 1 {
        probe.peak_gbps(threads, a.seconds)
    } else {
        bw1
    };
    let mut kernel_rows = Vec::new();
    if !a.no_kernels {
        note!("bench: kernels...");
        kernel_rows = measure::bench_kernels(a.seconds, &a.shapes)?;
        if threads > 1 {
            kernel_rows.extend(measure::bench_threaded_matvec(a.seconds, threads)?);
        }
    }
    let mut speed_rows = Vec::new();
    let mut model_run = None;
    if let (Some(p), Some(model)) = (&a.model, &model) {
        for &n in &counts {
            let mut tf = match first.take() {
                Some(tf) => tf,
                None => Transformer::with_context(model, n, ctx)?,
            };
            a.batch.apply(&mut tf)?;
            note!(
                "bench: {} on {n} thread(s): pp{} and tg{}, {} run(s) each...",
                p.display(),
                a.prompt.iter().map(usize::to_string).collect::<Vec<_>>().join(", pp"),
                a.steps,
                a.repetitions
            );
            speed_rows.extend(speed::llama_bench(&mut tf, &a.prompt, a.steps, a.repetitions)?);
            if n == threads {
                note!("bench: decode against the roofline on {n} thread(s)...");
                model_run = Some(roofline::bench_model(p, model, tf, a.steps, n)?);
            }
        }
    }
    let report = Report {
        threads,
        bw1,
        bwn,
        kernels: kernel_rows,
        speed: speed_rows,
        model: model_run,
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if a.json {
        render::json(&mut out, &report)
    } else {
        render::text(&mut out, &report)
    }
}
