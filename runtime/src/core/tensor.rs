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

/// A quantized matrix: `rows` rows of `cols` weights, `cols` a multiple of
/// `QK`. `q` holds all quant bytes (int8 for Q8_0, packed nibbles for Q4_0),
/// `d` one scale per block; both row-major, or with `packed` in the layouts
/// of `pack_row_groups` and `pack_scale_groups`.
#[derive(Debug, Clone, Copy)]
pub struct QTensor<'a> {
    pub wtype: WType,
    pub rows: usize,
    pub cols: usize,
    pub q: &'a [u8],
    pub d: &'a [f32],
    pub packed: bool,
}

/// Bytes of one row that `pack_row_groups` keeps together.
pub const PACK_CHUNK: usize = 64;

/// Where byte `offset` of row `j` (0..4) of a four-row group lies, from the
/// group's start, once `pack_row_groups` has packed it. Rows are cut into
/// `PACK_CHUNK`-byte chunks, and chunk c of the four rows lies side by side
/// (row 0's, then row 1's, …) before chunk c + 1; the four rows' last,
/// shorter chunks (row_bytes % PACK_CHUNK) follow the same way.
#[inline(always)]
pub fn packed_offset(j: usize, offset: usize, row_bytes: usize) -> usize {
    let whole = row_bytes - row_bytes % PACK_CHUNK;
    if offset < whole {
        (offset - offset % PACK_CHUNK) * 4 + j * PACK_CHUNK + offset % PACK_CHUNK
    } else {
        4 * whole + j * (row_bytes - whole) + (offset - whole)
    }
}

/// Packs the quants of a row-major matrix in place: every whole group of
/// four rows is reordered as `packed_offset` says, so that a kernel reading
/// four rows side by side, a chunk of each at a time, reads memory in one
/// ascending stream (which the hardware prefetchers follow) instead of four.
/// Rows past the last whole group stay as they are. `scratch` holds one
/// group (4 · row_bytes).
pub fn pack_row_groups(q: &mut [u8], rows: usize, row_bytes: usize, scratch: &mut Vec<u8>) {
    let group = 4 * row_bytes;
    scratch.resize(group, 0);
    for g in q[..rows / 4 * group].chunks_exact_mut(group) {
        scratch.copy_from_slice(g);
        for (j, row) in scratch.chunks_exact(row_bytes).enumerate() {
            for (c, chunk) in row.chunks(PACK_CHUNK).enumerate() {
                let at = packed_offset(j, c * PACK_CHUNK, row_bytes);
                g[at..at + chunk.len()].copy_from_slice(chunk);
            }
        }
    }
}

/// Packs the scales of a row-major matrix in place to go with
/// `pack_row_groups`: each whole group of four rows is transposed, block b's
/// four scales side by side (rows 0–3) before block b + 1's, so a kernel
/// reading four rows loads their scales for consecutive blocks in one load.
/// Rows past the last whole group stay as they are. `nb` is blocks per row.
pub fn pack_scale_groups<T: Copy>(d: &mut [T], rows: usize, nb: usize, scratch: &mut Vec<T>) {
    for g in d[..rows / 4 * 4 * nb].chunks_exact_mut(4 * nb) {
        scratch.clear();
        scratch.extend_from_slice(g);
        for (j, row) in scratch.chunks_exact(nb).enumerate() {
            for (b, &v) in row.iter().enumerate() {
                g[4 * b + j] = v;
            }
        }
    }
}

/// The scale of block `b` of row `r`, packed or not.
pub fn scale(w: &QTensor, r: usize, b: usize) -> f32 {
    let nb = w.blocks_per_row();
    if w.packed && r < w.rows / 4 * 4 {
        w.d[(r - r % 4) * nb + 4 * b + r % 4]
    } else {
        w.d[r * nb + b]
    }
}

/// Row `r`'s quant bytes (packed or not) in order, as (offset in the row,
/// bytes) pieces: the whole row at once if row-major, else chunk by chunk.
/// Every piece holds whole blocks (`PACK_CHUNK` is a multiple of both block
/// sizes).
pub fn row_pieces<'a>(w: &QTensor<'a>, r: usize) -> impl Iterator<Item = (usize, &'a [u8])> {
    let (rb, q, packed) = (w.row_bytes(), w.q, w.packed && r < w.rows / 4 * 4);
    let (step, base) = if packed {
        (PACK_CHUNK, (r - r % 4) * rb)
    } else {
        (rb.max(1), r * rb)
    };
    (0..rb).step_by(step).map(move |o| {
        let len = step.min(rb - o);
        let at = if packed {
            base + packed_offset(r % 4, o, rb)
        } else {
            base + o
        };
        (o, &q[at..at + len])
    })
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

/// The Q8_0-quantized activations of `n` tokens, token-major: token t's
/// `cols` quants at `q[t·cols..]`, its `cols / QK` scales at
/// `d[t·cols/QK..]`. What the matmul kernels multiply a matrix by.
#[derive(Debug, Clone, Copy)]
pub struct QActs<'a> {
    pub q: &'a [i8],
    pub d: &'a [f32],
    pub cols: usize,
    pub n: usize,
}

impl<'a> QActs<'a> {
    /// Token `t`'s activation, as a matvec reads it.
    pub fn token(&self, t: usize) -> QAct<'a> {
        let nb = self.cols / QK;
        QAct {
            q: &self.q[t * self.cols..(t + 1) * self.cols],
            d: &self.d[t * nb..(t + 1) * nb],
        }
    }
}
