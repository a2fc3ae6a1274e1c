//! The .mlb model file (spec §6; byte layout in FORMAT.md): a 256-byte
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

/// The tensor order of spec §6, as (name, kind, rows, cols).
pub fn tensor_list(h: &Header) -> Vec<(String, TensorKind, u64, u64)> {
    let (dim, hidden, kv, vocab) = (h.dim as u64, h.hidden_dim as u64, h.kv_dim() as u64, h.vocab as u64);
    let mut list = vec![("tok_emb".to_string(), TensorKind::Quant, vocab, dim)];
    for l in 0..h.n_layers {
        let p = |n: &str| format!("layers.{l}.{n}");
        list.push((p("attn_norm"), TensorKind::F32, 1, dim));
        list.push((p("wq"), TensorKind::Quant, dim, dim));
        list.push((p("wk"), TensorKind::Quant, kv, dim));
        list.push((p("wv"), TensorKind::Quant, kv, dim));
        list.push((p("wo"), TensorKind::Quant, dim, dim));
        list.push((p("ffn_norm"), TensorKind::F32, 1, dim));
        list.push((p("w1"), TensorKind::Quant, hidden, dim));
        list.push((p("w2"), TensorKind::Quant, dim, hidden));
        list.push((p("w3"), TensorKind::Quant, hidden, dim));
    }
    list.push(("final_norm".to_string(), TensorKind::F32, 1, dim));
    if !h.shared_classifier {
        list.push(("wcls".to_string(), TensorKind::Quant, vocab, dim));
    }
    list
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

impl Layout {
    /// Computes where every array lies, from the header alone. Overflow
    /// anywhere is a Format error naming the tensor.
    pub fn from_header(header: Header) -> Result<Layout> {
        header.check_shapes()?;
        if header.n_layers > 1 << 20 {
            return Err(MlError::format(format!(
                "n_layers {} is implausibly large",
                header.n_layers
            )));
        }
        let list = tensor_list(&header);
        let mut tensors = Vec::with_capacity(list.len());
        let mut end = HEADER_BYTES as u64;
        for (name, kind, rows, cols) in list {
            let overflow = || {
                MlError::format(format!(
                    "tensor {name}: size of {rows} x {cols} overflows; the header's dimensions are corrupt"
                ))
            };
            let elements = rows.checked_mul(cols).ok_or_else(overflow)?;
            let (q_bytes, d_bytes) = match kind {
                TensorKind::F32 => (elements.checked_mul(4).ok_or_else(overflow)?, 0),
                TensorKind::Quant => (
                    header.wtype.quant_bytes(elements),
                    (elements / QK as u64).checked_mul(4).ok_or_else(overflow)?,
                ),
            };
            let q_offset = align64(end).ok_or_else(overflow)?;
            end = q_offset.checked_add(q_bytes).ok_or_else(overflow)?;
            let d_offset = if kind == TensorKind::Quant {
                align64(end).ok_or_else(overflow)?
            } else {
                end
            };
            end = d_offset.checked_add(d_bytes).ok_or_else(overflow)?;
            let to_usize = |v: u64| usize::try_from(v).map_err(|_| overflow());
            tensors.push(TensorEntry {
                rows: to_usize(rows)?,
                cols: to_usize(cols)?,
                q_offset: to_usize(q_offset)?,
                q_bytes: to_usize(q_bytes)?,
                d_offset: to_usize(d_offset)?,
                d_bytes: to_usize(d_bytes)?,
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

    /// Validates a whole file image: header, then its length against the layout.
    pub fn validate(bytes: &[u8]) -> Result<Layout> {
        let layout = Layout::from_header(Header::parse(bytes)?)?;
        if bytes.len() < layout.file_bytes {
            let missing = layout
                .tensors
                .iter()
                .find(|t| t.d_offset + t.d_bytes > bytes.len() || t.q_offset + t.q_bytes > bytes.len())
                .map(|t| t.name.as_str())
                .unwrap_or("?");
            return Err(MlError::format(format!(
                "file is {} bytes but the header describes {} bytes: truncated (tensor {missing} is incomplete)",
                bytes.len(),
                layout.file_bytes
            )));
        }
        if bytes.len() > layout.file_bytes {
            return Err(MlError::format(format!(
                "file is {} bytes but the header describes {} bytes: {} unexplained trailing bytes",
                bytes.len(),
                layout.file_bytes,
                bytes.len() - layout.file_bytes
            )));
        }
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
