//! Token weighting end to end: `--weighting` on encode, fit, eval and compare;
//! calibrator files carry their weights and encode applies them.
use crate::common;

use common::{bertflow, fails, ok, read_npy};
use std::path::Path;

const CORPUS: &[&str] = &[
    "A man is playing a guitar.",
    "A woman is slicing an onion.",
    "The cat sits on the mat.",
    "A man is playing the flute.",
    "Two dogs are running through a field of snow.",
    "Stocks fell sharply on Monday after the bank raised rates.",
    "The quick brown fox jumps over the lazy dog.",
    "A plane is taking off.",
    "An airplane departs from the runway.",
    "A child is reading a book in the library.",
    "The weather is cold and windy today.",
    "She bought fresh bread at the market.",
    "Kids are playing football in the park.",
    "The committee approved the new budget.",
    "A chef is cooking pasta in a kitchen.",
    "Rain is falling on the quiet street.",
];

fn write_lines(path: &Path, lines: &[&str]) {
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn encode_with_weighting_differs_and_mean_is_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let input = dir.path().join("in.txt");
    write_lines(&input, CORPUS);
    let enc = |w: Option<&str>, out: &str| {
        let out = dir.path().join(out);
        let mut args = vec!["encode", "-i", s(&input), "-o", s(&out)];
        if let Some(w) = w {
            args.extend(["--weighting", w]);
        }
        ok(&bertflow(&args, &cache));
        read_npy(&out)
    };
    let plain = enc(None, "plain.npy");
    assert_eq!(enc(Some("mean"), "mean.npy"), plain);
    let usif = enc(Some("usif"), "usif.npy");
    let sif = enc(Some("sif:a=0.001"), "sif.npy");
    assert_eq!(usif.dim(), plain.dim());
    let max_diff = |a: &ndarray::Array2<f32>, b: &ndarray::Array2<f32>| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    };
    assert!(max_diff(&usif, &plain) > 1e-3);
    assert!(max_diff(&sif, &usif) > 1e-4);
    // The weighted cache entry is kept apart from the plain one.
    assert_eq!(enc(Some("usif"), "usif2.npy"), usif);
    assert_eq!(enc(None, "plain2.npy"), plain);
}

#[test]
fn fitted_weighting_travels_in_the_calibrator_file() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let corpus = dir.path().join("corpus.txt");
    write_lines(&corpus, CORPUS);
    let cal = dir.path().join("sn-usif.safetensors");
    ok(&bertflow(
        &[
            "fit",
            "-k",
            "sn",
            "--on",
            s(&corpus),
            "--weighting",
            "usif",
            "-o",
            s(&cal),
        ],
        &cache,
    ));
    let (_, meta) = bertflow_calib::load(&cal).unwrap();
    let w = meta.weighting.expect("weighting recorded");
    assert_eq!(w.spec, "usif:special=drop,punct=drop");
    assert_eq!(w.counts_from, "fit corpus");
    assert!(w.weights.len() >= 30_000 && w.usif_a.is_some());
    // encode applies the file's weights without being told: the fit corpus
    // comes out standardised (sn fitted on those very vectors).
    let out = dir.path().join("z.npy");
    ok(&bertflow(
        &[
            "encode",
            "-i",
            s(&corpus),
            "-o",
            s(&out),
            "--calibrator",
            s(&cal),
        ],
        &cache,
    ));
    let z = read_npy(&out);
    let n = z.nrows() as f64;
    for col in z.columns() {
        let mean = col.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = col.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!(mean.abs() < 1e-4, "column mean {mean}");
        assert!(
            var < 1e-6 || (var - 1.0).abs() < 1e-3,
            "column variance {var}"
        );
    }
    // auto (fitted on the rows, not streamed moments) with a weighting works too.
    let auto = dir.path().join("auto-usif.safetensors");
    ok(&bertflow(
        &[
            "fit",
            "-k",
            "auto",
            "--on",
            s(&corpus),
            "--weighting",
            "usif",
            "-o",
            s(&auto),
        ],
        &cache,
    ));
    let (fitted, meta) = bertflow_calib::load(&auto).unwrap();
    assert_eq!(fitted.kind(), "auto");
    assert_eq!(meta.fit_corpus_size, CORPUS.len());
    // Asking for another weighting than the file's is an error.
    let err = fails(&bertflow(
        &[
            "encode",
            "-i",
            s(&corpus),
            "-o",
            s(&out),
            "--calibrator",
            s(&cal),
            "--weighting",
            "sif",
        ],
        &cache,
    ));
    assert!(err.contains("fitted with weighting usif"), "{err}");
}

#[test]
fn bad_weighting_inputs_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let input = dir.path().join("in.txt");
    write_lines(&input, CORPUS);
    let out = dir.path().join("o.npy");
    let run = |extra: &[&str]| {
        let mut args = vec!["encode", "-i", s(&input), "-o", s(&out)];
        args.extend(extra);
        fails(&bertflow(&args, &cache))
    };
    assert!(run(&["--weighting", "tfidf"]).contains("unknown scheme"));
    assert!(run(&["--weighting", "usif", "-p", "cls"]).contains("averaging poolings"));
    let freq = dir.path().join("freq.tsv");
    std::fs::write(&freq, "the\tmany\n").unwrap();
    let err = run(&["--weighting", "usif", "--freq-file", s(&freq)]);
    assert!(err.contains("line 1") && err.contains("many"), "{err}");
    assert!(
        run(&["--weighting", "usif", "--freq-file", "/nonexistent/f.tsv"])
            .contains("/nonexistent/f.tsv")
    );
    let emb = dir.path().join("x.npy");
    std::fs::write(
        &emb,
        bertflow_core::io::npy_bytes(&ndarray::Array2::<f32>::eye(4)),
    )
    .unwrap();
    let err = fails(&bertflow(
        &[
            "fit",
            "--embeddings",
            s(&emb),
            "-k",
            "sn",
            "--weighting",
            "usif",
            "-o",
            s(&out),
        ],
        &cache,
    ));
    assert!(err.contains("not to --embeddings"), "{err}");
}

#[test]
fn eval_and_compare_report_weighted_rows() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let pairs = dir.path().join("mine.tsv");
    let mut text = String::from("score\tsentence1\tsentence2\n");
    for (i, w) in CORPUS.windows(2).enumerate() {
        text.push_str(&format!("{}\t{}\t{}\n", (i % 5) as f64, w[0], w[1]));
    }
    std::fs::write(&pairs, text).unwrap();
    let out = ok(&bertflow(
        &[
            "eval",
            "--pairs",
            s(&pairs),
            "--weighting",
            "usif",
            "--json",
        ],
        &cache,
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["weighting"], "usif:special=drop,punct=drop", "{out}");
    let out = ok(&bertflow(
        &[
            "compare",
            "--pairs",
            s(&pairs),
            "--poolings",
            "last-avg,cls",
            "--kinds",
            "none,sn",
            "--weighting",
            "mean,usif",
            "--json",
        ],
        &cache,
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows: Vec<(String, String, String)> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["pooling"].as_str().unwrap().to_string(),
                r["weighting"].as_str().unwrap().to_string(),
                r["calibrator"].as_str().unwrap_or("none").to_string(),
            )
        })
        .collect();
    // cls does not average: no weighted cls rows.
    let want: Vec<(String, String, String)> = [
        ("last-avg", "mean", "none"),
        ("last-avg", "mean", "sn"),
        ("cls", "mean", "none"),
        ("cls", "mean", "sn"),
        ("last-avg", "usif:special=drop,punct=drop", "none"),
        ("last-avg", "usif:special=drop,punct=drop", "sn"),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(rows, want);
    // The weighted raw row equals eval's.
    let eval_usif = v["rows"][4]["tasks"]["mine"]["spearman"].clone();
    let out = ok(&bertflow(
        &[
            "eval",
            "--pairs",
            s(&pairs),
            "--weighting",
            "usif",
            "--json",
        ],
        &cache,
    ));
    let e: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(e["tasks"]["mine"]["spearman"], eval_usif);
}
