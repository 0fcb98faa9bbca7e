//! bertflow-calib's integration tests as one test binary (issue 48: each file of
//! tests/ used to be its own binary, each linking the whole dependency graph).
//! One module per former file; shared helpers in `common`.
mod affine;
mod auto;
mod bounded;
mod common;
mod flow;
mod fuzz_regressions;
mod import_graph;
mod io;
mod linear;
mod moments;
mod pca;
mod pq;
mod projection_files;
mod quantize;
mod registry;
