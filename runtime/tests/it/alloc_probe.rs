//! The test binary's global allocator: it forwards every call to the system
//! allocator and, on a thread that armed it, counts the calls and notes the
//! largest size asked for. A binary has one global allocator, so the
//! allocation count of `no_alloc` and the largest-allocation bound of
//! `fuzz_regressions` share it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Probe;

thread_local! {
    // Per thread: tests run in parallel, and only the thread under test counts.
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    if ARMED.try_with(|a| a.get()).unwrap_or(false) {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    }
}

// SAFETY: forwards every call unchanged to the system allocator; `note` only
// touches const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Probe {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for this call (GlobalAlloc) is
        // passed on to the system allocator unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for this call (GlobalAlloc) is
        // passed on to the system allocator unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: the caller's contract for this call (GlobalAlloc) is
        // passed on to the system allocator unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for this call (GlobalAlloc) is
        // passed on to the system allocator unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Probe = Probe;

fn armed<T>(f: impl FnOnce() -> T) -> T {
    ARMED.with(|a| a.set(true));
    let out = f();
    ARMED.with(|a| a.set(false));
    out
}

/// Allocations (alloc, alloc_zeroed, realloc) made by `f` on this thread.
pub fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(|n| n.get());
    armed(f);
    ALLOCATIONS.with(|n| n.get()) - before
}

/// The largest single allocation `f` makes on this thread, and its result.
pub fn largest_allocation<T>(f: impl FnOnce() -> T) -> (usize, T) {
    LARGEST.with(|l| l.set(0));
    let out = armed(f);
    (LARGEST.with(|l| l.get()), out)
}
