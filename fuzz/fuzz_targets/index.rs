#![no_main]
//! See bertflow_fuzzkit::targets::index.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| bertflow_fuzzkit::targets::index::run(data));
