//! The subcommands of `ml`, one module each.

mod bench;
mod gen;
mod info;
mod logits;
mod perplexity;
mod run;
mod sys;

use clap::{Parser, Subcommand};
use legacy_ml::model::sampler::SamplerOptions;
use legacy_ml::{MlError, Result};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "ml",
    version,
    about = "legacy-ml: run small Llama-style models with Q8_0/Q4_0 weights on legacy and modern CPUs",
    after_help = "Exit codes: 0 ok, 2 usage, 3 io, 4 format, 5 shape, 6 out of memory, 7 missing CPU feature."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Write a random-weight model (byte-identical for a given seed and shape).
    Gen(gen::GenArgs),
    /// Generate tokens from a prompt and stream them (text with -z, else ids).
    Run(run::RunArgs),
    /// Chat with an instruct model: user turns from stdin, one per line; replies streamed.
    Chat(run::ChatArgs),
    /// Print, as JSON, the logits and greedy token of each step (for the harness).
    Logits(logits::LogitsArgs),
    /// Score a text's perplexity as llama.cpp's perplexity tool does.
    Perplexity(perplexity::PerplexityArgs),
    /// Print the token ids of a text.
    Tokenize(TokenizeArgs),
    /// Print a model's header, tensor table, size and parameter count.
    Info(info::InfoArgs),
    /// Measure kernel throughput, memory bandwidth and model decode speed.
    Bench(bench::BenchArgs),
    /// Print this build's ISA tier, the host's CPU features and whether it can run here.
    Isa,
}

#[derive(clap::Args)]
pub struct TokenizeArgs {
    /// Tokenizer: llama2.c tokenizer.bin, or a byte-level BPE .tok (tools/convert.py --tokenizer-out).
    #[arg(short = 'z', long)]
    tokenizer: PathBuf,
    /// Do not prepend BOS (llama2.c: id 1; a .tok prepends its BOS only if its flags ask for it).
    #[arg(long)]
    no_bos: bool,
    /// The text to encode.
    text: String,
}

pub fn run(cli: Cli) -> Result<()> {
    sys::ignore_sigxfsz();
    match cli.command {
        Command::Gen(a) => gen::run(a),
        Command::Run(a) => run::run(a),
        Command::Chat(a) => run::chat(a),
        Command::Logits(a) => logits::run(a),
        Command::Perplexity(a) => perplexity::run(a),
        Command::Tokenize(a) => tokenize(a),
        Command::Info(a) => info::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Isa => isa(),
    }
}

fn tokenize(a: TokenizeArgs) -> Result<()> {
    let tok = legacy_ml::model::tokenizer::Tokenizer::open(&a.tokenizer)?;
    let ids = tok.encode(&a.text, !a.no_bos && tok.add_bos(), tok.add_eos());
    print(&format!("{}\n", join_ids(&ids)))
}

fn isa() -> Result<()> {
    use legacy_ml::guard;
    let mut out = String::new();
    outln!(out, "build tier:        {}", guard::build_tier());
    outln!(out, "target:            {}", std::env::consts::ARCH);
    outln!(out, "needs features:    {}", or_none(guard::required_features()));
    outln!(out, "host features:     {}", or_none(&guard::host_features()));
    let check = guard::check();
    outln!(out, "runs on this CPU:  {}", if check.is_ok() { "yes" } else { "no" });
    print(&out)?;
    check
}

fn or_none(list: &[&str]) -> String {
    if list.is_empty() {
        "(none)".to_string()
    } else {
        list.join(" ")
    }
}

pub fn join_ids(ids: &[u32]) -> String {
    ids.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" ")
}

const SAMPLING: &str = "Sampling (llama.cpp's chain, in this order, and its defaults)";

/// The sampling options of `run` and `chat`: llama.cpp's chain (repetition
/// penalty, top-k, top-p, min-p, temperature, then the draw) and its
/// defaults.
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// First, penalise every token among the last --repeat-last-n (prompt
    /// included): a positive logit is divided by the penalty, a negative
    /// one multiplied; 1 is off (llama.cpp users often take 1.1).
    #[arg(help_heading = SAMPLING, long, default_value_t = SamplerOptions::LLAMA_CPP.repeat_penalty, allow_negative_numbers = true, value_parser = repeat_penalty)]
    pub repeat_penalty: f32,
    /// How many of the latest tokens the repetition penalty looks at; 0 is
    /// off.
    #[arg(help_heading = SAMPLING, long, default_value_t = SamplerOptions::LLAMA_CPP.repeat_last_n)]
    pub repeat_last_n: usize,
    /// Then keep only the K most probable tokens; 0 keeps all.
    #[arg(help_heading = SAMPLING, short = 'k', long, default_value_t = SamplerOptions::LLAMA_CPP.top_k)]
    pub top_k: usize,
    /// Then keep the most probable tokens until their probability mass
    /// reaches P, in (0, 1]; 1 keeps all.
    #[arg(help_heading = SAMPLING, short = 'p', long, default_value_t = SamplerOptions::LLAMA_CPP.top_p, allow_negative_numbers = true, value_parser = top_p)]
    pub top_p: f32,
    /// Then keep the tokens at least P times as probable as the most
    /// probable one, in [0, 1]; 0 keeps all.
    #[arg(help_heading = SAMPLING, long, default_value_t = SamplerOptions::LLAMA_CPP.min_p, allow_negative_numbers = true, value_parser = min_p)]
    pub min_p: f32,
    /// Last, divide the logits left by the temperature and draw; a finite
    /// number ≥ 0, 0 is greedy.
    #[arg(help_heading = SAMPLING, short = 't', long = "temp", default_value_t = SamplerOptions::LLAMA_CPP.temperature, allow_negative_numbers = true, value_parser = temperature)]
    pub temperature: f32,
}

impl SamplingArgs {
    pub fn options(&self) -> SamplerOptions {
        SamplerOptions {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
        }
    }
}

/// `--min-p`: a probability ratio in [0, 1].
pub fn min_p(s: &str) -> std::result::Result<f32, String> {
    match s.trim().parse::<f32>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err("must be in [0, 1] (0 disables min-p)".to_string()),
    }
}

/// `--repeat-penalty`: a finite number > 0.
pub fn repeat_penalty(s: &str) -> std::result::Result<f32, String> {
    match s.trim().parse::<f32>() {
        Ok(p) if p.is_finite() && p > 0.0 => Ok(p),
        _ => Err("must be a finite number > 0 (1 disables the penalty)".to_string()),
    }
}

/// `--temp`: a finite number ≥ 0.
pub fn temperature(s: &str) -> std::result::Result<f32, String> {
    match s.trim().parse::<f32>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err("must be a finite number ≥ 0 (0 is greedy)".to_string()),
    }
}

/// `--top-p`: a probability mass in (0, 1].
pub fn top_p(s: &str) -> std::result::Result<f32, String> {
    match s.trim().parse::<f32>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        _ => Err("must be in (0, 1] (1 disables nucleus sampling)".to_string()),
    }
}

/// A count (`-n`, `--threads`, `--ctx`): a whole number ≥ 1.
pub fn count(s: &str) -> std::result::Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a whole number ≥ 1".to_string()),
    }
}

/// `--threads N`: worker threads for builds with feature `threads`.
#[derive(clap::Args, Clone, Copy)]
pub struct ThreadsArg {
    /// Threads to run on, at least 1 (default: one per CPU, at most 8; more
    /// than 4 per CPU are capped at that; builds without feature `threads`
    /// always use 1).
    #[arg(long = "threads", allow_negative_numbers = true, value_parser = count)]
    threads: Option<usize>,
}

impl ThreadsArg {
    pub fn count(self) -> usize {
        #[cfg(feature = "threads")]
        return match self.threads {
            None => legacy_ml::core::threads::default_threads(),
            Some(n) => {
                // Threads beyond this many per CPU only wait for each other.
                const THREADS_PER_CPU: usize = 4;
                let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
                let cap = THREADS_PER_CPU * cpus;
                if n > cap {
                    note!("note: --threads {n} is more than {THREADS_PER_CPU} per CPU ({cpus} CPUs); using {cap}");
                }
                n.clamp(1, cap)
            }
        };
        #[cfg(not(feature = "threads"))]
        {
            if self.threads.is_some_and(|n| n > 1) {
                note!("note: this build has no `threads` feature; running on 1 thread");
            }
            1
        }
    }
}

/// The context `--ctx` defaults to at most: a header may claim millions of
/// positions, and the RoPE tables and KV cache are sized by the context.
pub const DEFAULT_CTX: usize = 4096;

/// `--ctx N`: the positions a run may use, as llama.cpp's `-c`.
#[derive(clap::Args, Clone, Copy)]
pub struct CtxArg {
    /// Positions to run with: prompt and generated tokens together (default:
    /// the model's max_seq, at most 4096; at most max_seq). The RoPE tables
    /// and the KV cache are sized by it.
    #[arg(long = "ctx", allow_negative_numbers = true, value_parser = count)]
    ctx: Option<usize>,
}

impl CtxArg {
    /// The transformer for `model` on `threads` threads with this context.
    /// Says on stderr when the model's context was capped.
    pub fn transformer(
        self,
        model: &legacy_ml::model::Model,
        threads: usize,
    ) -> Result<legacy_ml::model::transformer::Transformer<'_>> {
        let max_seq = model.header().max_seq as usize;
        let ctx = match self.ctx {
            None if max_seq > DEFAULT_CTX => {
                note!("note: the model's context is {max_seq} positions; using {DEFAULT_CTX} (--ctx N for more)");
                DEFAULT_CTX
            }
            None => max_seq,
            Some(c) if c > max_seq => {
                note!("note: --ctx {c} is more than the model's max_seq {max_seq}; using {max_seq}");
                max_seq
            }
            Some(c) => c,
        };
        legacy_ml::model::transformer::Transformer::with_context(model, threads, ctx)
    }
}

/// The batch `--batch` defaults to. A chunk streams each matrix from
/// memory once instead of once per token; in the tiers with tiled matmul
/// kernels (avx512vnni, avxvnni, avx2, AArch64 neon and neon-dotprod) it also loads each weight block once
/// per tile of tokens, elsewhere once per token from cache.
pub const DEFAULT_BATCH: usize = 32;

/// `--batch N`: prompt tokens run together.
#[derive(clap::Args, Clone, Copy)]
pub struct BatchArg {
    /// Prompt tokens to run together, 1 to 128: each weight matrix is run
    /// once per chunk of N tokens, and the logits are the same bits for
    /// every N (1 runs the prompt token by token). A larger batch saves
    /// memory traffic (each matrix stays in cache across the chunk) and
    /// weight loads (every tier's matmul shares each weight block between
    /// several tokens); it costs N rows of every activation buffer.
    #[arg(long = "batch", value_name = "N", default_value_t = DEFAULT_BATCH, allow_negative_numbers = true, value_parser = batch)]
    batch: usize,
}

/// `--batch`: a whole number in 1..=MAX_BATCH.
pub(crate) fn batch(s: &str) -> std::result::Result<usize, String> {
    let max = legacy_ml::ops::MAX_BATCH;
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("must be a whole number from 1 to {max}")),
    }
}

impl BatchArg {
    /// Sets the transformer's batch.
    pub fn apply(self, tf: &mut legacy_ml::model::transformer::Transformer<'_>) -> Result<()> {
        tf.set_batch(self.batch)
    }
}

/// `--load MODE` (or `ML_LOAD`): how the model file is brought into memory.
#[derive(clap::Args, Clone, Copy)]
pub struct LoadArg {
    /// How to bring the model into memory: `read` copies it (nothing done to
    /// the file afterwards can affect this run), `map` maps it (no copy, but
    /// the file must not be truncated or rewritten in place while this runs:
    /// truncation kills the process with SIGBUS), `auto` reads files up to
    /// 256 MiB and maps larger ones.
    #[arg(long = "load", value_name = "auto|map|read", env = "ML_LOAD", default_value = "auto", value_parser = parse_load)]
    load: legacy_ml::core::file::LoadMode,
}

/// A load mode; empty (`ML_LOAD=`) is the default, `auto`.
fn parse_load(s: &str) -> std::result::Result<legacy_ml::core::file::LoadMode, String> {
    if s.is_empty() {
        return Ok(legacy_ml::core::file::LoadMode::Auto);
    }
    s.parse()
}

impl LoadArg {
    pub fn open(self, path: &std::path::Path) -> Result<legacy_ml::model::Model> {
        legacy_ml::model::Model::open_with(path, self.load)
    }
}

/// A list of token ids on the command line, written "1,2,3".
#[derive(Clone, Debug)]
pub struct TokenIds(pub Vec<u32>);

/// Parses "1,2,3" (spaces allowed) into token ids.
pub fn parse_ids(s: &str) -> std::result::Result<TokenIds, String> {
    legacy_ml::model::prompt::parse_ids(s).map(TokenIds)
}

/// Set when a write to stdout failed with EPIPE: its reader has gone.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether stdout's reader has gone (a closed pipe); `main` then ends
/// quietly with exit 0, as Unix tools do when `head` has read enough.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Writing to stdout failed: a full disk (an Io error, exit 3), or a
/// closed pipe, which `main` turns into a quiet exit 0.
pub fn stdout_error(e: std::io::Error) -> MlError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    MlError::io(format!("cannot write to stdout: {e}"))
}

/// Writes `text` to stdout and flushes it.
pub fn print(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).map_err(stdout_error)?;
    out.flush().map_err(stdout_error)
}
