//! Software prefetch: the hints attention and the matvecs issue ahead of
//! their streams, and the bandwidth probe's reader that `ml bench` measures
//! the roofline with (it prefetches the way the x86 matvecs do, so both use
//! one distance).

/// Which cache a prefetch asks a line into.
#[derive(Clone, Copy)]
enum CacheLevel {
    /// prefetcht0 / `pldl1keep`.
    L1,
    /// prefetcht1 / `pldl2keep`.
    L2,
}

/// Asks for the line holding `p` in `level`. A hint: it never faults,
/// whatever the address (past the end of an array included), and changes
/// no result; a no-op on targets without a stable prefetch and under Miri.
#[inline(always)]
fn prefetch_line(p: *const u8, level: CacheLevel) {
    let _ = (p, level);
    #[cfg(all(any(target_arch = "x86", target_arch = "x86_64"), not(miri)))]
    // SAFETY: prefetch is an SSE instruction, in every x86-64 and in the
    // i686 target's baseline; it reads nothing architecturally and cannot
    // fault.
    unsafe {
        #[cfg(target_arch = "x86")]
        use std::arch::x86::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        #[cfg(target_arch = "x86_64")]
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        match level {
            CacheLevel::L1 => _mm_prefetch::<_MM_HINT_T0>(p.cast()),
            CacheLevel::L2 => _mm_prefetch::<_MM_HINT_T1>(p.cast()),
        }
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: prfm is a hint in the AArch64 base ISA: no architectural
    // read, no fault, no flags or stack touched.
    unsafe {
        match level {
            CacheLevel::L1 => {
                std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) p, options(nostack, readonly, preserves_flags))
            }
            CacheLevel::L2 => {
                std::arch::asm!("prfm pldl2keep, [{0}]", in(reg) p, options(nostack, readonly, preserves_flags))
            }
        }
    }
}

/// Asks for the cache lines of the `len` floats from `p` on, into L1, to be
/// read soon (attention's key and value rows, a few positions ahead: they
/// come from L3 or memory, since each layer's weights stream through the
/// caches between two visits). `p` may point anywhere.
#[inline(always)]
pub fn prefetch_f32(p: *const f32, len: usize) {
    for line in (0..len).step_by(16) {
        prefetch_line(p.wrapping_add(line).cast(), CacheLevel::L1);
    }
}

/// Asks for the cache lines of `items` into L2: a matrix that the next
/// matvec streams, requested while the core computes something else, so
/// memory works during that phase too.
#[inline]
pub fn prefetch_l2<T>(items: &[T]) {
    let start = items.as_ptr().cast::<u8>();
    for line in (0..std::mem::size_of_val(items)).step_by(64) {
        prefetch_line(start.wrapping_add(line), CacheLevel::L2);
    }
}

/// How far ahead of a weight stream software prefetch asks for lines: in
/// each row stream of the x86 matvecs (`prefetch`), and in the bandwidth
/// probe's prefetching reader (`stream_sum`).
const WEIGHTS_AHEAD: usize = 16 << 10;

/// Sums `bytes` as little-endian u64 words in eight independent lanes, so
/// the loop is bound by loads, not by one add chain: the bandwidth probe's
/// reader. With `prefetch`, each line is asked for 16 KiB ahead into L2, as
/// the x86 matvecs do. Neither way is the faster everywhere, so the probe
/// takes the better: on an Intel Xeon the prefetch doubled what an
/// L3-resident set read and cost a little from memory (PERF.md).
pub fn stream_sum(bytes: &[u8], prefetch: bool) -> u64 {
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
    let mut lanes = [0u64; 8];
    let mut lines = bytes.chunks_exact(64);
    for (i, line) in (&mut lines).enumerate() {
        if prefetch {
            prefetch_line(bytes.as_ptr().wrapping_add(64 * i + WEIGHTS_AHEAD), CacheLevel::L2);
        }
        for (j, lane) in lanes.iter_mut().enumerate() {
            *lane = lane.wrapping_add(word(&line[8 * j..8 * j + 8]));
        }
    }
    let tail = lines.remainder().iter().fold(0u64, |a, &b| a.wrapping_add(b as u64));
    lanes.iter().fold(tail, |a, &b| a.wrapping_add(b))
}

/// KV rows ahead that attention prefetches. The rows come from memory (the
/// weights streamed since the last token evicted them). 16 was the best of
/// 6, 16 and 32 on SmolLM2 Q4_0 decode at long contexts (PERF.md).
pub const ROWS_AHEAD: usize = 16;

// Software prefetch for the x86 matvecs (`to_l2`, `row_group`). At short
// rows (K = 576) the hardware prefetchers alone stream far below the read
// bandwidth, and prefetching into L1 (T0) holds one of the few L1 miss
// buffers for a whole DRAM round trip; into L2 (T1), 16 KiB ahead of each
// row stream, comes close to it (the figures, and the distances tried, are
// in PERF.md).

/// Asks for the line holding `p` in L2. `p` may point anywhere, past
/// the end of the matrix included: a prefetch never faults.
#[cfg(all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")))]
#[inline(always)]
pub fn to_l2<T>(p: *const T) {
    prefetch_line(p.cast(), CacheLevel::L2);
}

/// The four rows' lines at byte `offset` of each, `WEIGHTS_AHEAD` on.
#[cfg(all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")))]
#[inline(always)]
fn group_lines_ahead<const PACKED: bool>(wq: *const u8, stride: usize, r: usize, offset: usize) {
    for j in 0..4 {
        to_l2(wq.wrapping_add(match PACKED {
            false => (r + j) * stride + offset + WEIGHTS_AHEAD,
            true => r * stride + 4 * offset + 64 * j + WEIGHTS_AHEAD,
        }));
    }
}

/// The prefetches of a four-row group (rows r..r+4, `stride` bytes
/// apart, scales `nb` per row at `wd`) at the step that reads `blocks`
/// blocks of `block_bytes` from block `b` on. Called every step, it asks
/// for each weight line and each scale line once. `PACKED`: the group
/// is one stream (`core::tensor::pack_row_groups`), the four rows' bytes
/// at `offset` side by side at 4·offset.
#[cfg(all(feature = "isa-sse2", any(target_arch = "x86", target_arch = "x86_64")))]
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn row_group<const PACKED: bool>(
    wq: *const u8,
    wd: *const f32,
    stride: usize,
    nb: usize,
    r: usize,
    b: usize,
    blocks: usize,
    block_bytes: usize,
) {
    let (offset, bytes) = (b * block_bytes, blocks * block_bytes);
    // The callers' steps are constants, so one branch compiles away: the
    // matvecs' steps of a line or less keep exactly their code from before
    // the quads (a loop there cost 14% of sse2's instructions per decoded
    // token under qemu, and 6% of avx2's prompt speed).
    if bytes <= 64 {
        // The line this step starts in, if no earlier step asked for it.
        if offset % 64 < bytes {
            group_lines_ahead::<PACKED>(wq, stride, r, offset);
        }
    } else {
        // Every line of a longer step (the AVX-512 Q8_0 tile's quads, 128
        // bytes a row), which starts on a line.
        let mut line = offset - offset % 64;
        while line < offset + bytes {
            group_lines_ahead::<PACKED>(wq, stride, r, line);
            line += 64;
        }
    }
    // The group's scales are 4·nb contiguous floats, 16 bytes per block
    // while the weights advance 4·block_bytes: ask for them as many
    // blocks ahead as the weights, so both arrive in time.
    if b % 4 < blocks {
        let ahead = WEIGHTS_AHEAD * 4 / block_bytes;
        to_l2(wd.wrapping_add(r * nb + 4 * b).cast::<u8>().wrapping_add(ahead));
    }
}
