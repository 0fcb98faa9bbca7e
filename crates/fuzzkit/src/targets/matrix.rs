//! Embedding matrices and sentence files given as input: `MatrixReader` on
//! `.npy` and `.safetensors` (open, read every chunk, sample rows,
//! fingerprint) and `read_sentences` on `.jsonl` and plain text.
//!
//! Mode byte (the first): 0 `.npy`, 1 `.safetensors`, 2 `.jsonl` sentences,
//! 3 plain-text sentences (others: `.npy`).

use std::collections::HashMap;

use bertflow_core::io::{read_sentences, write_embeddings, EmptyLines, Input};
use bertflow_core::matrix_file::{npy_header_bytes, MatrixReader};

fn with_mode(mode: u8, bytes: Vec<u8>) -> Vec<u8> {
    let mut out = vec![mode];
    out.extend(bytes);
    out
}

/// A `.npy` of float64 with a hand-written header (format `version`).
fn npy_f64(rows: usize, cols: usize, version: u8) -> Vec<u8> {
    let header =
        format!("{{'descr': '<f8', 'fortran_order': False, 'shape': ({rows}, {cols}), }}\n");
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([version, 0]);
    if version == 1 {
        out.extend((header.len() as u16).to_le_bytes());
    } else {
        out.extend((header.len() as u32).to_le_bytes());
    }
    out.extend(header.as_bytes());
    for k in 0..rows * cols {
        out.extend((k as f64 * 0.25 - 1.0).to_le_bytes());
    }
    out
}

/// `.npy` files (float32 1.0, float64 1.0 and 2.0), `.safetensors` files
/// (with and without metadata), JSONL and plain sentences.
pub fn seeds() -> Vec<Vec<u8>> {
    let m = super::matrix(5, 3, 11);
    let mut npy = npy_header_bytes(5, 3);
    npy.extend(m.iter().flat_map(|v| v.to_le_bytes()));
    let texts: Vec<String> = (0..5).map(|i| format!("sentence {i}")).collect();
    let input = Input {
        lines: (1..=5).collect(),
        texts,
    };
    let st = super::scratch("seed.safetensors");
    let mut out = vec![
        with_mode(0, npy),
        with_mode(0, npy_f64(4, 2, 1)),
        with_mode(0, npy_f64(2, 3, 2)),
    ];
    for meta in [
        HashMap::new(),
        HashMap::from([("model".to_string(), "fuzz".to_string())]),
    ] {
        write_embeddings(&st, &m, &input, &meta).expect("writing a seed");
        out.push(with_mode(1, std::fs::read(&st).expect("reading a seed")));
    }
    let jsonl = "{\"text\": \"A man plays a guitar.\"}\n{\"text\": \"caf\\u00e9\", \"id\": 3}\n\n{\"text\": \"x\"}\r\n";
    out.push(with_mode(2, jsonl.as_bytes().to_vec()));
    out.push(with_mode(
        3,
        "\u{feff}first line\nsecond\r\n\nthird\n"
            .as_bytes()
            .to_vec(),
    ));
    out
}

/// Reads `data` (after the mode byte) as the file kind the mode names.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode {
        2 | 3 => {
            let name = if mode == 2 { "in.jsonl" } else { "in.txt" };
            let path = super::scratch_file(name, rest);
            for empty in [EmptyLines::Error, EmptyLines::Skip, EmptyLines::Keep] {
                if let Ok(input) = read_sentences(&path, false, empty) {
                    assert_eq!(input.texts.len(), input.lines.len());
                }
            }
        }
        _ => {
            let name = if mode == 1 {
                "in.safetensors"
            } else {
                "in.npy"
            };
            let path = super::scratch_file(name, rest);
            let Ok(mut reader) = MatrixReader::open(&path) else {
                return;
            };
            let (rows, cols) = (reader.rows(), reader.cols());
            // Sample first (it seeks back), then read everything in chunks.
            let _ = reader.read_rows(&[0, rows / 2, rows - 1]);
            let _ = reader.read_rows(&[rows]);
            let mut seen = 0;
            while let Ok(Some(chunk)) = reader.next_chunk(2) {
                assert_eq!(chunk.ncols(), cols);
                seen += chunk.nrows();
            }
            assert!(seen <= rows);
            let _ = reader.fingerprint();
        }
    }
}
