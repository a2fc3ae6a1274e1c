//! The runtime's integration tests, linked as one binary (`--test it`).
//!
//! Each module was a test binary of its own (`tests/<module>.rs`); merged,
//! the matrix links and starts one binary per row and qemu CPU instead of
//! seventeen. A module's tests keep their names under the module's path, so
//! `cargo test -p runtime --test it golden` selects what `--test golden` did.
//!
//! What needed a process of its own is shared here instead: the global
//! allocator that `no_alloc` counts with and `fuzz_regressions` measures
//! with is one allocator (`alloc_probe`), armed per thread, so the tests
//! of the other modules, which run on other threads, are not counted.

mod alloc_probe;
mod support;

mod asm;
mod batch;
mod bpe;
mod cli;
mod faults;
mod forward_reference;
mod fuzz_regressions;
mod golden;
mod guard;
mod kernels;
mod loader;
mod memory;
mod no_alloc;
mod perplexity;
mod quant;
mod sampler;
mod scalar_reference;
mod threads;
mod tokenizer;
