//! The `bertflow` binary's integration tests as one test binary (issue 48: each file
//! of tests/ used to be its own binary, each linking the whole dependency graph).
//! One module per former file; shared helpers in `common`. The tests of every
//! module run in one process: none sets process-wide state (environment, current
//! directory); each passes its settings to the child processes it starts.
mod analyze;
mod auto_scores;
mod bounded_memory;
mod browser;
mod cli;
mod common;
mod compact;
mod crash;
mod external;
mod families;
mod hybrid;
mod import_graph;
mod index_parquet;
mod index_quantized;
mod long_line;
mod newcomer;
mod prompts;
mod rerank;
mod serve;
mod serve_codes;
mod serve_hybrid;
mod serve_index;
mod serve_load;
mod serve_prod;
mod serve_tei;
mod soak;
mod sparse;
mod st_pooling;
mod sts_scores;
mod traps;
mod traps_docs;
mod tune;
mod weighting;
