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
///
/// On Linux (feature `mmap`) a buffer of `HUGE_PAGE_MIN` bytes or more is
/// an anonymous mapping advised for transparent huge pages instead: a model
/// read into memory is then streamed once per token through 2 MiB pages
/// rather than 4 KiB ones, far fewer TLB misses (SmolLM2 decode gained
/// clearly: PERF.md). Where THP is off
/// the advice is a no-op.
pub struct AlignedBytes {
    storage: Backing,
    len: usize,
}

enum Backing {
    Heap(std::ptr::NonNull<u8>),
    #[cfg(all(feature = "mmap", target_os = "linux", not(miri)))]
    Anonymous(memmap2::MmapMut),
}

/// Buffers from this size on are huge-page candidates (two huge pages: a
/// smaller one would waste most of a page on rounding).
pub const HUGE_PAGE_MIN: usize = 4 << 20;

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
        // Sizes no Rust allocation may have (over isize::MAX once rounded
        // to the alignment) are refused on every path: a 32-bit process
        // could otherwise map 2 GiB that no slice can span.
        let layout = Self::layout(len).ok_or_else(refused)?;
        #[cfg(all(feature = "mmap", target_os = "linux", not(miri)))]
        if len >= HUGE_PAGE_MIN {
            // Zero-filled and page-aligned (so 64-byte aligned) by the OS.
            let map = memmap2::MmapMut::map_anon(len).map_err(|_| refused())?;
            // Advice only: refused (THP off, old kernel), the pages are small.
            let _ = map.advise(memmap2::Advice::HugePage);
            return Ok(AlignedBytes {
                storage: Backing::Anonymous(map),
                len,
            });
        }
        // SAFETY: the layout has a non-zero size (len.max(1)).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(ptr).ok_or_else(refused)?;
        Ok(AlignedBytes {
            storage: Backing::Heap(ptr),
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_bytes(&self) -> &[u8] {
        match &self.storage {
            // SAFETY: ptr owns len initialised (zeroed) bytes for our lifetime.
            Backing::Heap(ptr) => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), self.len) },
            #[cfg(all(feature = "mmap", target_os = "linux", not(miri)))]
            Backing::Anonymous(map) => &map[..self.len],
        }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.storage {
            // SAFETY: as in `as_bytes`, and `&mut self` makes the borrow unique.
            Backing::Heap(ptr) => unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), self.len) },
            #[cfg(all(feature = "mmap", target_os = "linux", not(miri)))]
            Backing::Anonymous(map) => &mut map[..self.len],
        }
    }
}

impl Drop for AlignedBytes {
    fn drop(&mut self) {
        if let (Backing::Heap(ptr), Some(layout)) = (&self.storage, Self::layout(self.len)) {
            // SAFETY: allocated in `zeroed` with this same layout.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) }
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
