//! The harness's modules, as a library: the `harness` binary (`src/main.rs`)
//! is the command line over them, and the fuzz targets (`fuzz/`,
//! `matrix_toml`) and tests reach matrix.toml parsing ([`config::Matrix`])
//! through it.

pub mod audit;
pub mod builder;
pub mod commands;
pub mod config;
pub mod floor;
pub mod golden;
pub mod icount;
pub mod insn;
pub mod isa;
pub mod outcome;
pub mod progress;
pub mod report;
pub mod runner;
pub mod setup;
pub mod wine;
