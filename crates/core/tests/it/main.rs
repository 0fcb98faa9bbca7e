//! bertflow-core's integration tests as one test binary (issue 48: each file of
//! tests/ used to be its own binary, each linking the whole dependency graph).
//! One module per former file; shared helpers in `common`.
mod bounded_input;
mod decoder_defaults;
#[cfg(feature = "index")]
mod hybrid_search;
mod import_graph;
mod matrix_file;
mod matrix_fuzz;
mod pipeline;
mod prompts;
mod quantize;
mod rerank;
#[cfg(feature = "index")]
mod vector_input;
