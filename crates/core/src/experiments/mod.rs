//! The experiments: comparisons and measurements over the runtime (the STS
//! grid, `eval`, `compare`, the analyses and the HTML report, the benchmarks).
//! They use [`crate::runtime`]; the runtime never uses them.
pub mod analyze;
pub mod bench;
pub mod compare;
pub mod evaluate;
pub mod grid;
pub mod report;
