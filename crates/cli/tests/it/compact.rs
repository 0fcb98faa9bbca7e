//! Compact embeddings through the binary: `fit --quantize` writes a file
//! that ends in a quantizer, `transform` and `encode` then write codes as
//! int8/uint8 `.npy`, `encode --quantize` fits one on its input; and the
//! errors.
use crate::common;
use bertflow_calib::{load, Calibrator};
use common::{bertflow, fails, ok, read_npy, sts_test_sentences};
use ndarray::Array2;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A seeded anisotropic sample.
fn cone(n: usize, d: usize, seed: u64) -> Array2<f32> {
    let mut st = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        (st >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    Array2::from_shape_fn((n, d), |(_, j)| {
        (0.5 + next() * (1.0 + j as f64) + 0.3 * next()) as f32
    })
}

/// An int8/uint8 `.npy`: (descr, shape, body bytes).
fn read_codes(path: &Path) -> (String, (usize, usize), Vec<u8>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
    let len = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + len]).unwrap();
    let descr = header.split("'descr': '").nth(1).unwrap()[..3].to_string();
    let shape = header.split("'shape': (").nth(1).unwrap();
    let dims: Vec<usize> = shape
        .split(')')
        .next()
        .unwrap()
        .split(',')
        .map(|v| v.trim().parse().unwrap())
        .collect();
    (descr, (dims[0], dims[1]), b[10 + len..].to_vec())
}

#[test]
fn fit_quantize_then_transform_writes_the_files_codes() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let x = cone(500, 16, 3);
    let xp = dir.path().join("x.npy");
    std::fs::write(&xp, bertflow_core::io::npy_bytes(&x)).unwrap();
    for (kind, quant, descr, width) in [
        ("pca:k=8", "binary:itq=true,iters=5", "|i1", 1),
        ("pca:k=12", "ubinary", "|u1", 2),
        ("whiten", "int8", "|i1", 16),
        ("pca", "uint8:ranges=dim", "|u1", 16),
        ("pca", "pq:m=4,opq=true,iters=2", "|u1", 4),
        ("pca:k=8", "pq:m=8,opq=false", "|u1", 8),
    ] {
        let f = dir.path().join("f.safetensors");
        let out = ok(&bertflow(
            &[
                "fit",
                "--embeddings",
                s(&xp),
                "--kind",
                kind,
                "--quantize",
                quant,
                "-o",
                s(&f),
            ],
            &cache,
        ));
        let _ = out;
        let codes = dir.path().join("codes.npy");
        ok(&bertflow(
            &["transform", "-c", s(&f), "-i", s(&xp), "-o", s(&codes)],
            &cache,
        ));
        let (d, shape, body) = read_codes(&codes);
        assert_eq!((d.as_str(), shape), (descr, (500, width)), "{kind} {quant}");
        // The same bytes as the library's own calibrator and quantizer.
        let (fitted, meta) = load(&f).unwrap();
        let q = meta.quantizer.expect("the file ends in a quantizer");
        // Binary codes after a PCA rotation use ITQ unless told otherwise.
        let stored = match (kind.starts_with("pca"), quant) {
            (true, "ubinary") => "ubinary:itq=true",
            _ => quant,
        };
        assert_eq!(q.spec.to_string(), stored);
        let want = q
            .quantize(fitted.transform(x.view()).unwrap().view())
            .unwrap();
        assert_eq!(
            body,
            want.bytes.iter().copied().collect::<Vec<_>>(),
            "{kind} {quant}"
        );
        let e = fails(&bertflow(
            &[
                "transform",
                "-c",
                s(&f),
                "-i",
                s(&xp),
                "-o",
                s(&dir.path().join("c.jsonl")),
            ],
            &cache,
        ));
        assert!(e.contains("codes are written as .npy"), "{e}");
    }
}

#[test]
fn encode_writes_codes_of_a_file_or_of_its_own_input() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let sentences = sts_test_sentences(dir.path(), 40);
    let floats = dir.path().join("f.npy");
    ok(&bertflow(
        &["encode", "-i", &sentences, "-o", s(&floats)],
        &cache,
    ));
    let x = read_npy(&floats);
    // ubinary on the input itself: numpy.packbits(x > 0) per row.
    let bits = dir.path().join("b.npy");
    ok(&bertflow(
        &[
            "encode",
            "-i",
            &sentences,
            "-o",
            s(&bits),
            "--quantize",
            "ubinary",
        ],
        &cache,
    ));
    let (d, shape, body) = read_codes(&bits);
    assert_eq!((d.as_str(), shape), ("|u1", (40, 48)));
    for (i, row) in x.outer_iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            let bit = body[i * 48 + j / 8] >> (7 - j % 8) & 1;
            assert_eq!(bit == 1, *v > 0.0, "row {i} dim {j}");
        }
    }
    // A file fitted with a quantizer stage writes its codes.
    let f = dir.path().join("p.safetensors");
    ok(&bertflow(
        &[
            "fit",
            "--on",
            &sentences,
            "--kind",
            "pca:k=16",
            "--quantize",
            "int8",
            "-o",
            s(&f),
        ],
        &cache,
    ));
    let codes = dir.path().join("c.npy");
    ok(&bertflow(
        &[
            "encode",
            "--calibrator",
            s(&f),
            "-i",
            &sentences,
            "-o",
            s(&codes),
        ],
        &cache,
    ));
    let (d, shape, _) = read_codes(&codes);
    assert_eq!((d.as_str(), shape), ("|i1", (40, 16)));
    for (extra, words) in [
        (
            vec!["--quantize", "binary"],
            "already ends in the quantizer int8",
        ),
        (vec!["--normalize"], "drop --normalize"),
    ] {
        let mut args = vec![
            "encode",
            "--calibrator",
            s(&f),
            "-i",
            &sentences,
            "-o",
            s(&codes),
        ];
        args.extend(extra);
        let e = fails(&bertflow(&args, &cache));
        assert!(e.contains(words), "{e}");
    }
    let e = fails(&bertflow(
        &[
            "encode",
            "-i",
            &sentences,
            "-o",
            s(&dir.path().join("c.jsonl")),
            "--quantize",
            "int8",
        ],
        &cache,
    ));
    assert!(e.contains("int8 codes are written as .npy"), "{e}");
    let e = fails(&bertflow(
        &[
            "encode",
            "-i",
            &sentences,
            "-o",
            s(&codes),
            "--quantize",
            "int4",
        ],
        &cache,
    ));
    assert!(e.contains("unknown quantizer"), "{e}");
}
