//! bertflow-index's integration tests as one test binary (issue 48: each file of
//! tests/ used to be its own binary, each linking the whole dependency graph).
//! One module per former file; shared test data in `common`.
mod ann;
mod ann_codes;
mod ann_dump;
mod ann_links;
mod common;
mod crash;
mod index;
mod quantized;
mod scan;
mod sparse;
mod temporaries;
mod trailer;
mod untrusted;
