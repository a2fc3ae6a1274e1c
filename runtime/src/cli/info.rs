use legacy_ml::model::format::TensorKind;
use legacy_ml::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct InfoArgs {
    /// The .mlb model.
    model: PathBuf,
    #[command(flatten)]
    load: super::LoadArg,
}

pub fn run(a: InfoArgs) -> Result<()> {
    let model = a.load.open(&a.model)?;
    let h = model.header();
    let layout = model.layout();
    println!("model:             {}", a.model.display());
    println!(
        "loaded:            {}",
        match (model.is_mapped(), model.is_packed()) {
            (true, _) => "mapped (row-major, as in the file)",
            (false, false) => "read into memory, matrices row-major",
            (false, true) => "read into memory, matrices packed in four-row groups for this tier's matvec",
        }
    );
    println!("dim:               {}", h.dim);
    println!("n_layers:          {}", h.n_layers);
    println!("n_heads:           {}", h.n_heads);
    println!("n_kv_heads:        {}", h.n_kv_heads);
    println!("head_dim:          {}", h.head_dim());
    println!("hidden_dim:        {}", h.hidden_dim);
    println!("vocab:             {}", h.vocab);
    println!("max_seq:           {}", h.max_seq);
    println!("rope_theta:        {}", h.rope_theta);
    println!("norm_eps:          {:e}", h.norm_eps);
    println!("wtype:             {}", h.wtype.name());
    println!("shared_classifier: {}", h.shared_classifier);
    println!();
    println!(
        "{:<22} {:>5} {:>12} {:>12} {:>10} {:>12} {:>10}",
        "tensor", "type", "shape", "q offset", "q bytes", "d offset", "d bytes"
    );
    for t in &layout.tensors {
        let ty = match t.kind {
            TensorKind::F32 => "f32",
            TensorKind::Quant => h.wtype.name(),
        };
        let shape = format!("{}x{}", t.rows, t.cols);
        let (d_off, d_bytes) = match t.kind {
            TensorKind::F32 => ("-".to_string(), "-".to_string()),
            TensorKind::Quant => (t.d_offset.to_string(), t.d_bytes.to_string()),
        };
        println!(
            "{:<22} {:>5} {:>12} {:>12} {:>10} {:>12} {:>10}",
            t.name, ty, shape, t.q_offset, t.q_bytes, d_off, d_bytes
        );
    }
    println!();
    println!("file bytes:        {}", layout.file_bytes);
    println!("weight bytes:      {}", layout.weight_bytes());
    println!("parameters:        {}", layout.parameters());
    Ok(())
}
