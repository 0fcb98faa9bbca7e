//! # bertflow-core
//!
//! bertflow's workflows as a library, in two parts: [`runtime`] (what makes,
//! stores and serves vectors) and [`experiments`] (the comparisons and
//! measurements built on it). Every front end (the `bertflow` binary,
//! the Python package, the server, the Spark job) is argument handling and
//! printing over these functions:
//!
//! - [`pipeline`]: the model, pooling, token weighting, precision and
//!   calibrator that make the vectors, opened and checked together from one
//!   [`PipelineConfig`] ([`Pipeline`]): what `encode`, `eval`, `index`, `serve`,
//!   the Python `Encoder` and the Spark job run;
//! - [`embedder`]: load a model ([`EmbedderConfig`]) and embed sentence sets
//!   through the on-disk cache ([`Embedder`]);
//! - [`calibration`]: fit a calibrator with progress, load and check a file,
//!   the identities stored in calibrator files (a model, or external embeddings);
//! - [`grid`]: evaluation sets x poolings x calibrators on the STS tasks (`eval`,
//!   `compare`, the report's table);
//! - [`analyze`] and [`report`]: the analyses of the embedding space and the HTML report;
//! - `indexing` (feature `index`): persistent search indexes (`index build|add|ann`)
//!   for `serve --index`;
//! - [`retrieval`]: sparse (SPLADE, BGE-M3) and multi-vector (ColBERT-style)
//!   outputs, MaxSim late interaction ([`retrieval::Retriever`]), with their
//!   files in [`sparse_io`];
//! - [`rerank`]: rerankers (cross-encoders) scoring a query against texts
//!   ([`RerankerConfig`], [`Reranker`]);
//! - [`io`]: sentences in, embeddings out (`.npy`, `.jsonl`, `.safetensors`);
//! - [`progress`]: how workflows report progress without printing;
//! - [`prompt`]: the prompt before every text, one rule for every front end.
//!
//! Errors are one enum, [`CoreError`]; nothing here prints or exits.

pub mod error;
pub mod experiments;
pub mod runtime;

// The modules under their old paths (`bertflow_core::pipeline`, ...), so that
// front ends need not know the split.
pub use experiments::{analyze, bench, compare, evaluate, grid, report};
#[cfg(feature = "index")]
pub use runtime::indexing;
pub use runtime::{
    calibration, defaults, embedder, export, fitting, io, matrix_file, parse, pipeline, progress,
    prompt, quantize, rerank, retrieval, run_config, sparse_io, st_pipeline, tokens, vector_input,
    weighting,
};

// Core is the only door: front ends (the CLI, the server, the Python
// bindings) depend on bertflow-core alone and name the inner crates' types
// through it.
pub use bertflow_analysis as analysis;
pub use bertflow_calib as calib;
pub use bertflow_calib::{CalibError, CalibSpec, Calibrator, Fitted};
pub use bertflow_durable as durable;
pub use bertflow_durable::DurableError;
pub use bertflow_encoder as encoder;
pub use bertflow_encoder::{
    EncoderError, Pooling, Precision, TokenWeights, WeightingSpec, POOLINGS,
};
pub use bertflow_eval as eval;
pub use bertflow_eval::{Aggregate, DataError, EvalError, Task};
#[cfg(feature = "index")]
pub use bertflow_index as index;
pub use bertflow_numeric as numeric;
pub use calibration::{model_identity, LoadedCalibrator};
pub use embedder::{Embedder, EmbedderConfig, DEFAULT_MODEL};
pub use error::{Context, CoreError, Result};
pub use pipeline::{Pipeline, PipelineConfig, PipelineInfo};
pub use progress::{Bar, Progress, SharedProgress, Silent};
pub use prompt::{Prompt, PromptConfig};
pub use rerank::{Reranker, RerankerConfig};
pub use retrieval::{Retriever, SparseVector};
pub use run_config::RuntimeConfig;

/// Write `bytes` to `path` atomically (temporary file, fsync, rename): every
/// output file of bertflow goes through this or [`bertflow_durable::AtomicFile`],
/// so a failure leaves a file already at `path` as it was.
pub fn write_file(path: &std::path::Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    Ok(bertflow_durable::write(path, bytes)?)
}

pub use parse::split_spec_list;
