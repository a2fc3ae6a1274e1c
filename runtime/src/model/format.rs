//! The .mlb model file (DESIGN.md §6; byte layout in FORMAT.md): a 256-byte
//! little-endian header, then every tensor's arrays in a fixed order, each
//! array starting on a 64-byte boundary.
//!
//! Every file is treated as hostile. `Layout::validate` checks the header and
//! computes every array's place with checked u64 arithmetic before a single
//! weight is touched.

use crate::core::aligned::ALIGN;
use crate::core::error::{MlError, Result};
use crate::core::quant::QK;
use crate::core::tensor::WType;

pub const MAGIC: [u8; 4] = *b"MLB1";
pub const VERSION: u32 = 1;
pub const HEADER_BYTES: usize = 256;
/// Bytes of the header that carry fields; the rest must be zero.
const HEADER_FIELDS_END: usize = 52;

/// The header fields, as stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Header {
    pub dim: u32,
    pub n_layers: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub hidden_dim: u32,
    pub vocab: u32,
    pub max_seq: u32,
    pub rope_theta: f32,
    pub norm_eps: f32,
    pub wtype: WType,
    pub shared_classifier: bool,
}

impl Header {
    pub fn head_dim(&self) -> u32 {
        self.dim / self.n_heads
    }
    pub fn kv_dim(&self) -> u32 {
        self.head_dim() * self.n_kv_heads
    }

    pub fn to_bytes(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[0..4].copy_from_slice(&MAGIC);
        let words: [u32; 12] = [
            VERSION,
            self.dim,
            self.n_layers,
            self.n_heads,
            self.n_kv_heads,
            self.hidden_dim,
            self.vocab,
            self.max_seq,
            self.rope_theta.to_bits(),
            self.norm_eps.to_bits(),
            self.wtype.code(),
            self.shared_classifier as u32,
        ];
        for (i, w) in words.iter().enumerate() {
            h[4 + 4 * i..8 + 4 * i].copy_from_slice(&w.to_le_bytes());
        }
        h
    }

    /// Parses and validates the header alone (no sizes against the file).
    pub fn parse(bytes: &[u8]) -> Result<Header> {
        if bytes.len() < HEADER_BYTES {
            return Err(MlError::format(format!(
                "file is {} bytes, shorter than the {HEADER_BYTES}-byte .mlb header",
                bytes.len()
            )));
        }
        if bytes[0..4] != MAGIC {
            return Err(MlError::format(format!(
                "magic is {:02x?}, expected {:02x?} (\"MLB1\"): not a .mlb model",
                &bytes[0..4],
                MAGIC
            )));
        }
        let word = |i: usize| u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
        let version = word(1);
        if version != VERSION {
            return Err(MlError::format(format!(
                "version is {version}, this runtime reads version {VERSION}"
            )));
        }
        let fields = [
            ("dim", word(2)),
            ("n_layers", word(3)),
            ("n_heads", word(4)),
            ("n_kv_heads", word(5)),
            ("hidden_dim", word(6)),
            ("vocab", word(7)),
            ("max_seq", word(8)),
        ];
        for (name, value) in fields {
            if value == 0 {
                return Err(MlError::format(format!(
                    "header field {name} is 0; it must be positive"
                )));
            }
        }
        let rope_theta = f32::from_bits(word(9));
        let norm_eps = f32::from_bits(word(10));
        if !(rope_theta.is_finite() && rope_theta > 0.0) {
            return Err(MlError::format(format!(
                "rope_theta is {rope_theta}; it must be finite and positive"
            )));
        }
        if !(norm_eps.is_finite() && norm_eps >= 0.0) {
            return Err(MlError::format(format!(
                "norm_eps is {norm_eps}; it must be finite and not negative"
            )));
        }
        let wtype = WType::from_code(word(11)).ok_or_else(|| {
            MlError::format(format!(
                "wtype is {}; known codes are {} (q8_0) and {} (q4_0)",
                word(11),
                WType::Q8_0.code(),
                WType::Q4_0.code()
            ))
        })?;
        let shared_classifier = match word(12) {
            0 => false,
            1 => true,
            other => {
                return Err(MlError::format(format!(
                    "shared_classifier is {other}; it must be 0 or 1"
                )))
            }
        };
        if let Some(i) = bytes[HEADER_FIELDS_END..HEADER_BYTES].iter().position(|&b| b != 0) {
            return Err(MlError::format(format!(
                "header padding byte at offset {} is {:#04x}; bytes {HEADER_FIELDS_END}..{HEADER_BYTES} must be zero",
                HEADER_FIELDS_END + i,
                bytes[HEADER_FIELDS_END + i]
            )));
        }
        let h = Header {
            dim: word(2),
            n_layers: word(3),
            n_heads: word(4),
            n_kv_heads: word(5),
            hidden_dim: word(6),
            vocab: word(7),
            max_seq: word(8),
            rope_theta,
            norm_eps,
            wtype,
            shared_classifier,
        };
        h.check_shapes()?;
        Ok(h)
    }

    /// The rules that make the dimensions fit together.
    pub fn check_shapes(&self) -> Result<()> {
        let h = self;
        if !h.n_heads.is_multiple_of(h.n_kv_heads) {
            return Err(MlError::shape(format!(
                "n_heads {} is not a multiple of n_kv_heads {}",
                h.n_heads, h.n_kv_heads
            )));
        }
        if !h.dim.is_multiple_of(h.n_heads) {
            return Err(MlError::shape(format!(
                "dim {} is not a multiple of n_heads {}",
                h.dim, h.n_heads
            )));
        }
        if !h.head_dim().is_multiple_of(2) {
            return Err(MlError::shape(format!(
                "head_dim {} (dim {} / n_heads {}) is odd; RoPE rotates pairs",
                h.head_dim(),
                h.dim,
                h.n_heads
            )));
        }
        for (name, k) in [("dim", h.dim), ("hidden_dim", h.hidden_dim)] {
            if !(k as usize).is_multiple_of(QK) {
                return Err(MlError::shape(format!(
                    "{name} {k} is not a multiple of {QK}: every matrix's K must be whole quantization blocks"
                )));
            }
        }
        Ok(())
    }
}

/// What one tensor holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorKind {
    /// A vector of f32 (the RMSNorm weights).
    F32,
    /// A quantized matrix of the model's wtype.
    Quant,
}

/// One tensor's place in the file. For F32 tensors only `q_*` is used (as the
/// data array); `d_*` is empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    pub name: String,
    pub kind: TensorKind,
    pub rows: usize,
    pub cols: usize,
    pub q_offset: usize,
    pub q_bytes: usize,
    pub d_offset: usize,
    pub d_bytes: usize,
}

impl TensorEntry {
    pub fn elements(&self) -> usize {
        self.rows * self.cols
    }
}

/// The tensor order of DESIGN.md §6, as (name, kind, rows, cols).
pub fn tensor_list(h: &Header) -> Vec<(String, TensorKind, u64, u64)> {
    tensor_specs(*h).collect()
}

/// One layer's tensors, in order, as (name, kind, rows, cols).
fn layer_specs(h: &Header) -> [(&'static str, TensorKind, u64, u64); 9] {
    let (dim, hidden, kv) = (h.dim as u64, h.hidden_dim as u64, h.kv_dim() as u64);
    [
        ("attn_norm", TensorKind::F32, 1, dim),
        ("wq", TensorKind::Quant, dim, dim),
        ("wk", TensorKind::Quant, kv, dim),
        ("wv", TensorKind::Quant, kv, dim),
        ("wo", TensorKind::Quant, dim, dim),
        ("ffn_norm", TensorKind::F32, 1, dim),
        ("w1", TensorKind::Quant, hidden, dim),
        ("w2", TensorKind::Quant, dim, hidden),
        ("w3", TensorKind::Quant, hidden, dim),
    ]
}

/// [`tensor_list`], generated lazily: a hostile header may claim a million
/// layers, and validation stops at the first tensor past the file's end.
fn tensor_specs(h: Header) -> impl Iterator<Item = (String, TensorKind, u64, u64)> {
    let (dim, vocab) = (h.dim as u64, h.vocab as u64);
    let layer = layer_specs(&h);
    std::iter::once(("tok_emb".to_string(), TensorKind::Quant, vocab, dim))
        .chain((0..h.n_layers).flat_map(move |l| {
            layer
                .into_iter()
                .map(move |(n, kind, rows, cols)| (format!("layers.{l}.{n}"), kind, rows, cols))
        }))
        .chain(std::iter::once(("final_norm".to_string(), TensorKind::F32, 1, dim)))
        .chain((!h.shared_classifier).then(|| ("wcls".to_string(), TensorKind::Quant, vocab, dim)))
}

/// The validated header and the place of every array.
#[derive(Debug, Clone)]
pub struct Layout {
    pub header: Header,
    pub tensors: Vec<TensorEntry>,
    /// Total file length the header implies.
    pub file_bytes: usize,
}

fn align64(v: u64) -> Option<u64> {
    v.checked_add(ALIGN as u64 - 1).map(|x| x & !(ALIGN as u64 - 1))
}

/// One tensor's arrays placed after an array ending at `end`.
struct Placed {
    q_offset: u64,
    q_bytes: u64,
    d_offset: u64,
    d_bytes: u64,
    /// Where its last array ends.
    end: u64,
}

/// Places a tensor's arrays (F32: data; quantized: q then d), each on the
/// next 64-byte boundary after `end`. Overflow is a Format error naming the
/// tensor.
fn place(end: u64, wtype: WType, name: &str, kind: TensorKind, rows: u64, cols: u64) -> Result<Placed> {
    let overflow = || {
        MlError::format(format!(
            "tensor {name}: size of {rows} x {cols} overflows; the header's dimensions are corrupt"
        ))
    };
    let elements = rows.checked_mul(cols).ok_or_else(overflow)?;
    let (q_bytes, d_bytes) = match kind {
        TensorKind::F32 => (elements.checked_mul(4).ok_or_else(overflow)?, 0),
        TensorKind::Quant => (
            wtype.quant_bytes(elements),
            (elements / QK as u64).checked_mul(4).ok_or_else(overflow)?,
        ),
    };
    let q_offset = align64(end).ok_or_else(overflow)?;
    let end = q_offset.checked_add(q_bytes).ok_or_else(overflow)?;
    let d_offset = if kind == TensorKind::Quant {
        align64(end).ok_or_else(overflow)?
    } else {
        end
    };
    let end = d_offset.checked_add(d_bytes).ok_or_else(overflow)?;
    Ok(Placed {
        q_offset,
        q_bytes,
        d_offset,
        d_bytes,
        end,
    })
}

/// The header rules that bound the work of laying it out.
fn check_plausible(header: &Header) -> Result<()> {
    header.check_shapes()?;
    if header.n_layers > 1 << 20 {
        return Err(MlError::format(format!(
            "n_layers {} is implausibly large",
            header.n_layers
        )));
    }
    Ok(())
}

/// The file length a header implies, computed without listing its tensors
/// (O(1) in n_layers): every layer spans the same bytes, since its first
/// array starts on a 64-byte boundary. Overflow is a Format error.
pub fn implied_file_bytes(header: &Header) -> Result<u64> {
    check_plausible(header)?;
    let wtype = header.wtype;
    let (dim, vocab) = (header.dim as u64, header.vocab as u64);
    let mut end = place(HEADER_BYTES as u64, wtype, "tok_emb", TensorKind::Quant, vocab, dim)?.end;
    if header.n_layers > 0 {
        // One layer placed from offset 0 (aligned, like every layer start).
        let mut layer_end = 0u64;
        for (name, kind, rows, cols) in layer_specs(header) {
            layer_end = place(layer_end, wtype, &format!("layers.0.{name}"), kind, rows, cols)?.end;
        }
        let overflow = || {
            MlError::format(format!(
                "n_layers {} x {layer_end} bytes per layer overflows; the header's dimensions are corrupt",
                header.n_layers
            ))
        };
        let stride = align64(layer_end).ok_or_else(overflow)?;
        end = align64(end)
            .and_then(|start| start.checked_add(stride.checked_mul(header.n_layers as u64 - 1)?))
            .and_then(|last| last.checked_add(layer_end))
            .ok_or_else(overflow)?;
    }
    end = place(end, wtype, "final_norm", TensorKind::F32, 1, dim)?.end;
    if !header.shared_classifier {
        end = place(end, wtype, "wcls", TensorKind::Quant, vocab, dim)?.end;
    }
    Ok(end)
}

impl Layout {
    /// Computes where every array lies, from the header alone. Overflow
    /// anywhere is a Format error naming the tensor.
    pub fn from_header(header: Header) -> Result<Layout> {
        check_plausible(&header)?;
        let mut tensors = Vec::new();
        let mut end = HEADER_BYTES as u64;
        for (name, kind, rows, cols) in tensor_specs(header) {
            let p = place(end, header.wtype, &name, kind, rows, cols)?;
            end = p.end;
            let to_usize = |v: u64| {
                usize::try_from(v).map_err(|_| {
                    MlError::format(format!(
                        "tensor {name}: {v} bytes is more than this platform can address"
                    ))
                })
            };
            tensors.push(TensorEntry {
                rows: to_usize(rows)?,
                cols: to_usize(cols)?,
                q_offset: to_usize(p.q_offset)?,
                q_bytes: to_usize(p.q_bytes)?,
                d_offset: to_usize(p.d_offset)?,
                d_bytes: to_usize(p.d_bytes)?,
                name,
                kind,
            });
        }
        let file_bytes = usize::try_from(end)
            .map_err(|_| MlError::format(format!("model needs {end} bytes, more than this platform can address")))?;
        Ok(Layout {
            header,
            tensors,
            file_bytes,
        })
    }

    /// The first tensor that does not fit in `len` bytes. The walk stops
    /// there, so it visits at most one tensor per 64 bytes of the file,
    /// whatever n_layers the header claims.
    fn first_incomplete(header: Header, len: u64) -> Result<String> {
        let mut end = HEADER_BYTES as u64;
        for (name, kind, rows, cols) in tensor_specs(header) {
            end = place(end, header.wtype, &name, kind, rows, cols)?.end;
            if end > len {
                return Ok(name);
            }
        }
        Ok("?".to_string())
    }

    /// Validates a whole file image: header, then its length against the
    /// layout. The length is checked before the tensor table is built, so a
    /// header claiming more than the file holds costs no more than the file.
    pub fn validate(bytes: &[u8]) -> Result<Layout> {
        let header = Header::parse(bytes)?;
        let implied = implied_file_bytes(&header)?;
        let len = bytes.len() as u64;
        if len < implied {
            let missing = Layout::first_incomplete(header, len)?;
            return Err(MlError::format(format!(
                "file is {len} bytes but the header describes {implied} bytes: truncated (tensor {missing} is incomplete)"
            )));
        }
        if len > implied {
            return Err(MlError::format(format!(
                "file is {len} bytes but the header describes {implied} bytes: {} unexplained trailing bytes",
                len - implied
            )));
        }
        let layout = Layout::from_header(header)?;
        debug_assert_eq!(layout.file_bytes as u64, implied);
        if !(bytes.as_ptr() as usize).is_multiple_of(ALIGN) {
            return Err(MlError::format("model bytes do not start 64-byte aligned".to_string()));
        }
        let mut prev_end = HEADER_BYTES;
        for t in &layout.tensors {
            for (what, off, len) in [("quants", t.q_offset, t.q_bytes), ("scales", t.d_offset, t.d_bytes)] {
                if len == 0 {
                    continue;
                }
                if !off.is_multiple_of(ALIGN) {
                    return Err(MlError::format(format!(
                        "tensor {} {what} at offset {off} is not 64-byte aligned",
                        t.name
                    )));
                }
                if let Some(i) = bytes[prev_end..off].iter().position(|&b| b != 0) {
                    return Err(MlError::format(format!(
                        "padding byte at offset {} before tensor {} {what} is not zero",
                        prev_end + i,
                        t.name
                    )));
                }
                prev_end = off + len;
            }
        }
        Ok(layout)
    }

    /// Total weight bytes (everything after the header, padding included).
    pub fn weight_bytes(&self) -> usize {
        self.file_bytes - HEADER_BYTES
    }

    /// Number of parameters (quantized weights and norm weights).
    pub fn parameters(&self) -> u64 {
        self.tensors.iter().map(|t| t.elements() as u64).sum()
    }
}
