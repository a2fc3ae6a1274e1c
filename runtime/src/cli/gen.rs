use legacy_ml::core::tensor::WType;
use legacy_ml::model::gen::GenConfig;
use legacy_ml::model::writer::save_atomically;
use legacy_ml::Result;
use std::path::PathBuf;

/// The defaults are a tiny GQA model (dim 64, 2 layers, 4 heads, 2 KV heads)
/// that decodes in microseconds per token.
#[derive(clap::Args)]
pub struct GenArgs {
    /// Output .mlb path (written to a temporary file, then renamed).
    #[arg(short, long)]
    out: PathBuf,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Weight type: q8_0 or q4_0.
    #[arg(long, default_value = "q8_0")]
    wtype: WType,
    #[arg(long, default_value_t = 64)]
    dim: u32,
    #[arg(long, default_value_t = 2)]
    layers: u32,
    #[arg(long, default_value_t = 4)]
    heads: u32,
    #[arg(long, default_value_t = 2)]
    kv_heads: u32,
    #[arg(long, default_value_t = 128)]
    hidden: u32,
    #[arg(long, default_value_t = 256)]
    vocab: u32,
    #[arg(long, default_value_t = 64)]
    max_seq: u32,
    /// Reuse the embedding table as the classifier (no wcls tensor).
    #[arg(long)]
    shared_classifier: bool,
}

pub fn run(a: GenArgs) -> Result<()> {
    let cfg = GenConfig {
        dim: a.dim,
        n_layers: a.layers,
        n_heads: a.heads,
        n_kv_heads: a.kv_heads,
        hidden_dim: a.hidden,
        vocab: a.vocab,
        max_seq: a.max_seq,
        wtype: a.wtype,
        shared_classifier: a.shared_classifier,
        seed: a.seed,
    };
    let mut bytes = 0;
    save_atomically(&a.out, |w| {
        bytes = cfg.write(w)?;
        Ok(())
    })?;
    note!(
        "wrote {} ({} bytes, {}, seed {})",
        a.out.display(),
        bytes,
        cfg.wtype.name(),
        cfg.seed
    );
    Ok(())
}
