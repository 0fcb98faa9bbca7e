#![no_main]
//! See bertflow_fuzzkit::targets::moments.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| bertflow_fuzzkit::targets::moments::run(data));
