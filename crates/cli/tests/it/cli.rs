//! The `bertflow` binary end to end on small inputs: output formats, the cache,
//! calibrator files, and every kind of bad input.
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common;
use common::{bertflow, model, ok};

/// `bertflow encode -i INPUT -o OUTPUT EXTRA...`
fn encode(input: &Path, output: &Path, extra: &[&str], cache: &Path) -> Output {
    let mut args = vec![
        "encode",
        "-i",
        input.to_str().unwrap(),
        "-o",
        output.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    bertflow(&args, cache)
}

fn fails_with(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "expected failure, got {:?}; stderr: {err}",
        out.status
    );
    assert!(!err.contains("panicked"), "panic: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
}

/// Parse a little-endian f4 C-order 2-D .npy.
fn read_npy(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    assert_eq!((10 + hlen) % 64, 0, "header must be 64-byte aligned");
    let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
    assert!(
        header.contains("'descr': '<f4'") && header.contains("'fortran_order': False"),
        "{header}"
    );
    let shape: Vec<usize> = header
        .split("'shape': (")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let data = b[10 + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (shape, data)
}

const SENTENCES: &str = "A man is playing a guitar.\nA woman is slicing an onion.\nThe cat sleeps.\nA man plays the guitar.\n";

#[test]
fn encode_writes_npy_jsonl_and_safetensors_in_input_order() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("s.txt");
    std::fs::write(&input, SENTENCES).unwrap();
    let cache = dir.path().join("cache");
    let npy = dir.path().join("e.npy");
    ok(&bertflow(
        &[
            "encode",
            "-i",
            input.to_str().unwrap(),
            "-o",
            npy.to_str().unwrap(),
            "--no-cache",
        ],
        &cache,
    ));
    let (shape, v) = read_npy(&npy);
    assert_eq!(shape, vec![4, 384]);
    assert!(!cache.exists(), "--no-cache must not write the cache");
    let row = |i: usize| &v[i * 384..(i + 1) * 384];
    let cos = |a: &[f32], b: &[f32]| {
        let d: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        d / (a.iter().map(|x| x * x).sum::<f32>().sqrt()
            * b.iter().map(|x| x * x).sum::<f32>().sqrt())
    };
    // Row order follows the input: the paraphrase (row 3) is closest to row 0.
    assert!(
        cos(row(0), row(3)) > 0.8
            && cos(row(0), row(3)) > cos(row(0), row(1))
            && cos(row(0), row(3)) > cos(row(0), row(2))
    );

    let jsonl = dir.path().join("e.jsonl");
    ok(&encode(&input, &jsonl, &[], &cache));
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[2]["text"], "The cat sleeps.");
    assert_eq!(lines[2]["line"], 3);
    let e: Vec<f32> = lines[2]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    for (a, b) in e.iter().zip(row(2)) {
        assert!((a - b).abs() < 1e-6);
    }

    let st = dir.path().join("e.safetensors");
    ok(&bertflow(
        &[
            "encode",
            "-i",
            input.to_str().unwrap(),
            "-o",
            st.to_str().unwrap(),
            "--pooling",
            "cls",
        ],
        &cache,
    ));
    let bytes = std::fs::read(&st).unwrap();
    let t = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let view = t.tensor("embeddings").unwrap();
    assert_eq!(view.shape(), &[4, 384]);
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(meta.metadata().as_ref().unwrap()["pooling"], "cls");

    // JSONL input gives the same vectors as text input.
    let jin = dir.path().join("in.jsonl");
    std::fs::write(
        &jin,
        SENTENCES
            .lines()
            .map(|s| format!("{{\"text\": {}}}\n", serde_json::json!(s)))
            .collect::<String>(),
    )
    .unwrap();
    let npy2 = dir.path().join("e2.npy");
    ok(&encode(&jin, &npy2, &[], &cache));
    assert_eq!(read_npy(&npy2).1, v);
}

#[test]
fn cache_is_reused_and_a_damaged_entry_is_recomputed() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("s.txt");
    std::fs::write(&input, SENTENCES).unwrap();
    let cache = dir.path().join("cache");
    let out1 = dir.path().join("1.npy");
    let r = encode(&input, &out1, &[], &cache);
    ok(&r);
    assert!(!String::from_utf8_lossy(&r.stderr).contains("from the cache"));
    let entries: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let out2 = dir.path().join("2.npy");
    let r = encode(&input, &out2, &[], &cache);
    ok(&r);
    assert!(String::from_utf8_lossy(&r.stderr)
        .contains("reused 1 of 1 embedding matrices from the cache"));
    assert_eq!(std::fs::read(&out1).unwrap(), std::fs::read(&out2).unwrap());
    // Damage the entry: its payload no longer matches its checksum.
    let mut b = std::fs::read(&entries[0]).unwrap();
    let n = b.len();
    b[n - 3] ^= 0x55;
    std::fs::write(&entries[0], &b).unwrap();
    let out3 = dir.path().join("3.npy");
    let r = encode(&input, &out3, &[], &cache);
    ok(&r);
    assert!(
        !String::from_utf8_lossy(&r.stderr).contains("from the cache"),
        "a damaged entry must not be trusted"
    );
    assert_eq!(std::fs::read(&out1).unwrap(), std::fs::read(&out3).unwrap());
    assert_ne!(
        std::fs::read(&entries[0]).unwrap(),
        b,
        "the entry is rewritten"
    );
}

#[test]
fn bad_inputs_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let out = dir.path().join("o.npy");
    let o = out.to_str().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_string_lossy().into_owned()
    };
    let good = write("good.txt", SENTENCES.as_bytes());
    fails_with(
        &bertflow(&["encode", "-i", &write("empty.txt", b""), "-o", o], &cache),
        &["empty.txt", "no sentences"],
    );
    let gap = write("gap.txt", b"one\n\n  \nfour\n");
    fails_with(
        &bertflow(&["encode", "-i", &gap, "-o", o], &cache),
        &[
            "gap.txt:2",
            "gap.txt:2: empty text; give `--empty skip` to drop empty lines",
        ],
    );
    ok(&bertflow(
        &["encode", "-i", &gap, "-o", o, "--empty", "skip"],
        &cache,
    ));
    assert_eq!(read_npy(&out).0, vec![2, 384]);
    ok(&bertflow(
        &["encode", "-i", &gap, "-o", o, "--empty", "keep"],
        &cache,
    ));
    assert_eq!(read_npy(&out).0, vec![4, 384]);
    fails_with(
        &bertflow(
            &[
                "encode",
                "-i",
                &write("bad.txt", b"ok\nbad \xff\xfe here\n"),
                "-o",
                o,
            ],
            &cache,
        ),
        &["bad.txt:2", "invalid UTF-8"],
    );
    fails_with(
        &bertflow(
            &[
                "encode",
                "-i",
                &write("bad.jsonl", b"{\"text\": \"a\"}\n{\"txt\": 1}\n"),
                "-o",
                o,
            ],
            &cache,
        ),
        &["bad.jsonl:2", "\"text\""],
    );
    fails_with(
        &bertflow(
            &["encode", "-i", &good, "-o", o, "--model", "/no/such/model"],
            &cache,
        ),
        &["/no/such/model", "models/all-MiniLM-L6-v2"],
    );
    let partial = dir.path().join("partial");
    std::fs::create_dir(&partial).unwrap();
    std::fs::copy(
        PathBuf::from(model()).join("config.json"),
        partial.join("config.json"),
    )
    .unwrap();
    fails_with(
        &bertflow(
            &[
                "encode",
                "-i",
                &good,
                "-o",
                o,
                "--model",
                partial.to_str().unwrap(),
            ],
            &cache,
        ),
        &["incomplete", "model.safetensors"],
    );
    let r = bertflow(
        &["encode", "-i", &good, "-o", o, "--pooling", "last2avg"],
        &cache,
    );
    assert_eq!(r.status.code(), Some(2), "clap rejects unknown poolings");
    assert!(String::from_utf8_lossy(&r.stderr).contains("unknown pooling 'last2avg'"));
    fails_with(
        &bertflow(
            &["encode", "-i", &good, "-o", o, "--pooling", "layers:0,9"],
            &cache,
        ),
        &["layer 9 is out of range", "0..=6"],
    );
    fails_with(
        &bertflow(
            &[
                "encode",
                "-i",
                &good,
                "-o",
                &dir.path().join("o.csv").to_string_lossy(),
            ],
            &cache,
        ),
        &["unknown output format", ".npy"],
    );
    fails_with(
        &bertflow(
            &["encode", "-i", &good, "-o", o, "--max-len", "1000"],
            &cache,
        ),
        &["max length 1000", "512"],
    );
    fails_with(
        &bertflow(&["eval", "--data", "/no/such/data"], &cache),
        &["/no/such/data", "--data"],
    );
    fails_with(
        &bertflow(
            &[
                "eval",
                "--pairs",
                &write("p.tsv", b"score\ts1\ts2\n4.0\ta\tb\nx\ty\tz\n"),
            ],
            &cache,
        ),
        &["p.tsv:3", "cannot parse score"],
    );
}

#[test]
fn long_sentences_are_truncated_counted_and_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    let long = "word ".repeat(40);
    let input = dir.path().join("s.txt");
    std::fs::write(&input, format!("{long}\nshort one\n{long} again\n")).unwrap();
    let out = dir.path().join("o.npy");
    let r = bertflow(
        &[
            "encode",
            "-i",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--max-len",
            "16",
        ],
        &dir.path().join("c"),
    );
    ok(&r);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(err.matches("truncated").count(), 1, "{err}");
    assert!(
        err.contains("2 of 3 sentences were longer than 16 tokens"),
        "{err}"
    );
}

#[test]
fn user_pairs_file_is_scored_under_its_stem() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("mypairs.tsv");
    std::fs::write(
        &p,
        "score\tsentence1\tsentence2\n5.0\tA man is playing a guitar.\tA man plays the guitar.\n\
         0.5\tA man is playing a guitar.\tThe stock market fell sharply.\n\
         3.0\tA woman is slicing an onion.\tA woman is cutting vegetables.\n\
         1.0\tThe cat sleeps.\tA dog runs in the park.\n",
    )
    .unwrap();
    let out = ok(&bertflow(
        &["eval", "--pairs", p.to_str().unwrap(), "--json"],
        &dir.path().join("c"),
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let keys: Vec<&String> = v["tasks"].as_object().unwrap().keys().collect();
    assert_eq!(keys, vec!["mypairs"]);
    assert_eq!(v["tasks"]["mypairs"]["pairs"], 4);
    assert_eq!(v["tasks"]["mypairs"]["spearman"], 100.0, "{out}");
}

#[test]
fn calibrator_file_round_trip_and_mismatch_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("c");
    let corpus = dir.path().join("corpus.txt");
    let text: String = (0..60)
        .map(|i| format!("Sentence number {i} talks about topic {}.\n", i % 7))
        .collect();
    std::fs::write(&corpus, text).unwrap();
    let cal = dir.path().join("w.safetensors");
    ok(&bertflow(
        &[
            "fit",
            "--kind",
            "whiten:k=32",
            "--on",
            corpus.to_str().unwrap(),
            "-o",
            cal.to_str().unwrap(),
        ],
        &cache,
    ));
    let input = dir.path().join("s.txt");
    std::fs::write(&input, SENTENCES).unwrap();
    let out = dir.path().join("o.npy");
    ok(&bertflow(
        &[
            "encode",
            "-i",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--calibrator",
            cal.to_str().unwrap(),
        ],
        &cache,
    ));
    assert_eq!(read_npy(&out).0, vec![4, 32]);
    // Another pooling: refused unless allowed.
    fails_with(
        &bertflow(
            &[
                "encode",
                "-i",
                input.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
                "--calibrator",
                cal.to_str().unwrap(),
                "--pooling",
                "cls",
            ],
            &cache,
        ),
        &["pooling", "last-avg"],
    );
    ok(&bertflow(
        &[
            "encode",
            "-i",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--calibrator",
            cal.to_str().unwrap(),
            "--pooling",
            "cls",
            "--allow-mismatch",
        ],
        &cache,
    ));
    // A truncated file is a clear error.
    let bytes = std::fs::read(&cal).unwrap();
    let broken = dir.path().join("broken.safetensors");
    std::fs::write(&broken, &bytes[..bytes.len() / 2]).unwrap();
    fails_with(
        &bertflow(
            &[
                "encode",
                "-i",
                input.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
                "--calibrator",
                broken.to_str().unwrap(),
            ],
            &cache,
        ),
        &["broken.safetensors"],
    );
    let r = bertflow(
        &[
            "fit",
            "--kind",
            "flow:levels=0",
            "--on",
            corpus.to_str().unwrap(),
            "-o",
            cal.to_str().unwrap(),
        ],
        &cache,
    );
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("levels must be an integer"));
}

#[test]
fn flow_fit_is_bit_for_bit_reproducible_and_seeded() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("c");
    let corpus = dir.path().join("corpus.txt");
    let text: String = (0..200)
        .map(|i| {
            format!(
                "Item {i}: a note about subject {} and colour {}.\n",
                i % 11,
                i % 5
            )
        })
        .collect();
    std::fs::write(&corpus, text).unwrap();
    let fit = |seed: u32, name: &str| {
        let out = dir.path().join(name);
        let kind = format!("flow:seed={seed},batch=16");
        ok(&bertflow(
            &[
                "fit",
                "--kind",
                &kind,
                "--on",
                corpus.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
            ],
            &cache,
        ));
        std::fs::read(out).unwrap()
    };
    let a = fit(7, "a.safetensors");
    let b = fit(7, "b.safetensors");
    let c = fit(8, "c.safetensors");
    assert_eq!(a, b, "same seed, same file");
    assert_ne!(a, c, "another seed, another flow");
    let (_, meta) = safetensors::SafeTensors::read_metadata(&a).unwrap();
    let header = &meta.metadata().as_ref().unwrap()["bertflow_calibrator"];
    let v: serde_json::Value = serde_json::from_str(header).unwrap();
    assert_eq!(v["meta"]["seed"], 7);
    assert_eq!(v["meta"]["fit_corpus_size"], 200);
    assert_eq!(v["meta"]["pooling"], "last-avg");
    assert_eq!(v["meta"]["input_dim"], 384);
    assert!(v["meta"]["model"]
        .as_str()
        .unwrap()
        .starts_with("all-MiniLM-L6-v2@"));
}
