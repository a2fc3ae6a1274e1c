//! One module per `harness` command.

pub mod audit;
pub mod doctor;
pub mod matrix;
pub mod merge;
pub mod rows;
