//! bertflow-eval: the STS evaluation benchmarks for sentence embeddings.

mod data;
pub mod metrics;
mod task;

pub use data::{
    check_data_dir, dedup_preserving_order, fit_sentences, load_pairs_file, load_task,
    normalize_sentence, resolve_data_dir, DataError, EvalSet, Pair, Subset, DATA_ENV,
    DEFAULT_DATA_DIR,
};
pub use task::{FitCorpus, ParseFitCorpusError, ParseTaskError, Task};
