//! bertflow-server's integration tests as one test binary (issue 48: each file of
//! tests/ used to be its own binary, each linking the whole dependency graph).
//! One module per former file; shared helpers in `common`.
mod admission;
mod codes;
mod common;
mod connections;
mod embed_outputs;
mod endpoints;
mod import_graph;
#[cfg(feature = "model")]
mod index_file;
mod load;
mod production;
mod queue;
#[cfg(feature = "model")]
mod st;
mod statuses;
mod tei_rerank;
mod tei_routes;
