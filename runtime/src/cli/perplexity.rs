//! `ml perplexity`: a text's perplexity under a model, scored as
//! llama.cpp's `perplexity` tool scores it (`model::perplexity`). The
//! running perplexity after each window goes to stderr; the final line, or
//! with `--json` one JSON object, to stdout.

use super::print;
use legacy_ml::model::perplexity::{perplexity, Plan, Tally};
use legacy_ml::model::prompt;
use legacy_ml::model::tokenizer::Tokenizer;
use legacy_ml::Result;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct PerplexityArgs {
    /// The .mlb model.
    model: PathBuf,
    /// Tokenizer (llama2.c tokenizer.bin or a .tok). Without it, FILE holds
    /// token ids (separated by commas or white space), scored as they are.
    #[arg(short = 'z', long)]
    tokenizer: Option<PathBuf>,
    /// The text to score (UTF-8), `-` for stdin; token ids without -z.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: PathBuf,
    /// Tokens per window, as llama.cpp's -c: each window scores the tokens
    /// of its second half given the ones before (at most the model's max_seq).
    #[arg(long = "ctx", default_value_t = 512, allow_negative_numbers = true, value_parser = super::count)]
    ctx: usize,
    /// Score only the first N windows (llama.cpp's --chunks).
    #[arg(long, allow_negative_numbers = true, value_parser = super::count)]
    chunks: Option<usize>,
    /// Positions run together, 1 to 128: each window's first half (not
    /// scored) runs as a prompt in chunks of N, its second half in chunks
    /// of N whose logits come from one classifier matmul over the chunk,
    /// so every weight matrix, the large output one included, is read once
    /// per chunk instead of once per token. The result is the same bits
    /// for every N; 1 runs the windows token by token. Costs N rows of
    /// every activation buffer and N × vocab floats of logits.
    #[arg(long = "batch", value_name = "N", default_value_t = super::DEFAULT_BATCH, allow_negative_numbers = true, value_parser = super::batch)]
    batch: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    threads: super::ThreadsArg,
    #[command(flatten)]
    load: super::LoadArg,
}

pub fn run(a: PerplexityArgs) -> Result<()> {
    let bytes = prompt::read_prompt_bytes(&a.file)?;
    let shown = a.file.display().to_string();
    // As llama.cpp: the whole text is tokenized once, with BOS when the
    // tokenizer adds it, and that BOS then starts every window.
    let (tokens, bos) = match &a.tokenizer {
        Some(path) => {
            let tok = Tokenizer::open(path)?;
            let text = prompt::prompt_text(&bytes, &shown)?;
            let add_bos = tok.add_bos();
            (tok.encode(&text, add_bos, false), add_bos.then(|| tok.bos()))
        }
        None => (prompt::prompt_ids(&bytes, &shown)?, None),
    };
    let model = a.load.open(&a.model)?;
    let max_seq = model.header().max_seq as usize;
    if a.ctx > max_seq {
        return Err(legacy_ml::MlError::shape(format!(
            "--ctx {} is more than the model's max_seq {max_seq}",
            a.ctx
        )));
    }
    let plan = Plan::new(tokens.len(), a.ctx, a.chunks)?;
    let mut tf = legacy_ml::model::transformer::Transformer::with_context(&model, a.threads.count(), a.ctx)?;
    tf.set_batch(a.batch)?;
    note!(
        "perplexity: {} tokens, {} windows of {} (scoring {} tokens each), batch {}, tier {}, {} threads",
        tokens.len(),
        plan.windows,
        plan.ctx,
        plan.scored_per_window(),
        tf.batch(),
        legacy_ml::kernels::TIER,
        tf.threads()
    );
    let start = Instant::now();
    let mut running = Vec::with_capacity(plan.windows);
    let tally = perplexity(&mut tf, &tokens, plan, bos, &mut |w, t: &Tally| {
        running.push(t.ppl());
        note!(
            "[{}/{}] {:.4}  ({:.1} s)",
            w + 1,
            plan.windows,
            t.ppl(),
            start.elapsed().as_secs_f64()
        );
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let ppl = tally.ppl();
    let out = if a.json {
        let v = serde_json::json!({
            "model": a.model.display().to_string(),
            "tier": legacy_ml::kernels::TIER,
            "ctx": plan.ctx,
            "batch": tf.batch(),
            "windows": plan.windows,
            "tokens": tokens.len(),
            "scored": tally.count,
            "nll": tally.mean_nll(),
            "nll_stderr": tally.nll_stderr(),
            "ppl": ppl,
            "ppl_stderr": tally.ppl_stderr(),
            "running_ppl": running,
            "seconds": seconds,
        });
        format!("{v}\n")
    } else {
        let pm = tally
            .ppl_stderr()
            .map_or("(no estimate)".to_string(), |e| format!("{e:.5}"));
        format!(
            "PPL = {ppl:.4} +/- {pm} ({} tokens scored in {} windows of {}; {seconds:.1} s)\n",
            tally.count, plan.windows, plan.ctx
        )
    };
    print(&out)
}
