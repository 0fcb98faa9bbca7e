//! bertflow-eval: the STS evaluation benchmarks for sentence embeddings.

pub mod metrics;
mod task;

pub use task::{FitCorpus, ParseFitCorpusError, ParseTaskError, Task};
