//! Helpers shared by the end-to-end tests of the `bertflow` binary.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub mod serve;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn model() -> String {
    let p = repo().join("models/all-MiniLM-L6-v2");
    assert!(
        p.join("model.safetensors").is_file(),
        "run scripts/fetch_model.sh first"
    );
    p.to_string_lossy().into_owned()
}

pub fn data() -> String {
    std::env::var("BERTFLOW_DATA").unwrap_or_else(|_| {
        repo()
            .join("../shared/data/sts")
            .to_string_lossy()
            .into_owned()
    })
}

/// Runs the binary with the test model, data and a private cache, and the
/// kernels by rule (`BERTFLOW_TUNE=0`: nothing measured or written to the
/// cache, so that runs in separate processes give the same bits; every spawn
/// of the binary in these tests sets it).
pub fn bertflow(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bertflow"))
        .env("BERTFLOW_TUNE", "0")
        .args(args)
        .env("BERTFLOW_CACHE", cache)
        .env("BERTFLOW_MODEL", model())
        .env("BERTFLOW_DATA", data())
        .output()
        .expect("run bertflow")
}

/// Stdout of a successful run; panics with stderr otherwise.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "bertflow failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `bertflow <args> --json` with a fresh private cache, parsed; panics on failure.
pub fn run_json(args: &[&str]) -> serde_json::Value {
    let cache = tempfile::tempdir().expect("temp dir");
    let mut args = args.to_vec();
    args.push("--json");
    serde_json::from_str(&ok(&bertflow(&args, cache.path()))).expect("JSON on stdout")
}

/// Stderr of a failed run; panics if it succeeded.
pub fn fails(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected failure, got success: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A float32 .npy file read back (rows, cols, values).
pub fn read_npy(path: &Path) -> ndarray::Array2<f32> {
    let mut r = bertflow_core::matrix_file::MatrixReader::open(path).expect("read .npy");
    r.next_chunk(usize::MAX).expect("read rows").expect("rows")
}

/// The first `n` distinct sentences of STS-B test (whitespace folded) in
/// `dir/sentences{n}.txt`; returns its path.
pub fn sts_test_sentences(dir: &Path, n: usize) -> String {
    let csv = Path::new(&data()).join("STSBenchmark/sts-test.csv");
    let text = std::fs::read_to_string(&csv).expect("STS-B test split");
    let mut seen: Vec<String> = Vec::new();
    for line in text.lines() {
        for s in line.split('\t').skip(5).take(2) {
            let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
            if !s.is_empty() && !seen.contains(&s) {
                seen.push(s);
            }
        }
        if seen.len() >= n {
            break;
        }
    }
    seen.truncate(n);
    let path = dir.join(format!("sentences{n}.txt"));
    std::fs::write(&path, seen.join("\n")).unwrap();
    path.to_string_lossy().into_owned()
}

/// Runs the binary as [`bertflow`] does and returns its own peak resident
/// memory in MB, read with wait4 (getrusage(RUSAGE_CHILDREN) would give the
/// largest of every child of the test binary, whose tests run side by side);
/// panics with its stderr when it fails. `dir` is the cache and holds the log.
pub fn peak_mb(args: &[&str], dir: &Path) -> f64 {
    let log = dir.join("stderr.txt");
    #[allow(clippy::zombie_processes)] // reaped by the wait4 below
    let child = Command::new(env!("CARGO_BIN_EXE_bertflow"))
        .env("BERTFLOW_TUNE", "0")
        .args(args)
        .env("BERTFLOW_CACHE", dir)
        .env("BERTFLOW_MODEL", model())
        .env("BERTFLOW_DATA", data())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("run bertflow");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 writes the status and one rusage struct into the valid
    // pointers we pass; `pid` is our own child, not yet waited for.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "bertflow {args:?} failed: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    usage.ru_maxrss as f64 / 1024.0 // ru_maxrss is in KiB on Linux
}
