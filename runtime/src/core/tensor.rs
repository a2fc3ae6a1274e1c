//! Borrowed views of quantized weights and activations, as the kernels see them.

use super::quant::{Q4_BLOCK_BYTES, QK};

/// Weight storage type of the matrices in a model (`wtype` in the .mlb header).
/// The codes are ggml's, so a reader who knows GGUF recognises them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WType {
    Q4_0,
    Q8_0,
}

impl WType {
    pub const fn code(self) -> u32 {
        match self {
            WType::Q4_0 => 2,
            WType::Q8_0 => 8,
        }
    }

    pub fn from_code(code: u32) -> Option<WType> {
        match code {
            2 => Some(WType::Q4_0),
            8 => Some(WType::Q8_0),
            _ => None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            WType::Q4_0 => "q4_0",
            WType::Q8_0 => "q8_0",
        }
    }

    /// Bytes of quants for `elements` weights (a multiple of `QK`).
    pub const fn quant_bytes(self, elements: u64) -> u64 {
        match self {
            WType::Q4_0 => elements / QK as u64 * Q4_BLOCK_BYTES as u64,
            WType::Q8_0 => elements,
        }
    }
}

impl std::str::FromStr for WType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "q8_0" | "q8" => Ok(WType::Q8_0),
            "q4_0" | "q4" => Ok(WType::Q4_0),
            other => Err(format!("unknown weight type {other:?} (expected q8_0 or q4_0)")),
        }
    }
}

/// A row-major quantized matrix: `rows` rows of `cols` weights, `cols` a
/// multiple of `QK`. `q` holds all quant bytes (int8 for Q8_0, packed nibbles
/// for Q4_0), `d` one scale per block, row after row.
#[derive(Debug, Clone, Copy)]
pub struct QTensor<'a> {
    pub wtype: WType,
    pub rows: usize,
    pub cols: usize,
    pub q: &'a [u8],
    pub d: &'a [f32],
}

impl<'a> QTensor<'a> {
    pub fn blocks_per_row(&self) -> usize {
        self.cols / QK
    }

    /// Bytes of quants per row.
    pub fn row_bytes(&self) -> usize {
        match self.wtype {
            WType::Q8_0 => self.cols,
            WType::Q4_0 => self.cols / 2,
        }
    }

    /// The Q8_0 quants as signed bytes.
    pub fn q_i8(&self) -> &'a [i8] {
        super::aligned::bytes_as_i8(self.q)
    }
}

/// A Q8_0-quantized activation vector of `d.len() * QK` elements.
#[derive(Debug, Clone, Copy)]
pub struct QAct<'a> {
    pub q: &'a [i8],
    pub d: &'a [f32],
}

impl QAct<'_> {
    pub fn len(&self) -> usize {
        self.q.len()
    }
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}
