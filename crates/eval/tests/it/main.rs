//! bertflow-eval's integration tests as one test binary (issue 48: each file of
//! tests/ used to be its own binary, each linking the whole dependency graph).
//! One module per former file; shared helpers in `common`.
//! Not here, each still its own binary because it sets environment variables
//! that other tests read: tests/resolve.rs.
mod evaluate;
mod import_graph;
mod pairs_file;
mod real_data;
mod splits;
mod table;
