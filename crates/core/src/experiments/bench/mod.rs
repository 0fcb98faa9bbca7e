//! Benchmarks as a library: encoder throughput and latency on STS-B test, the
//! wall time of a calibrator fit on the seven tasks' fit corpus, and the
//! kernels timed on a model's layer shapes beside one core's peak (`tune`). Each
//! returns a serialisable report; front ends print it (`bertflow bench`).
//! Timings live here and in BENCHMARKS.md, never in tests.
mod encode;
mod flow;
mod tune;

pub use encode::{
    bench_encode, linear_flop_per_token, EncodeBench, EncodeBenchReport, EncodeMode, EncodeRun,
};
pub use flow::{bench_flow, FlowBench, FlowBenchReport, FlowRun};
pub use tune::{bench_tune, PeakRow, TuneBench, TuneReport, TuneRow, TuneTotal};

use crate::runtime::progress::Progress;

/// Unique sentences of STS-B test after whitespace normalisation (2,552 raw
/// strings: "A  man is dancing." with two spaces is the 2,552nd).
pub const STSB_TEST_UNIQUE: usize = 2551;
/// Unique sentences of the seven tasks' `target-scored` fit corpora.
pub const FIT_CORPUS_UNIQUE: usize = 29_511;
/// A 1-minute load average above this means the machine is busy: timings are suspect.
pub const BUSY_LOAD: f64 = 1.5;

/// The 1-minute load average (Linux), if readable.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The load average, with a note through `progress` when the machine is busy.
pub(crate) fn warn_if_busy(progress: &dyn Progress) -> Option<f64> {
    let load = load_average();
    if let Some(l) = load.filter(|&l| l > BUSY_LOAD) {
        progress.note(&format!(
            "warning: the 1-minute load average is {l:.2}: other work may skew the timings"
        ));
    }
    load
}

/// CPU time of the calling thread in seconds (Linux), to tell the cost of the
/// work from time spent waiting for a busy machine.
pub fn thread_cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns * 1e-9)
}

/// Best (smallest) and median of `v` (`(NaN, NaN)` when empty).
pub fn best_median(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        0.5 * (s[n / 2 - 1] + s[n / 2])
    };
    (s[0], median)
}

/// The `q` quantile (nearest rank below) of sorted `v`, if not empty.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    (!sorted.is_empty()).then(|| sorted[((q * sorted.len() as f64) as usize).min(sorted.len() - 1)])
}

/// The CPU model name from /proc/cpuinfo, or "unknown".
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Logical cores available to this process.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::{best_median, quantile};

    #[test]
    fn best_and_median() {
        assert_eq!(best_median(&[3.0, 1.0, 2.0]), (1.0, 2.0));
        assert_eq!(best_median(&[4.0, 1.0, 2.0, 3.0]), (1.0, 2.5));
        assert_eq!(best_median(&[5.0]), (5.0, 5.0));
        assert!(best_median(&[]).0.is_nan());
    }

    #[test]
    fn quantiles() {
        let v: Vec<f64> = (0..100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(50.0));
        assert_eq!(quantile(&v, 0.99), Some(99.0));
        assert_eq!(quantile(&v, 1.0), Some(99.0));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
