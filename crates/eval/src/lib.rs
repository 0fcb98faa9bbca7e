//! bertflow-eval: the STS evaluation benchmarks for sentence embeddings.
//!
//! * [`resolve_data_dir`] / [`check_data_dir`] locate the data folder
//!   (`--data`, else `BERTFLOW_DATA`, else `../shared/data/sts`).
//! * [`load_task`] loads a [`Task`]'s scored test pairs as an [`EvalSet`];
//!   [`load_pairs_file`] loads a user file of `score<TAB>s1<TAB>s2` lines.
//! * [`load_split`] loads one [`Split`] (train, dev, test) of STS-B or SICK-R.
//! * [`fit_sentences`] gives the sentences a calibrator is fitted on ([`FitCorpus`]).
//! * [`unique_sentences`] lists what to embed; [`evaluate`] turns embeddings into
//!   Spearman/Pearson x100 aggregated by [`Aggregate`]; [`average`] gives the average row.
//! * [`metrics`] has the tie-aware Spearman, Pearson and average ranks.
//! * [`render_table`] prints results as a plain-text table.
//!
//! ```no_run
//! use bertflow_eval::{evaluate, load_task, resolve_data_dir, unique_sentences, Aggregate, Task};
//! # fn embed(_: &[String]) -> ndarray::Array2<f32> { unimplemented!() }
//! let dir = resolve_data_dir(None);
//! let set = load_task(&dir, Task::Sts12)?;
//! let sentences = unique_sentences(&set);
//! let emb = embed(&sentences);
//! let result = evaluate(&set, &sentences, emb.view(), Aggregate::All)?;
//! println!("STS12 Spearman x100: {:.2}", result.spearman);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod data;
pub mod metrics;
mod score;
mod table;
mod task;

pub use data::{
    check_data_dir, dedup_preserving_order, fit_sentences, load_pairs_file, load_split, load_task,
    normalize_sentence, resolve_data_dir, DataError, EvalSet, Pair, Split, Subset, DATA_ENV,
    DEFAULT_DATA_DIR,
};
pub use score::{
    average, evaluate, unique_sentences, Aggregate, Average, EvalError, ParseAggregateError,
    SubsetResult, TaskResult,
};
pub use table::render_table;
pub use task::{FitCorpus, ParseFitCorpusError, ParseTaskError, Task};
