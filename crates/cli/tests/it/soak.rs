//! The bounded CI version of the soak test: `scripts/soak.sh` for a few seconds with 8
//! clients over mixed routes (embeddings of 1 to 64 inputs, similarity, search), then a
//! SIGTERM. Passes only if no response was lost, none was a 5xx, every route answered
//! 200 at least once, and the server drained and exited 0. (The 10-minute, 64-client
//! run and its numbers are in BENCHMARKS.md.)
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn short_soak_loses_nothing() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("SKIPPED: python3 is not installed (scripts/soak.py needs it)");
        return;
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus.txt");
    std::fs::write(
        &corpus,
        "A man is playing a guitar.\nA woman is slicing onions.\nTwo dogs run across a field.\n",
    )
    .unwrap();
    let json = dir.path().join("soak.json");
    let model = repo.join("models/all-MiniLM-L6-v2");
    let out = Command::new(repo.join("scripts/soak.sh"))
        .args(["4", "8", "--", "--model"])
        .arg(&model)
        .arg("--corpus")
        .arg(&corpus)
        .env("BERTFLOW_BIN", env!("CARGO_BIN_EXE_bertflow"))
        .env("SOAK_JSON", &json)
        .env_remove("BERTFLOW_API_KEY")
        .output()
        .expect("run scripts/soak.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "soak failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("server stopped cleanly"), "{stdout}");
    let result: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(result["failures"], 0);
    assert_eq!(result["clients"], 8);
    for route in ["/v1/embeddings", "/similarity", "/search"] {
        let r = &result["routes"][route];
        assert!(r["ok"].as_u64().unwrap() >= 1, "{route}: {r}");
        assert_eq!(r["5xx"], 0, "{route}");
        assert_eq!(r["lost"], 0, "{route}");
        assert_eq!(r["other"], 0, "{route}: unexpected 4xx");
    }
    assert!(!result["rss"].as_array().unwrap().is_empty());
}
