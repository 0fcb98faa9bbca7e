//! bertflow-encoder's integration tests as one test binary (issue 48: each file of
//! tests/ used to be its own binary, each linking the whole dependency graph).
//! One module per former file; shared helpers in `common`.
//! Not here, each still its own binary because it sets environment variables
//! that other tests read: tests/errors.rs.
mod bad_models;
mod common;
mod golden;
mod import_graph;
mod int8;
mod real_mpnet;
mod rerank;
mod sparse;
mod st;
mod st_prompts;
mod tiny_bert;
mod tiny_bertlikes;
mod tiny_decoders;
mod tiny_models;
mod tiny_modernbert;
