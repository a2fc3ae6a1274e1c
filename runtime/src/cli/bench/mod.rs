//! `ml bench`: kernel throughput at model shapes, a memory read-bandwidth
//! probe, and model decode speed against its memory roofline.
//!
//! At batch 1 a decode step reads every weight once, so tok/s cannot beat
//! bandwidth ÷ weight bytes per token: that quotient is the roofline, and
//! the fraction of it reached says how much speed is left on the table.
//!
//! `measure` times the kernels and probes the bandwidth, `roofline` times a
//! model's decode against the bandwidth of its own weights, `render` prints
//! the tables or the JSON.

mod measure;
mod render;
mod roofline;

use legacy_ml::core::quant::QK;
use legacy_ml::kernels;
use legacy_ml::model::Model;
use legacy_ml::Result;
use std::path::PathBuf;

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
    #[command(flatten)]
    batch: super::BatchArg,
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
    let threads = a.threads.count();
    // The model is validated before anything is measured.
    let model = a.model.as_deref().map(Model::open).transpose()?;
    let mut tf = model.as_ref().map(|m| a.ctx.transformer(m, threads)).transpose()?;
    if let Some(tf) = &mut tf {
        a.batch.apply(tf)?;
    }
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
    let model_run = match (&a.model, &model, tf) {
        (Some(p), Some(model), Some(tf)) => {
            note!("bench: decoding {} on {threads} thread(s)...", p.display());
            Some(roofline::bench_model(p, model, tf, a.prompt, a.steps, threads)?)
        }
        _ => None,
    };
    let report = Report {
        threads,
        bw1,
        bwn,
        kernels: kernel_rows,
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
