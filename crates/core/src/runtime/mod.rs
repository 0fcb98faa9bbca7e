//! The runtime: what a front end runs to make, store and serve vectors (the
//! model and its pipeline, calibrators, inputs and outputs, indexes,
//! rerankers). Nothing here uses [`crate::experiments`].
pub mod calibration;
pub mod defaults;
pub mod embedder;
pub mod export;
pub mod fitting;
#[cfg(feature = "index")]
pub mod indexing;
pub mod io;
pub mod matrix_file;
pub mod parse;
pub mod pipeline;
pub mod progress;
pub mod prompt;
pub mod quantize;
pub mod regular;
pub mod rerank;
pub mod retrieval;
pub mod run_config;
pub mod sparse_io;
pub mod st_pipeline;
pub mod tokens;
pub mod vector_input;
pub mod weighting;
