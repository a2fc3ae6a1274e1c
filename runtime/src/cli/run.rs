use super::{parse_ids, stdout_error, TokenIds};
use legacy_ml::model::prompt;
use legacy_ml::model::sampler::Sampler;
use legacy_ml::model::tokenizer::Tokenizer;
use legacy_ml::{MlError, Result};
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(clap::Args)]
pub struct RunArgs {
    /// The .mlb model.
    model: PathBuf,
    /// Tokenizer (llama2.c tokenizer.bin or a .tok): enables text prompts and text output.
    #[arg(short = 'z', long)]
    tokenizer: Option<PathBuf>,
    /// Prompt text (needs -z).
    #[arg(short = 'i', long, conflicts_with = "tokens", requires = "tokenizer")]
    input: Option<String>,
    /// Prompt text from a file, `-` for stdin (needs -z): for prompts
    /// longer than a command line may be. A path must be a regular file of
    /// at most 64 MiB of UTF-8 text.
    #[arg(short = 'f', long = "file", value_name = "FILE", conflicts_with_all = ["input", "tokens"], requires = "tokenizer")]
    file: Option<PathBuf>,
    /// Prompt as token ids, e.g. 1,306,4658 (default: BOS, id 1).
    #[arg(long, value_parser = parse_ids)]
    tokens: Option<TokenIds>,
    /// Tokens to generate, at least 1; capped by the context.
    #[arg(short = 'n', long, default_value_t = 256, allow_negative_numbers = true, value_parser = super::count)]
    steps: usize,
    #[command(flatten)]
    sampling: super::SamplingArgs,
    /// RNG seed; the same seed and model give the same tokens (default: from the clock).
    #[arg(short = 's', long)]
    seed: Option<u64>,
    /// Print no timing line on stderr. Formatting the times costs a number
    /// of instructions that varies with them, so runs that must execute
    /// exactly the same instructions (the matrix's counts under qemu) drop it.
    #[arg(long)]
    no_stats: bool,
    #[command(flatten)]
    ctx: super::CtxArg,
    #[command(flatten)]
    threads: super::ThreadsArg,
    #[command(flatten)]
    batch: super::BatchArg,
    #[command(flatten)]
    load: super::LoadArg,
}

pub fn run(a: RunArgs) -> Result<()> {
    let model = a.load.open(&a.model)?;
    let mut tf = a.ctx.transformer(&model, a.threads.count())?;
    a.batch.apply(&mut tf)?;
    let tokenizer = a.tokenizer.as_deref().map(Tokenizer::open).transpose()?;
    if let (Some(tok), Some(path)) = (&tokenizer, &a.tokenizer) {
        check_vocab(tok, path, model.header().vocab as usize)?;
    }
    let input = match &a.file {
        Some(path) => Some(prompt::prompt_text(
            &prompt::read_prompt_bytes(path)?,
            &path.display().to_string(),
        )?),
        None => a.input.clone(),
    };
    let prompt = match (&input, &a.tokens, &tokenizer) {
        (Some(text), _, Some(tok)) => tok.encode(text, tok.add_bos(), false),
        (_, Some(ids), _) => ids.0.clone(),
        // BOS: let the model start from nothing.
        _ => vec![1],
    };
    let max_seq = tf.header().max_seq as usize;
    let available = (max_seq + 1).saturating_sub(prompt.len());
    let steps = a.steps.min(available);
    if steps < a.steps {
        note!(
            "note: generating {steps} tokens, not {}: the context is {max_seq}",
            a.steps
        );
    }
    let seed = a.seed.unwrap_or_else(clock_seed);
    let mut sampler = Sampler::with_options(tf.header().vocab as usize, a.sampling.options(), seed);
    if !sampler.is_greedy() && a.seed.is_none() {
        note!("seed: {seed}");
    }

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if let (Some(tok), Some(_)) = (&tokenizer, &input) {
        let mut prev = 0;
        for &t in &prompt {
            out.write_all(tok.decode_piece(prev, t)).map_err(stdout_error)?;
            prev = t;
        }
        out.flush().map_err(stdout_error)?;
    }

    // Ctrl-C stops generation between tokens: the text so far and the
    // speed line are still printed and the exit is clean (code 0).
    if !super::sys::catch_interrupt() {
        note!("note: cannot install a Ctrl-C handler; Ctrl-C will end the process abruptly");
    }

    // With --no-stats the clock is never read: subtracting two times takes
    // a branch that depends on them, and a run whose instructions are
    // counted must execute the same ones every time.
    let clock = || (!a.no_stats).then(Instant::now);
    let start = clock();
    sampler.accept(&prompt);
    let mut next = sampler.sample(tf.prefill(&prompt)?)?;
    let prefill_time = start.map(|s| s.elapsed());
    let mut prev = *prompt.last().unwrap_or(&1);
    let mut generated = 0;
    let mut first_token = None;
    let decode_start = clock();
    for i in 0..steps {
        if super::sys::interrupted() {
            note!("\ninterrupted");
            break;
        }
        match &tokenizer {
            Some(tok) => {
                if next == tok.bos() || tok.is_end_of_turn(next) {
                    break;
                }
                out.write_all(tok.decode_piece(prev, next)).map_err(stdout_error)?;
            }
            None => write!(out, "{}{next}", if i > 0 { " " } else { "" }).map_err(stdout_error)?,
        }
        out.flush().map_err(stdout_error)?;
        if generated == 0 {
            // None with --no-stats: `start` is, and no clock is read.
            first_token = start.map(|s| s.elapsed());
        }
        generated += 1;
        if i + 1 == steps {
            break;
        }
        prev = next;
        next = sampler.sample(tf.forward(next, prompt.len() + i)?)?;
    }
    writeln!(out).map_err(stdout_error)?;
    let (Some(prefill_time), Some(decode_start)) = (prefill_time, decode_start) else {
        return Ok(());
    };
    let decode_time = decode_start.elapsed().as_secs_f64();
    let first_token = match first_token {
        Some(t) => format!("first token after {:.1} ms; ", t.as_secs_f64() * 1e3),
        None => String::new(),
    };
    note!(
        "prompt: {} tokens in {:.1} ms ({:.1} tok/s); {first_token}generated {} tokens in {:.1} ms: {:.1} tok/s",
        prompt.len(),
        prefill_time.as_secs_f64() * 1e3,
        prompt.len() as f64 / prefill_time.as_secs_f64().max(1e-9),
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

/// A tokenizer with more tokens than the model's vocabulary belongs to
/// another model: its ids would be refused, or decoded as the wrong text.
fn check_vocab(tok: &Tokenizer, path: &std::path::Path, vocab: usize) -> Result<()> {
    if tok.vocab_size() > vocab {
        return Err(MlError::shape(format!(
            "{} has {} tokens but the model's vocabulary is {vocab}: they do not belong together",
            path.display(),
            tok.vocab_size()
        )));
    }
    Ok(())
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// `ml chat`: a conversation on stdin, one user turn per line.
#[derive(clap::Args)]
pub struct ChatArgs {
    /// The .mlb model (an instruct model, e.g. SmolLM2-135M-Instruct).
    model: PathBuf,
    /// The .tok tokenizer; its chat template must be ChatML.
    #[arg(short = 'z', long)]
    tokenizer: PathBuf,
    /// System message (default: the one the chat template inserts, if any; "" for none).
    #[arg(long)]
    system: Option<String>,
    /// Most tokens per reply, at least 1.
    #[arg(short = 'n', long, default_value_t = 512, allow_negative_numbers = true, value_parser = super::count)]
    steps: usize,
    #[command(flatten)]
    sampling: super::SamplingArgs,
    /// RNG seed; the same seed, model and input give the same replies (default: from the clock).
    #[arg(short = 's', long)]
    seed: Option<u64>,
    #[command(flatten)]
    ctx: super::CtxArg,
    /// After each reply, print its speed and the context used to stderr.
    #[arg(long)]
    stats: bool,
    #[command(flatten)]
    threads: super::ThreadsArg,
    #[command(flatten)]
    batch: super::BatchArg,
    #[command(flatten)]
    load: super::LoadArg,
}

/// Why a reply stopped.
#[derive(PartialEq)]
enum ReplyEnd {
    EndOfTurn,
    Limit,
    Interrupted,
    ContextFull,
}

/// Each stdin line is a user turn: it is wrapped in the ChatML template,
/// only the tokens the model has not seen yet are fed (the KV cache keeps
/// the conversation), and the reply is streamed until an end-of-turn token.
/// A turn that does not fit in the context, or a reply that reaches its end,
/// stops the chat with a Shape error (exit 5) saying so. End of input ends
/// the chat (exit 0); Ctrl-C stops a reply, or, while waiting for input,
/// ends the chat.
pub fn chat(a: ChatArgs) -> Result<()> {
    let model = a.load.open(&a.model)?;
    let mut tf = a.ctx.transformer(&model, a.threads.count())?;
    a.batch.apply(&mut tf)?;
    let ctx = tf.header().max_seq as usize;
    let tok = Tokenizer::open(&a.tokenizer)?;
    let shown = a.tokenizer.display();
    let chat = tok
        .chat()
        .map_err(|e| MlError::new(e.kind, format!("{shown}: {}", e.message)))?;
    let vocab = model.header().vocab as usize;
    check_vocab(&tok, &a.tokenizer, vocab)?;
    let seed = a.seed.unwrap_or_else(clock_seed);
    let mut sampler = Sampler::with_options(vocab, a.sampling.options(), seed);
    if !sampler.is_greedy() && a.seed.is_none() {
        note!("seed: {seed}");
    }
    let system = match a.system {
        Some(s) if s.is_empty() => None,
        Some(s) => Some(s),
        None => chat.default_system().map(str::to_string),
    };
    // Tokens of the conversation the model has not processed yet.
    let mut pending = system.map_or_else(Vec::new, |s| chat.turn(&tok, "system", &s));

    // Ctrl-C during a reply stops it; while waiting for input it ends the chat.
    let generating = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    let (g, i) = (Arc::clone(&generating), Arc::clone(&interrupted));
    let handler = move || {
        if g.load(Ordering::SeqCst) {
            i.store(true, Ordering::SeqCst);
        } else {
            note!();
            std::process::exit(0);
        }
    };
    if ctrlc::set_handler(handler).is_err() {
        note!("note: cannot install a Ctrl-C handler; Ctrl-C will end the process abruptly");
    }

    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut pos = 0usize;
    let mut line = String::new();
    loop {
        if interactive {
            write!(out, "> ").map_err(stdout_error)?;
            out.flush().map_err(stdout_error)?;
        }
        line.clear();
        let read = input
            .read_line(&mut line)
            .map_err(|e| MlError::io(format!("cannot read stdin: {e}")))?;
        if read == 0 {
            break;
        }
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        let mut feed = std::mem::take(&mut pending);
        feed.extend(chat.turn(&tok, "user", text));
        feed.extend(chat.open_turn(&tok, "assistant"));
        // The turn and at least one reply token must fit.
        if pos + feed.len() >= ctx {
            return Err(MlError::shape(format!(
                "context full: {pos} of {ctx} positions used; this turn needs {} more and a reply at least one; \
                 start a new chat",
                feed.len()
            )));
        }

        generating.store(true, Ordering::SeqCst);
        interrupted.store(false, Ordering::SeqCst);
        let start = Instant::now();
        sampler.accept(&feed);
        let mut next = sampler.sample(tf.feed(&feed, pos)?)?;
        pos += feed.len();
        let prompt_time = start.elapsed();
        let mut first_token = None;
        let decode_start = Instant::now();
        let mut generated = 0;
        let mut prev = *feed.last().unwrap_or(&0);
        let end = loop {
            if chat.ends_turn(&tok, next) {
                break ReplyEnd::EndOfTurn;
            }
            if generated == a.steps {
                break ReplyEnd::Limit;
            }
            if interrupted.load(Ordering::SeqCst) {
                break ReplyEnd::Interrupted;
            }
            out.write_all(tok.decode_piece(prev, next)).map_err(stdout_error)?;
            out.flush().map_err(stdout_error)?;
            if generated == 0 {
                first_token = Some(start.elapsed());
            }
            generated += 1;
            if pos == ctx {
                break ReplyEnd::ContextFull;
            }
            let logits = tf.forward(next, pos)?;
            pos += 1;
            prev = next;
            next = sampler.sample(logits)?;
        };
        generating.store(false, Ordering::SeqCst);
        writeln!(out).map_err(stdout_error)?;
        out.flush().map_err(stdout_error)?;
        if a.stats {
            let secs = decode_start.elapsed().as_secs_f64();
            let first_token = match first_token {
                Some(t) => format!("first token after {:.1} ms; ", t.as_secs_f64() * 1e3),
                None => String::new(),
            };
            note!(
                "turn: {} tokens in {:.1} ms; {first_token}reply: {generated} tokens in {:.1} ms ({:.1} tok/s); context: {pos} of {ctx}",
                feed.len(),
                prompt_time.as_secs_f64() * 1e3,
                secs * 1e3,
                if secs > 0.0 { generated as f64 / secs } else { 0.0 }
            );
        }
        match end {
            ReplyEnd::EndOfTurn => {}
            ReplyEnd::Limit => note!("note: the reply reached -n {} tokens and was cut off", a.steps),
            ReplyEnd::Interrupted => note!("interrupted"),
            ReplyEnd::ContextFull => {
                return Err(MlError::shape(format!(
                    "context full: {pos} of {ctx} positions used; the reply was cut off; start a new chat"
                )))
            }
        }
        // The history closes the turn as ChatML does, whatever ended it.
        pending = chat.close_turn(&tok);
    }
    Ok(())
}
