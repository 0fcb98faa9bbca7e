//! # bertflow-fuzzkit
//!
//! Fuzzing of every reader of outside bytes in bertflow. [`targets`] holds
//! one function per reader that takes arbitrary bytes and must never panic,
//! hang or allocate without bound, and the valid seed inputs each one starts
//! from. Two drivers run them:
//!
//! - the cargo-fuzz targets in the top-level `fuzz/` package (libFuzzer,
//!   coverage-guided; needs nightly flags), and
//! - [`fuzz`] here: a deterministic byte-mutation loop on stable Rust (bit
//!   flips, byte sets, interesting integers and numbers, truncation,
//!   extension, insertion, deletion, splices of two seeds), used by this
//!   crate's tests: a short smoke run of every target in `cargo test` and a
//!   long one in the slow group (`scripts/slow-tests.sh`).
//!
//! Every failure (a panic, or an input slower than the hang limit) is saved
//! to a file so that it can be replayed and minimised.

use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Once;
use std::time::{Duration, Instant};

pub mod mutate;
pub mod targets;

pub use mutate::{Mutator, Rng};

/// How long a fuzz run goes on: whichever limit comes first.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Inputs to run (the seeds count too).
    pub iterations: u64,
    /// Wall-clock limit.
    pub time: Duration,
    /// An input that takes longer than this is a failure (a hang).
    pub hang: Duration,
    /// Seed of the mutation generator.
    pub seed: u64,
}

impl Budget {
    /// A short run: `iterations` inputs, at most `secs` seconds.
    pub fn short(iterations: u64, secs: u64) -> Self {
        Budget {
            iterations,
            time: Duration::from_secs(secs),
            hang: Duration::from_secs(10),
            seed: 0x6265_7274_666c_6f77,
        }
    }

    /// The slow group's run: `BERTFLOW_FUZZ_ITERS` inputs (default 20,000)
    /// and at most `BERTFLOW_FUZZ_SECS` seconds (default 60) per target;
    /// `BERTFLOW_FUZZ_SEED` changes the mutations.
    pub fn from_env() -> Self {
        let var = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(default)
        };
        let mut b = Budget::short(var("BERTFLOW_FUZZ_ITERS", 20_000), 60);
        b.time = Duration::from_secs(var("BERTFLOW_FUZZ_SECS", 60));
        b.seed = var("BERTFLOW_FUZZ_SEED", b.seed);
        b
    }
}

/// One failing input.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The panic message, or "slow: ..." for an input over the hang limit.
    pub message: String,
    /// Where the input was saved.
    pub saved: Option<PathBuf>,
    /// The input itself.
    pub input: Vec<u8>,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    /// Target name.
    pub name: String,
    /// Inputs run.
    pub execs: u64,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
    /// The slowest input's time.
    pub slowest: Duration,
    /// Failures (at most 16 are kept).
    pub failures: Vec<Failure>,
}

impl Report {
    /// One line for logs: executions, time, rate, failures.
    pub fn summary(&self) -> String {
        let secs = self.elapsed.as_secs_f64();
        format!(
            "fuzz {}: {} execs in {:.1} s ({:.0}/s), slowest input {:.1} ms, {} failure(s)",
            self.name,
            self.execs,
            secs,
            self.execs as f64 / secs.max(1e-9),
            self.slowest.as_secs_f64() * 1e3,
            self.failures.len()
        )
    }

    /// Panics with every failure if there was any.
    pub fn assert_clean(&self) {
        if self.failures.is_empty() {
            return;
        }
        let lines: Vec<String> = self
            .failures
            .iter()
            .map(|f| {
                format!(
                    "  {} (input of {} bytes saved to {})",
                    f.message,
                    f.input.len(),
                    f.saved
                        .as_ref()
                        .map_or("nowhere".into(), |p| p.display().to_string())
                )
            })
            .collect();
        panic!("{}\n{}", self.summary(), lines.join("\n"));
    }
}

thread_local! {
    /// Set while this thread runs an input: the panic hook stays quiet and
    /// keeps the message here instead.
    static CAPTURE: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let captured = CAPTURE.with(|c| {
                let mut c = c.borrow_mut();
                match c.as_mut() {
                    Some(slot) => {
                        let at = info
                            .location()
                            .map(|l| format!(" at {}:{}", l.file(), l.line()))
                            .unwrap_or_default();
                        let msg = info
                            .payload()
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| info.payload().downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "non-string panic".into());
                        *slot = format!("panic: {msg}{at}");
                        true
                    }
                    None => false,
                }
            });
            if !captured {
                default(info);
            }
        }));
    });
}

/// Runs `target` on one input, catching a panic: `Err(message)` if it panicked.
/// Panics caught inside the target (by design, e.g. around hnsw_rs) are not
/// failures.
pub fn run_one(target: &dyn Fn(&[u8]), input: &[u8]) -> Result<(), String> {
    install_hook();
    CAPTURE.with(|c| *c.borrow_mut() = Some(String::new()));
    let result = panic::catch_unwind(AssertUnwindSafe(|| target(input)));
    let message = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    result.map_err(|_| {
        if message.is_empty() {
            "panic".to_string()
        } else {
            message
        }
    })
}

/// Where failing inputs are saved: `$BERTFLOW_FUZZ_FAILURES`, or
/// `fuzz-failures/` in the system's temporary directory.
pub fn failure_dir() -> PathBuf {
    std::env::var_os("BERTFLOW_FUZZ_FAILURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("bertflow-fuzz-failures"))
}

fn save(name: &str, input: &[u8]) -> Option<PathBuf> {
    let dir = failure_dir();
    std::fs::create_dir_all(&dir).ok()?;
    let hash = crc32fast::hash(input);
    let path = dir.join(format!("{name}-{hash:08x}.bin"));
    std::fs::write(&path, input).ok()?;
    Some(path)
}

/// Runs `target` on every seed, then on mutations of the seeds until the
/// budget is spent. Never panics itself: see [`Report::assert_clean`].
pub fn fuzz(name: &str, seeds: &[Vec<u8>], budget: Budget, target: impl Fn(&[u8])) -> Report {
    let start = Instant::now();
    let mut mutator = Mutator::new(budget.seed ^ u64::from(crc32fast::hash(name.as_bytes())));
    let mut report = Report {
        name: name.to_string(),
        execs: 0,
        elapsed: Duration::ZERO,
        slowest: Duration::ZERO,
        failures: Vec::new(),
    };
    let record = |report: &mut Report, message: String, input: &[u8]| {
        if report.failures.len() < 16 {
            report.failures.push(Failure {
                message,
                saved: save(name, input),
                input: input.to_vec(),
            });
        }
    };
    // An abort (a failed allocation, a stack overflow) cannot be caught: with
    // BERTFLOW_FUZZ_CURRENT=PATH set, each input is written to PATH.<name>
    // before it runs.
    let current = std::env::var_os("BERTFLOW_FUZZ_CURRENT").map(|p| {
        let mut p = p;
        p.push(format!(".{name}"));
        PathBuf::from(p)
    });
    let mut i = 0u64;
    while i < budget.iterations && (i < seeds.len() as u64 || start.elapsed() < budget.time) {
        let input = match seeds.get(i as usize) {
            Some(seed) => seed.clone(),
            None => mutator.mutate(seeds),
        };
        if let Some(path) = &current {
            let _ = std::fs::write(path, &input);
        }
        let t = Instant::now();
        let outcome = run_one(&target, &input);
        let took = t.elapsed();
        report.slowest = report.slowest.max(took);
        if let Err(message) = outcome {
            record(&mut report, message, &input);
        } else if took > budget.hang {
            record(
                &mut report,
                format!("slow: {:.1} s for one input", took.as_secs_f64()),
                &input,
            );
        }
        i += 1;
    }
    report.execs = i;
    report.elapsed = start.elapsed();
    report
}
