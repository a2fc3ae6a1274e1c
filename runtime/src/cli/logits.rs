//! `ml logits`: the harness's view of a build. JSON on stdout:
//! `{"tier": "...", "tokens": [...], "steps": [{"pos": p, "token": t, "logits": [...]}, ...]}`.
//! Step 0 holds the logits after the last prompt token; each later step
//! feeds the previous step's greedy token. `--batch` does not change them:
//! the logits are the same bits for every batch. Floats are printed in their
//! shortest round-trip form; a non-finite value is printed as null.

use super::{parse_ids, stdout_error, TokenIds};
use legacy_ml::model::prompt;
use legacy_ml::model::sampler::argmax;
use legacy_ml::{MlError, Result};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct LogitsArgs {
    /// The .mlb model.
    model: PathBuf,
    /// Prompt token ids, e.g. 1,7,42.
    #[arg(long, value_parser = parse_ids, required_unless_present = "file")]
    tokens: Option<TokenIds>,
    /// Prompt token ids from a file, `-` for stdin, separated by commas or
    /// white space: for prompts longer than a command line may be. A path
    /// must be a regular file of at most 64 MiB.
    #[arg(short = 'f', long = "file", value_name = "FILE", conflicts_with = "tokens")]
    file: Option<PathBuf>,
    /// Steps to record, at least 1 (the first is the prompt's last position).
    #[arg(short = 'n', long, default_value_t = 16, allow_negative_numbers = true, value_parser = super::count)]
    steps: usize,
    #[command(flatten)]
    ctx: super::CtxArg,
    #[command(flatten)]
    threads: super::ThreadsArg,
    #[command(flatten)]
    batch: super::BatchArg,
    #[command(flatten)]
    load: super::LoadArg,
}

pub fn run(a: LogitsArgs) -> Result<()> {
    let model = a.load.open(&a.model)?;
    let mut tf = a.ctx.transformer(&model, a.threads.count())?;
    a.batch.apply(&mut tf)?;
    let max_seq = tf.header().max_seq as usize;
    let prompt = match (a.tokens, &a.file) {
        (Some(ids), _) => ids.0,
        (None, Some(path)) => prompt::prompt_ids(&prompt::read_prompt_bytes(path)?, &path.display().to_string())?,
        (None, None) => return Err(MlError::shape("no prompt: give --tokens or -f")),
    };
    // -n is at least 1 (clap checks it).
    if prompt.len() + a.steps - 1 > max_seq {
        return Err(MlError::shape(format!(
            "{} prompt tokens and {} steps need {} positions; {}",
            prompt.len(),
            a.steps,
            prompt.len() + a.steps - 1,
            tf.context_description()
        )));
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let ids: Vec<String> = prompt.iter().map(|t| t.to_string()).collect();
    write!(
        out,
        "{{\"tier\": \"{}\", \"tokens\": [{}], \"steps\": [",
        legacy_ml::kernels::TIER,
        ids.join(", ")
    )
    .map_err(stdout_error)?;
    let mut logits = tf.prefill(&prompt)?;
    for step in 0..a.steps {
        let pos = prompt.len() - 1 + step;
        let token = argmax(logits);
        write!(
            out,
            "{}\n  {{\"pos\": {pos}, \"token\": {token}, \"logits\": [",
            if step > 0 { "," } else { "" }
        )
        .map_err(stdout_error)?;
        for (i, v) in logits.iter().enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            if v.is_finite() {
                write!(out, "{sep}{v:?}")
            } else {
                write!(out, "{sep}null")
            }
            .map_err(stdout_error)?;
        }
        write!(out, "]}}").map_err(stdout_error)?;
        if step + 1 < a.steps {
            logits = tf.forward(token, pos + 1)?;
        }
    }
    writeln!(out, "\n]}}").map_err(stdout_error)?;
    out.flush().map_err(stdout_error)
}
