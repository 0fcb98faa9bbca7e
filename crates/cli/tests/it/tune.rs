//! `bertflow tune` and the kernel choice at first use, end to end: the table
//! covers every kernel and layer product, the choice is one of the eligible
//! kernels and lands in kernels.json for this CPU; `encode` measures once and
//! keeps the choice, and with `--no-cache` writes nothing.
use std::path::Path;
use std::process::{Command, Output};

use crate::common;
use common::{model, ok};

/// The binary with measuring on (not `common::bertflow`, which turns it off).
fn tuned(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bertflow"))
        .args(args)
        .env("BERTFLOW_CACHE", cache)
        .env("BERTFLOW_MODEL", model())
        .env_remove("BERTFLOW_TUNE")
        .env_remove("BERTFLOW_FP32_KERNEL")
        .env_remove("BERTFLOW_INT8_KERNEL")
        .output()
        .expect("run bertflow")
}

fn entry_for<'a>(file: &'a serde_json::Value, cpu: &str) -> &'a serde_json::Value {
    let entries = file["entries"].as_array().expect("entries");
    let mine: Vec<_> = entries.iter().filter(|e| e["cpu"] == cpu).collect();
    assert_eq!(mine.len(), 1, "{file}");
    mine[0]
}

#[test]
fn tune_prints_every_kernel_and_keeps_an_eligible_choice() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let out = tuned(&["tune", "--json", "--budget-ms", "5"], &cache);
    let r: serde_json::Value = serde_json::from_str(&ok(&out)).expect("JSON");
    // Four products of MiniLM's layer (hidden 384, FFN 1536) on 256 rows.
    let shapes: Vec<&serde_json::Value> = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["precision"] == "fp32" && row["kernel"] == "scalar")
        .map(|row| &row["shape"])
        .collect();
    assert_eq!(
        serde_json::json!(shapes),
        serde_json::json!([
            [256, 384, 1152],
            [256, 384, 384],
            [256, 384, 1536],
            [256, 1536, 384]
        ])
    );
    let totals = r["totals"].as_array().unwrap();
    for precision in ["fp32", "int8"] {
        let mine: Vec<_> = totals
            .iter()
            .filter(|t| t["precision"] == precision)
            .collect();
        // Every kernel has a row per product and a total.
        let rows = r["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|row| row["precision"] == precision)
            .count();
        assert_eq!(rows, 4 * mine.len(), "{precision}");
        assert!(mine.iter().any(|t| t["kernel"] == "scalar"));
        let chosen: Vec<_> = mine.iter().filter(|t| t["chosen"] == true).collect();
        assert_eq!(chosen.len(), 1, "{precision}: {mine:?}");
        assert_eq!(chosen[0]["eligible"], true);
        assert_eq!(chosen[0]["kernel"], r[precision]);
        assert!(mine
            .iter()
            .all(|t| t["ms"].as_f64().is_some_and(|ms| ms > 0.0)));
    }
    // The portable kernels are never chosen where another runs.
    assert_ne!(r["fp32"], "scalar");
    assert_ne!(r["int8"], "scalar");
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cache.join("kernels.json")).unwrap()).unwrap();
    assert_eq!(file["format"], "bertflow-kernels");
    let e = entry_for(&file, r["cpu_key"].as_str().unwrap());
    assert_eq!((&e["fp32"], &e["int8"]), (&r["fp32"], &r["int8"]));
    // --dry-run leaves the file alone.
    let before = std::fs::read(cache.join("kernels.json")).unwrap();
    ok(&tuned(&["tune", "--dry-run", "--budget-ms", "1"], &cache));
    assert_eq!(std::fs::read(cache.join("kernels.json")).unwrap(), before);
}

#[test]
fn encode_measures_once_and_no_cache_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("s.txt");
    std::fs::write(&input, "A man plays a guitar.\nA dog runs.\n").unwrap();
    let cache = dir.path().join("cache");
    let out = dir.path().join("e.npy");
    let args = [
        "encode",
        "-i",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    let mut no_cache = args.to_vec();
    no_cache.push("--no-cache");
    ok(&tuned(&no_cache, &cache));
    assert!(
        !cache.exists(),
        "--no-cache writes nothing to the cache directory"
    );
    ok(&tuned(&args, &cache));
    let kernels = cache.join("kernels.json");
    let first = std::fs::read(&kernels).expect("the first use keeps the choice");
    let file: serde_json::Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(file["entries"].as_array().unwrap().len(), 1);
    // The second run reads the choice: the file is not rewritten.
    let e2 = dir.path().join("e2.npy");
    let args2 = [
        "encode",
        "-i",
        input.to_str().unwrap(),
        "-o",
        e2.to_str().unwrap(),
    ];
    ok(&tuned(&args2, &cache));
    assert_eq!(std::fs::read(&kernels).unwrap(), first);
    // Same kernels, same bits (the second run's vectors come from the cache,
    // keyed by the kernel's arithmetic).
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&e2).unwrap());
}

#[test]
fn info_names_the_kernels_of_the_server() {
    // The serve helpers set BERTFLOW_TUNE=0: the rule, for both precisions.
    use bertflow_encoder::kernels::{fp32::Path, Isa};
    let _guard = common::serve::serial();
    let server = common::serve::Server::start(&[]);
    let info = common::serve::runtime().block_on(common::serve::get(
        &common::serve::client(),
        &server.url("/info"),
    ));
    assert_eq!(
        info.body["kernels"],
        format!(
            "fp32 {} (rule), int8 {} (rule)",
            Path::best().name(),
            Isa::best().name()
        ),
        "{}",
        info.body
    );
    server.stop();
}
