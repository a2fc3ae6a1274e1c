//! The single 64-byte aligned allocation that holds every runtime buffer
//! (KV cache, activations, quantized activations, RoPE tables, logits).
//! It is sized once from the model header; the forward pass then carves it
//! into typed slices without allocating.

use super::aligned::{AlignedBytes, ALIGN};
use super::error::{MlError, Result};

/// Rounds up to the arena alignment with overflow checking.
fn align_up(n: usize) -> Option<usize> {
    n.checked_add(ALIGN - 1).map(|v| v & !(ALIGN - 1))
}

/// Total bytes for regions of the given sizes, each starting 64-byte aligned.
pub fn total_bytes(region_bytes: &[usize]) -> Option<usize> {
    region_bytes
        .iter()
        .try_fold(0usize, |acc, &b| acc.checked_add(align_up(b)?))
}

pub struct Arena {
    bytes: AlignedBytes,
}

impl Arena {
    /// Allocates room for the regions, zeroed. Fails with NoMem when the sum
    /// overflows or the allocation is refused.
    pub fn new(region_bytes: &[usize], what: &str) -> Result<Arena> {
        let total = total_bytes(region_bytes)
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or_else(|| MlError::no_mem(format!("the {what} would exceed the address space")))?;
        Ok(Arena {
            bytes: AlignedBytes::zeroed(total, what)?,
        })
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Starts handing out the regions in order.
    pub fn carver(&mut self) -> Carver<'_> {
        Carver {
            rest: self.bytes.as_bytes_mut(),
        }
    }
}

/// Splits the arena front to back into disjoint typed slices.
pub struct Carver<'a> {
    rest: &'a mut [u8],
}

impl<'a> Carver<'a> {
    /// The next region of `bytes` bytes, 64-byte aligned. The arena was sized
    /// for exactly this sequence of regions, so running out is a logic error.
    fn take(&mut self, bytes: usize) -> &'a mut [u8] {
        let rest = std::mem::take(&mut self.rest);
        let padded = align_up(bytes).unwrap_or(usize::MAX).min(rest.len());
        let (region, rest) = rest.split_at_mut(padded);
        self.rest = rest;
        let len = bytes.min(region.len());
        &mut region[..len]
    }

    pub fn f32s(&mut self, bytes: usize) -> &'a mut [f32] {
        let region = self.take(bytes);
        debug_assert_eq!(region.as_ptr() as usize % ALIGN, 0);
        // SAFETY: the region starts 64-byte aligned (the arena base is, and
        // every region is padded to 64 bytes), is exclusively borrowed for
        // 'a, and any bit pattern is a valid f32.
        unsafe { std::slice::from_raw_parts_mut(region.as_mut_ptr().cast::<f32>(), region.len() / 4) }
    }

    pub fn i8s(&mut self, bytes: usize) -> &'a mut [i8] {
        let region = self.take(bytes);
        // SAFETY: u8 and i8 share size, alignment and validity; the region is
        // exclusively borrowed for 'a.
        unsafe { std::slice::from_raw_parts_mut(region.as_mut_ptr().cast::<i8>(), bytes) }
    }
}
