//! The model layer: the .mlb file, the forward pass, sampling and tokenizing.

pub mod bpe;
pub mod format;
pub mod gen;
pub mod perplexity;
pub mod prompt;
pub mod sampler;
pub mod streaming;
pub mod tokenizer;
pub mod transformer;
pub mod writer;

use crate::core::aligned::bytes_as_f32;
use crate::core::error::{MlError, Result};
use crate::core::file::{LoadMode, Storage};
use crate::core::quant::QK;
use crate::core::tensor::{pack_row_groups, pack_scale_groups, QTensor, WType};
use crate::kernels;
use format::{Header, Layout, TensorEntry, TensorKind};
use std::path::Path;

/// How the matrices of a model read into memory are laid out; a mapped
/// model stays row-major, as in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatrixOrder {
    /// Packed where the tier's matvec reads packed groups and this CPU
    /// streams them faster (`streaming`).
    Auto,
    /// Row-major, as in the file.
    RowMajor,
    /// Packed in four-row groups wherever the tier's matvec reads them
    /// (`kernels::PACKS_ROW_GROUPS`), whatever the CPU.
    Packed,
}

/// A loaded, validated model: its bytes (mapped or owned) and where every
/// tensor lies in them.
pub struct Model {
    storage: Storage,
    layout: Layout,
    /// Whether the matrices were packed at load (`pack_row_groups`,
    /// `pack_scale_groups`).
    packed: bool,
}

impl Model {
    /// Reads (or, when larger than `core::file::READ_LIMIT`, maps) and
    /// validates a .mlb file.
    pub fn open(path: &Path) -> Result<Model> {
        Model::open_with(path, LoadMode::Auto)
    }

    /// Maps or reads a .mlb file as `mode` says, then validates it. A mapped
    /// file must not be truncated or rewritten in place while the model
    /// lives (`core::file`); a read one is a private copy.
    pub fn open_with(path: &Path, mode: LoadMode) -> Result<Model> {
        Model::open_with_order(path, mode, MatrixOrder::Auto)
    }

    /// As `open_with`, with the matrices of a model read into memory in
    /// `order`.
    pub fn open_with_order(path: &Path, mode: LoadMode, order: MatrixOrder) -> Result<Model> {
        Model::from_storage(Storage::open_with(path, mode)?, order)
            .map_err(|e| MlError::new(e.kind, format!("{}: {}", path.display(), e.message)))
    }

    /// Validates a .mlb image held in memory (copied into aligned storage).
    pub fn from_bytes(bytes: &[u8]) -> Result<Model> {
        Model::from_storage(Storage::from_bytes(bytes)?, MatrixOrder::Auto)
    }

    fn from_storage(storage: Storage, order: MatrixOrder) -> Result<Model> {
        let layout = Layout::validate(storage.bytes())?;
        let mut model = Model {
            storage,
            layout,
            packed: false,
        };
        model.check_values()?;
        let pack = match order {
            MatrixOrder::Auto => streaming::streaming().pack_row_groups,
            MatrixOrder::Packed => kernels::PACKS_ROW_GROUPS,
            MatrixOrder::RowMajor => false,
        };
        if pack {
            model.pack();
        }
        Ok(model)
    }

    /// Packs every matrix's quants and scales in place for the active tier's
    /// matvec (`core::tensor::pack_row_groups`, `pack_scale_groups`), if the
    /// bytes are an owned copy: a mapped file stays row-major, and the
    /// kernels read it as such. The layout was validated, so every slice
    /// below lies inside the bytes and holds whole rows.
    fn pack(&mut self) {
        let wtype = self.layout.header.wtype;
        let Some(bytes) = self.storage.bytes_mut() else {
            return;
        };
        let (mut scratch, mut scale_scratch) = (Vec::new(), Vec::new());
        for t in self.layout.tensors.iter().filter(|t| t.kind == TensorKind::Quant) {
            let row_bytes = wtype.quant_bytes(t.cols as u64) as usize;
            pack_row_groups(
                &mut bytes[t.q_offset..t.q_offset + t.q_bytes],
                t.rows,
                row_bytes,
                &mut scratch,
            );
            // The scales as 4-byte units (f32 little-endian): packing moves
            // them whole.
            let (scales, _) = bytes[t.d_offset..t.d_offset + t.d_bytes].as_chunks_mut::<4>();
            pack_scale_groups(scales, t.rows, t.cols / QK, &mut scale_scratch);
        }
        self.packed = true;
    }

    /// Scales and norm weights must be finite: a NaN there would silently
    /// poison every logit. The scan touches only the f32 arrays.
    fn check_values(&self) -> Result<()> {
        for t in &self.layout.tensors {
            let (what, values) = match t.kind {
                TensorKind::F32 => ("weight", self.f32_array(t.q_offset, t.q_bytes)?),
                TensorKind::Quant => ("scale", self.f32_array(t.d_offset, t.d_bytes)?),
            };
            if let Some(i) = values.iter().position(|v| !v.is_finite()) {
                return Err(MlError::format(format!(
                    "tensor {} {what} #{i} is {}, not finite",
                    t.name, values[i]
                )));
            }
            // Q8_0 quants are clamped to ±127; the SIMD kernels' sign trick
            // (|w|, sign(x)·w) is exact only there, so -128 would be
            // silently wrong.
            if t.kind == TensorKind::Quant && self.layout.header.wtype == WType::Q8_0 {
                let q = &self.storage.bytes()[t.q_offset..t.q_offset + t.q_bytes];
                if let Some(i) = q.iter().position(|&b| b == 0x80) {
                    return Err(MlError::format(format!(
                        "tensor {} quant #{i} is -128; Q8_0 quants must lie in [-127, 127]",
                        t.name
                    )));
                }
            }
        }
        Ok(())
    }

    fn f32_array(&self, offset: usize, bytes: usize) -> Result<&[f32]> {
        bytes_as_f32(&self.storage.bytes()[offset..offset + bytes])
    }

    pub fn header(&self) -> &Header {
        &self.layout.header
    }

    /// Whether the matrices were packed in four-row groups at load
    /// (`core::tensor::pack_row_groups`), for the active tier's matvec.
    pub fn is_packed(&self) -> bool {
        self.packed
    }

    /// Whether the weights are a mapping of the file (else an owned copy).
    pub fn is_mapped(&self) -> bool {
        self.storage.is_mapped()
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The f32 vector of a norm tensor.
    pub fn vector(&self, t: &TensorEntry) -> Result<&[f32]> {
        self.f32_array(t.q_offset, t.q_bytes)
    }

    /// A tensor's bytes as they lie in memory (packed, if the model was):
    /// its quants, or its values for an f32 tensor, and its scales (empty
    /// for an f32 tensor).
    pub fn tensor_bytes(&self, t: &TensorEntry) -> (&[u8], &[u8]) {
        let bytes = self.storage.bytes();
        (
            &bytes[t.q_offset..t.q_offset + t.q_bytes],
            &bytes[t.d_offset..t.d_offset + t.d_bytes],
        )
    }

    /// The quantized matrix view of a weight tensor.
    pub fn matrix(&self, t: &TensorEntry) -> Result<QTensor<'_>> {
        let (q, d) = self.tensor_bytes(t);
        Ok(QTensor {
            wtype: self.layout.header.wtype,
            rows: t.rows,
            cols: t.cols,
            q,
            d: bytes_as_f32(d)?,
            packed: self.packed,
        })
    }
}
