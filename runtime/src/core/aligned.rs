//! 64-byte aligned byte storage and the few reinterpreting casts the crate
//! needs. Every unsafe cast of the loader and the arena lives here, next to
//! the checks that make it sound.

use super::error::{MlError, Result};

/// The alignment of every array in a .mlb file and of every arena buffer:
/// one cache line, and the widest SIMD load (AVX-512).
pub const ALIGN: usize = 64;

/// A zero-initialised byte buffer whose start is 64-byte aligned.
///
/// Allocated with `alloc_zeroed`, so a large buffer (a long KV cache) costs
/// address space, not page-touching, until it is used; and a refused
/// allocation is a NoMem error, never an abort.
pub struct AlignedBytes {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBytes owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBytes {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for AlignedBytes {}

impl AlignedBytes {
    fn layout(len: usize) -> Option<std::alloc::Layout> {
        std::alloc::Layout::from_size_align(len.max(1), ALIGN).ok()
    }

    /// Allocates `len` zero bytes, or fails with NoMem instead of aborting.
    pub fn zeroed(len: usize, what: &str) -> Result<Self> {
        let refused = || MlError::no_mem(format!("cannot allocate {len} bytes for the {what}"));
        let layout = Self::layout(len).ok_or_else(refused)?;
        // SAFETY: the layout has a non-zero size (len.max(1)).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(ptr).ok_or_else(refused)?;
        Ok(AlignedBytes { ptr, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: ptr owns len initialised (zeroed) bytes for our lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBytes {
    fn drop(&mut self) {
        if let Some(layout) = Self::layout(self.len) {
            // SAFETY: allocated in `zeroed` with this same layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

/// Views bytes as signed bytes.
pub fn bytes_as_i8(b: &[u8]) -> &[i8] {
    // SAFETY: u8 and i8 have the same size and alignment and every bit
    // pattern is valid for both.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<i8>(), b.len()) }
}

/// Views 4-byte aligned bytes, a whole number of f32s long, as f32s. The
/// loader has checked both for every array; a violation here is a logic error
/// and yields a Format error rather than undefined behaviour.
pub fn bytes_as_f32(b: &[u8]) -> Result<&[f32]> {
    if !(b.as_ptr() as usize).is_multiple_of(std::mem::align_of::<f32>()) || !b.len().is_multiple_of(4) {
        return Err(MlError::format(format!(
            "f32 array at {:p} of {} bytes is misaligned or ragged",
            b.as_ptr(),
            b.len()
        )));
    }
    // SAFETY: alignment and length were checked above; every bit pattern is
    // a valid f32; the lifetime is that of `b`.
    Ok(unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<f32>(), b.len() / 4) })
}
