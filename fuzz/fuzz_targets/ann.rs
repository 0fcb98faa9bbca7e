#![no_main]
//! See bertflow_fuzzkit::targets::ann.
//!
//! The loader runs hnsw_rs under `catch_unwind` (a panic in it becomes an
//! error), but libFuzzer's panic hook aborts on every panic. This target's
//! hook lets a panic raised inside hnsw_rs unwind to the loader and aborts on
//! any other, so only panics the loader does not handle are crashes.
use std::sync::Once;

use libfuzzer_sys::fuzz_target;

fn hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let abort_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_hnsw = info
                .location()
                .is_some_and(|l| l.file().contains("hnsw_rs"));
            if !in_hnsw {
                abort_hook(info);
            }
        }));
    });
}

fuzz_target!(|data: &[u8]| {
    hook();
    bertflow_fuzzkit::targets::ann::run(data)
});
