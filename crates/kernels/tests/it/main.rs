//! bertflow-kernels's integration tests as one test binary (issue 48: each file of
//! tests/ used to be its own binary, each linking the whole dependency graph).
//! One module per former file; shared helpers in `common`.
//! Not here, each still its own binary because it sets environment variables
//! that other tests read: tests/choose.rs, tests/fp32_env.rs, tests/int8_env.rs.
mod codes;
mod common;
mod fp32;
mod fp32_bits;
mod import_graph;
mod int8;
