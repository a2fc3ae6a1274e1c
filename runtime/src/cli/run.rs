use super::{parse_ids, stdout_error, TokenIds};
use legacy_ml::model::sampler::Sampler;
use legacy_ml::model::tokenizer::Tokenizer;
use legacy_ml::model::transformer::Transformer;
use legacy_ml::model::Model;
use legacy_ml::Result;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(clap::Args)]
pub struct RunArgs {
    /// The .mlb model.
    model: PathBuf,
    /// llama2.c tokenizer.bin: enables text prompts and text output.
    #[arg(short = 'z', long)]
    tokenizer: Option<PathBuf>,
    /// Prompt text (needs -z).
    #[arg(short = 'i', long, conflicts_with = "tokens", requires = "tokenizer")]
    input: Option<String>,
    /// Prompt as token ids, e.g. 1,306,4658 (default: BOS, id 1).
    #[arg(long, value_parser = parse_ids)]
    tokens: Option<TokenIds>,
    /// Tokens to generate; capped by the model's context.
    #[arg(short = 'n', long, default_value_t = 256)]
    steps: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(short = 't', long = "temp", default_value_t = 1.0)]
    temperature: f32,
    /// Nucleus sampling mass; 1 disables it.
    #[arg(short = 'p', long, default_value_t = 0.9)]
    top_p: f32,
    /// RNG seed; the same seed and model give the same tokens (default: from the clock).
    #[arg(short = 's', long)]
    seed: Option<u64>,
    #[command(flatten)]
    threads: super::ThreadsArg,
}

pub fn run(a: RunArgs) -> Result<()> {
    let model = Model::open(&a.model)?;
    let tokenizer = a.tokenizer.as_deref().map(Tokenizer::open).transpose()?;
    let prompt = match (&a.input, &a.tokens, &tokenizer) {
        (Some(text), _, Some(tok)) => tok.encode(text, true, false),
        (_, Some(ids), _) => ids.0.clone(),
        // BOS: let the model start from nothing.
        _ => vec![1],
    };
    let mut tf = Transformer::with_threads(&model, a.threads.count())?;
    let max_seq = tf.header().max_seq as usize;
    let available = (max_seq + 1).saturating_sub(prompt.len());
    let steps = a.steps.min(available);
    if steps < a.steps {
        eprintln!(
            "note: generating {steps} tokens, not {}: the model's context is {max_seq}",
            a.steps
        );
    }
    let seed = a.seed.unwrap_or_else(clock_seed);
    let mut sampler = Sampler::new(tf.header().vocab as usize, a.temperature, a.top_p, seed);
    if !sampler.is_greedy() && a.seed.is_none() {
        eprintln!("seed: {seed}");
    }

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if let (Some(tok), Some(_)) = (&tokenizer, &a.input) {
        let mut prev = 0;
        for &t in &prompt {
            out.write_all(tok.decode_piece(prev, t)).map_err(stdout_error)?;
            prev = t;
        }
        out.flush().map_err(stdout_error)?;
    }

    // Ctrl-C stops generation between tokens: the text so far and the
    // speed line are still printed and the exit is clean (code 0).
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&interrupted);
    if ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed)).is_err() {
        eprintln!("note: cannot install a Ctrl-C handler; Ctrl-C will end the process abruptly");
    }

    let start = Instant::now();
    let mut next = sampler.sample(tf.prefill(&prompt)?);
    let prefill_time = start.elapsed();
    let mut prev = *prompt.last().unwrap_or(&1);
    let mut generated = 0;
    let decode_start = Instant::now();
    for i in 0..steps {
        if interrupted.load(Ordering::Relaxed) {
            eprintln!("\ninterrupted");
            break;
        }
        match &tokenizer {
            Some(tok) => {
                if next == tok.bos() || next == tok.eos() {
                    break;
                }
                out.write_all(tok.decode_piece(prev, next)).map_err(stdout_error)?;
            }
            None => write!(out, "{}{next}", if i > 0 { " " } else { "" }).map_err(stdout_error)?,
        }
        out.flush().map_err(stdout_error)?;
        generated += 1;
        if i + 1 == steps {
            break;
        }
        prev = next;
        next = sampler.sample(tf.forward(next, prompt.len() + i)?);
    }
    writeln!(out).map_err(stdout_error)?;
    let decode_time = decode_start.elapsed().as_secs_f64();
    eprintln!(
        "prompt: {} tokens in {:.1} ms; generated {} tokens in {:.1} ms: {:.1} tok/s",
        prompt.len(),
        prefill_time.as_secs_f64() * 1e3,
        generated,
        decode_time * 1e3,
        if decode_time > 0.0 {
            generated as f64 / decode_time
        } else {
            0.0
        }
    );
    Ok(())
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
