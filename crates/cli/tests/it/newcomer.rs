//! The newcomer's path through the binary (issue 36): files carry their settings
//! (a calibrator's pooling, an exported directory's own pipeline), a conflict
//! names the flag and the recorded value, `advise` on any corpus, `--output -`,
//! `--normalize`, a closed standard output, defaults found from another
//! working directory, and `--help` that lists the kinds one line each.
use crate::common;

use common::{bertflow, fails, model, ok, read_npy, repo};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

/// `n` distinct STS-B test sentences in a text file.
fn sentences(dir: &Path, n: usize) -> String {
    common::sts_test_sentences(dir, n)
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn fit(dir: &Path, input: &str, pooling: &str, kind: &str, name: &str) -> String {
    let cal = s(&dir.join(name));
    ok(&bertflow(
        &[
            "fit",
            "--pooling",
            pooling,
            "--kind",
            kind,
            "--on",
            input,
            "-o",
            &cal,
        ],
        &dir.join("cache"),
    ));
    cal
}

fn encode(dir: &Path, input: &str, args: &[&str], name: &str) -> ndarray::Array2<f32> {
    let out = dir.join(format!("{name}.npy"));
    let mut all = vec!["encode", "-i", input, "-o", out.to_str().unwrap()];
    all.extend_from_slice(args);
    ok(&bertflow(&all, &dir.join("cache")));
    read_npy(&out)
}

#[test]
fn a_calibrator_brings_its_pooling_and_a_conflict_names_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let input = sentences(dir, 120);
    let cal = fit(dir, &input, "first-last-avg", "sn", "sn.safetensors");
    let implicit = encode(dir, &input, &["--calibrator", &cal], "implicit");
    let explicit = encode(
        dir,
        &input,
        &["--calibrator", &cal, "--pooling", "first-last-avg"],
        "explicit",
    );
    assert_eq!(
        implicit, explicit,
        "the file's pooling is used when none is given"
    );
    let plain = encode(
        dir,
        &input,
        &[
            "--calibrator",
            &cal,
            "--pooling",
            "first-last-avg",
            "--allow-mismatch",
        ],
        "allowed",
    );
    assert_eq!(plain, explicit);
    let err = fails(&bertflow(
        &[
            "encode",
            "-i",
            &input,
            "-o",
            &s(&dir.join("x.npy")),
            "--calibrator",
            &cal,
            "--pooling",
            "last-avg",
        ],
        &dir.join("cache"),
    ));
    assert!(
        err.contains("--pooling: the calibrator")
            && err.contains("fitted with pooling first-last-avg, not last-avg"),
        "{err}"
    );
}

#[test]
fn an_exported_directory_defaults_to_its_own_pipeline() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let input = sentences(dir, 500);
    let cal = fit(dir, &input, "last-avg", "whiten:k=64", "w.safetensors");
    let exported = s(&dir.join("exported"));
    ok(&bertflow(
        &["export", "--calibrator", &cal, "--output", &exported],
        &dir.join("cache"),
    ));
    // No --pooling: the directory's modules (a Dense) run, with a note.
    let out = dir.join("default.npy");
    let run = bertflow(
        &[
            "encode",
            "-i",
            &input,
            "-o",
            out.to_str().unwrap(),
            "--model",
            &exported,
        ],
        &dir.join("cache"),
    );
    ok(&run);
    let note = String::from_utf8_lossy(&run.stderr);
    assert!(
        note.contains("pooling st") && note.contains("Dense"),
        "{note}"
    );
    let by_default = read_npy(&out);
    assert_eq!(by_default.ncols(), 64);
    let calibrated = encode(dir, &input, &["--calibrator", &cal], "calibrated");
    let worst = by_default
        .iter()
        .zip(&calibrated)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst < 1e-3, "exported default vs calibrator: {worst}");
    // all-MiniLM-L6-v2's own directory (mean pooling, Normalize) keeps last-avg.
    let plain = encode(dir, &input, &[], "plain");
    let last_avg = encode(dir, &input, &["--pooling", "last-avg"], "last-avg");
    assert_eq!(plain, last_avg);
}

#[test]
fn advise_reads_any_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let input = sentences(dir, 200);
    let cache = dir.join("cache");
    let text = ok(&bertflow(
        &["advise", "-i", &input, "--pooling", "emb-avg"],
        &cache,
    ));
    assert!(text.starts_with("Calibrate: "), "{text}");
    assert!(text.contains("200 sentences"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&bertflow(&["advise", "-i", &input, "--json"], &cache))).unwrap();
    assert_eq!(json["stats"]["n"], 200);
    assert_eq!(
        json["expected"], "none",
        "all-MiniLM-L6-v2 last-avg: {json}"
    );
}

#[test]
fn output_dash_writes_jsonl_to_stdout_and_normalize_scales_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let input = sentences(dir, 10);
    let text = ok(&bertflow(
        &["encode", "-i", &input, "-o", "-", "--normalize", "-q"],
        &dir.join("cache"),
    ));
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 10);
    let raw = encode(dir, &input, &[], "raw");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["index"], i);
        let v: Vec<f32> = row["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "row {i}: norm {norm}");
        let r = raw.row(i);
        let rn = r.dot(&r).sqrt();
        for (a, b) in v.iter().zip(r.iter()) {
            assert!((a - b / rn).abs() < 1e-5);
        }
    }
}

#[test]
fn a_closed_stdout_ends_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bertflow"))
        .args(["kinds", "--json"])
        .env("BERTFLOW_CACHE", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read one byte, then close the pipe: the rest of the output has nowhere to go.
    let mut out = child.stdout.take().unwrap();
    let mut one = [0u8; 1];
    out.read_exact(&mut one).unwrap();
    drop(out);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    child.wait().unwrap();
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn defaults_are_found_from_another_working_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let input = sentences(tmp.path(), 5);
    // Neither BERTFLOW_MODEL nor a models/ folder here: the binary finds the
    // checkout it was built in (target/release/bertflow lies inside it).
    let out = Command::new(env!("CARGO_BIN_EXE_bertflow"))
        .args(["encode", "-i", &input, "-o", "-", "-q"])
        .current_dir(tmp.path())
        .env_remove("BERTFLOW_MODEL")
        .env("BERTFLOW_CACHE", tmp.path().join("cache"))
        .output()
        .unwrap();
    assert_eq!(ok(&out).lines().count(), 5);
    let _ = (model(), repo());
}

#[test]
fn threads_zero_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let input = sentences(tmp.path(), 3);
    let err = fails(&bertflow(
        &["encode", "-i", &input, "-o", "-", "--threads", "0"],
        tmp.path(),
    ));
    assert!(err.contains("--threads: must be at least 1"), "{err}");
    let err = fails(
        &Command::new(env!("CARGO_BIN_EXE_bertflow"))
            .args(["encode", "-i", &input, "-o", "-"])
            .env("BERTFLOW_THREADS", "two")
            .env("BERTFLOW_CACHE", tmp.path())
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("BERTFLOW_THREADS") && err.contains("two"),
        "{err}"
    );
}

#[test]
fn precision_from_the_environment_is_checked_by_core() {
    let tmp = tempfile::tempdir().unwrap();
    let input = sentences(tmp.path(), 3);
    let run = |precision: &str, extra: &[&str]| {
        let mut args = vec!["encode", "-i", &input, "-o", "-"];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_bertflow"))
            .args(&args)
            .env("BERTFLOW_PRECISION", precision)
            .env("BERTFLOW_TUNE", "0")
            .env("BERTFLOW_MODEL", model())
            .env("BERTFLOW_CACHE", tmp.path())
            .output()
            .unwrap()
    };
    // A bad value is an error naming the variable, even beside --precision.
    for extra in [&[][..], &["--precision", "fp32"][..]] {
        let err = fails(&run("fp16", extra));
        assert!(
            err.contains("--precision: $BERTFLOW_PRECISION is \"fp16\"; valid: fp32, int8"),
            "{err}"
        );
    }
    // A good one is the default: int8 vectors differ from fp32 ones, and
    // --precision still wins over it.
    let int8 = ok(&run("int8", &[]));
    let fp32 = ok(&run("int8", &["--precision", "fp32"]));
    assert_ne!(int8, fp32);
    assert_eq!(ok(&run("fp32", &[])), fp32);
    let help = ok(&bertflow(&["encode", "--help"], tmp.path()));
    assert!(help.contains("$BERTFLOW_PRECISION"), "{help}");
}

#[test]
fn help_lists_each_kind_on_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    for cmd in ["eval", "fit", "compare"] {
        let help = ok(&bertflow(&[cmd, "--help"], tmp.path()));
        let lines = help.lines().count();
        assert!(lines < 160, "{cmd} --help is {lines} lines");
        assert!(help.contains("bertflow kinds"), "{cmd}");
        assert!(
            help.lines().any(|l| l.trim_start().starts_with("flow ")),
            "{cmd}: no line for flow"
        );
    }
}

#[test]
fn an_index_carries_its_pooling_and_calibrator() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let input = sentences(dir, 60);
    let more = dir.join("more.txt");
    std::fs::write(&more, "A kid reads a book.\nThe market fell.\n").unwrap();
    let cal = fit(dir, &input, "first-last-avg", "sn", "sn.safetensors");
    let idx = s(&dir.join("c.bfi"));
    let cache = dir.join("cache");
    ok(&bertflow(
        &[
            "index",
            "build",
            "--corpus",
            &input,
            "--calibrator",
            &cal,
            "-o",
            &idx,
        ],
        &cache,
    ));
    let side = dir.join("c.bfi.calibrator.safetensors");
    assert_eq!(std::fs::read(&side).unwrap(), std::fs::read(&cal).unwrap());
    // No --pooling, no --calibrator: both from the index.
    let out = ok(&bertflow(
        &[
            "index",
            "add",
            "--corpus",
            more.to_str().unwrap(),
            "--index",
            &idx,
        ],
        &cache,
    ));
    assert!(
        out.contains("added 2 sentences") && out.contains("62 in all"),
        "{out}"
    );
    std::fs::remove_file(&side).unwrap();
    let err = fails(&bertflow(
        &[
            "index",
            "add",
            "--corpus",
            more.to_str().unwrap(),
            "--index",
            &idx,
        ],
        &cache,
    ));
    assert!(
        err.contains("--calibrator: the index") && err.contains("was built with calibrator sn"),
        "{err}"
    );
    // Given explicitly, the same file is accepted again.
    ok(&bertflow(
        &[
            "index",
            "add",
            "--corpus",
            more.to_str().unwrap(),
            "--index",
            &idx,
            "--calibrator",
            &cal,
        ],
        &cache,
    ));
}
