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
    let mut out = String::new();
    outln!(out, "model:             {}", a.model.display());
    outln!(
        out,
        "loaded:            {}",
        match (model.is_mapped(), model.is_packed()) {
            (true, _) => "mapped (row-major, as in the file)",
            (false, false) => "read into memory, matrices row-major",
            (false, true) => "read into memory, matrices packed in four-row groups for this tier's matvec",
        }
    );
    outln!(out, "dim:               {}", h.dim);
    outln!(out, "n_layers:          {}", h.n_layers);
    outln!(out, "n_heads:           {}", h.n_heads);
    outln!(out, "n_kv_heads:        {}", h.n_kv_heads);
    outln!(out, "head_dim:          {}", h.head_dim());
    outln!(out, "hidden_dim:        {}", h.hidden_dim);
    outln!(out, "vocab:             {}", h.vocab);
    outln!(out, "max_seq:           {}", h.max_seq);
    outln!(out, "rope_theta:        {}", h.rope_theta);
    outln!(out, "norm_eps:          {:e}", h.norm_eps);
    outln!(out, "wtype:             {}", h.wtype.name());
    outln!(out, "shared_classifier: {}", h.shared_classifier);
    outln!(out);
    outln!(
        out,
        "{:<22} {:>5} {:>12} {:>12} {:>10} {:>12} {:>10}",
        "tensor",
        "type",
        "shape",
        "q offset",
        "q bytes",
        "d offset",
        "d bytes"
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
        outln!(
            out,
            "{:<22} {:>5} {:>12} {:>12} {:>10} {:>12} {:>10}",
            t.name,
            ty,
            shape,
            t.q_offset,
            t.q_bytes,
            d_off,
            d_bytes
        );
    }
    outln!(out);
    outln!(out, "file bytes:        {}", layout.file_bytes);
    outln!(out, "weight bytes:      {}", layout.weight_bytes());
    outln!(out, "parameters:        {}", layout.parameters());
    super::print(&out)
}
