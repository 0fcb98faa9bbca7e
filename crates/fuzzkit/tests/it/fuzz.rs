//! The byte-mutation harness on every target.
//!
//! `smoke_*`: a few hundred inputs per target in `cargo test`, so that the
//! targets and the harness keep working. `fuzz_*` (ignored; the slow group,
//! `scripts/slow-tests.sh`): `BERTFLOW_FUZZ_ITERS` inputs (default 20,000)
//! or `BERTFLOW_FUZZ_SECS` seconds (default 60) per target, whichever ends
//! first; `BERTFLOW_FUZZ_SEED` varies the mutations. Failing inputs are saved
//! under `$BERTFLOW_FUZZ_FAILURES` (default: the temporary directory's
//! `bertflow-fuzz-failures/`).

use bertflow_fuzzkit::targets::by_name;
use bertflow_fuzzkit::{fuzz, Budget};

fn smoke(name: &str) {
    let target = by_name(name).expect("a target");
    let seeds = (target.seeds)();
    assert!(!seeds.is_empty());
    let report = fuzz(name, &seeds, Budget::short(300, 5), target.run);
    eprintln!("{}", report.summary());
    report.assert_clean();
    assert!(report.execs >= seeds.len() as u64);
}

fn long(name: &str) {
    let target = by_name(name).expect("a target");
    let seeds = (target.seeds)();
    let report = fuzz(name, &seeds, Budget::from_env(), target.run);
    eprintln!("{}", report.summary());
    report.assert_clean();
}

macro_rules! targets {
    ($($name:ident),*) => {
        mod smoke {
            $(#[test] fn $name() { super::smoke(stringify!($name)); })*
        }
        mod slow {
            $(#[test] #[ignore = "slow group: long fuzz run"] fn $name() { super::long(stringify!($name)); })*
        }
    };
}

targets!(calib, matrix, index, ann, moments, server);

/// The server's seeds reach the handlers: the valid ones are answered 200
/// (so the fuzzer mutates requests that get past the JSON extractor).
#[test]
fn server_seeds_are_answered() {
    let seeds = bertflow_fuzzkit::targets::server::seeds();
    let ok = seeds
        .iter()
        .filter(|s| {
            let (status, _) = bertflow_fuzzkit::targets::server::post(s).expect("an answer");
            status.is_success()
        })
        .count();
    assert!(ok >= 10, "{ok} of {} seeds answered 200", seeds.len());
}
