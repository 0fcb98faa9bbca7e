//! bertflow-fuzzkit's integration tests as one test binary (issue 48: each file of
//! tests/ used to be its own binary, each linking the whole dependency graph).
//! One module per former file; shared helpers in `common`.
mod fuzz;
mod import_graph;
