//! Parquet input of `index build|add --vectors`, `fit --embeddings` and
//! `transform` (the Spark job's schema): the fixtures in tests/fixtures/parquet
//! were written by pyarrow (make.py there, an independent writer) and by
//! PySpark 4.3 itself (make_spark.py: root `spark_schema`, required and
//! optional columns in two orders, float and double, snappy and zstd); row i's
//! vector is ((7 i + 3 j) % 11 - 5) / 5.
use bertflow_core::indexing::RowSource;
use bertflow_core::matrix_file::matrix_fingerprint;
use bertflow_core::vector_input::{open_rows, open_vectors, ParquetRows};
use std::path::PathBuf;

const DIM: usize = 384;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/parquet")
        .join(name)
}

fn expected(i: usize) -> Vec<f32> {
    (0..DIM)
        .map(|j| (((7 * i + 3 * j) % 11) as f32 - 5.0) / 5.0)
        .collect()
}

/// Every row of `source`, `chunk` at a time: (vectors, texts).
fn read_all(source: &mut dyn RowSource, chunk: usize) -> (Vec<Vec<f32>>, Vec<String>) {
    let (mut rows, mut texts) = (Vec::new(), Vec::new());
    while let Some((m, t)) = source.next_rows(chunk).unwrap() {
        assert!(m.nrows() <= chunk);
        rows.extend(m.rows().into_iter().map(|r| r.to_vec()));
        texts.extend(t.expect("Parquet rows carry their sentences"));
    }
    (rows, texts)
}

#[test]
fn a_parquet_file_gives_every_row_and_sentence_in_order() {
    for name in [
        "vectors.parquet",
        "vectors_f64.parquet",
        "spark_out",
        "spark_written",
        "spark_written/part-00001-spark.snappy.parquet",
        "spark_f64_zstd",
    ] {
        if name.ends_with("snappy.parquet") {
            // One part file of Spark's output alone: rows 3-5.
            let mut source = open_rows(&fixture(name), "text", "embedding").unwrap();
            let (rows, texts) = read_all(&mut *source, 2);
            assert_eq!(texts, ["sentence 3", "sentence 4", "sentence 5"]);
            assert_eq!(rows[0], expected(3));
            continue;
        }
        let mut source = open_rows(&fixture(name), "text", "embedding").unwrap();
        assert_eq!((source.rows(), source.cols()), (6, DIM), "{name}");
        let (rows, texts) = read_all(&mut *source, 4);
        assert_eq!(rows.len(), 6, "{name}");
        for (i, (row, text)) in rows.iter().zip(&texts).enumerate() {
            assert_eq!(text, &format!("sentence {i}"), "{name}");
            assert_eq!(row, &expected(i), "{name} row {i}");
        }
    }
}

/// `fit --embeddings` and `transform` read the vectors alone (no text column
/// needed) and fingerprint them as the same float32 matrix saved as `.npy`.
#[test]
fn vectors_alone_read_and_fingerprint_as_a_matrix() {
    let want: Vec<f32> = (0..6).flat_map(expected).collect();
    let print = matrix_fingerprint(6, DIM, want.iter().copied());
    for name in ["spark_written", "spark_f64_zstd", "vectors.parquet"] {
        let mut source = open_vectors(&fixture(name)).unwrap();
        assert_eq!((source.rows(), source.cols()), (6, DIM), "{name}");
        assert_eq!(source.fingerprint(), None, "{name}: nothing read yet");
        let mut got = Vec::new();
        while let Some((m, texts)) = source.next_rows(4).unwrap() {
            assert!(texts.is_none(), "{name}");
            got.extend(m.iter().copied());
        }
        assert_eq!(got, want, "{name}");
        assert_eq!(
            source.fingerprint().as_deref(),
            Some(print.as_str()),
            "{name}"
        );
    }
    // A sample breaks the sequential fingerprint, as for a matrix file.
    let mut source = open_vectors(&fixture("spark_written")).unwrap();
    source.sample(&[0, 5]).unwrap();
    while source.next_rows(10).unwrap().is_some() {}
    assert_eq!(source.fingerprint(), None);
}

#[test]
fn a_spark_output_without_the_column_names_the_columns_it_has() {
    let e = error("spark_written", "text", "vector");
    assert!(
        e.contains("no column \"vector\" (columns: text, id, embedding)"),
        "{e}"
    );
    let e = error("spark_f64_zstd", "sentence", "embedding");
    assert!(
        e.contains("no column \"sentence\" (columns: embedding, id, text)"),
        "{e}"
    );
    let e = match open_vectors(&fixture("bad_type.parquet")) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a string column read as vectors"),
    };
    assert!(e.contains("not a list of floats"), "{e}");
}

#[test]
fn a_sample_does_not_move_the_reading_position() {
    let mut source = ParquetRows::open(&fixture("spark_out"), "text", "embedding").unwrap();
    let sample = source.sample(&[1, 4, 5]).unwrap();
    assert_eq!(sample.nrows(), 3);
    for (k, i) in [1, 4, 5].into_iter().enumerate() {
        assert_eq!(sample.row(k).to_vec(), expected(i));
    }
    let (rows, _) = read_all(&mut source, 100);
    assert_eq!(rows.len(), 6);
    assert_eq!(rows[0], expected(0));
}

fn error(name: &str, text: &str, vector: &str) -> String {
    let path = fixture(name);
    let mut source = match open_rows(&path, text, vector) {
        Err(e) => return e.to_string(),
        Ok(s) => s,
    };
    loop {
        match source.next_rows(1) {
            Err(e) => return e.to_string(),
            Ok(None) => panic!("{name}: read without an error"),
            Ok(Some(_)) => {}
        }
    }
}

#[test]
fn bad_parquet_input_is_an_error_naming_the_problem() {
    let e = error("vectors.parquet", "text", "vectors");
    assert!(
        e.contains("no column \"vectors\"") && e.contains("embedding"),
        "{e}"
    );
    let e = error("vectors.parquet", "id", "embedding");
    assert!(e.contains("\"id\" is not a string column"), "{e}");
    let e = error("bad_type.parquet", "text", "embedding");
    assert!(e.contains("not a list of floats"), "{e}");
    let e = error("bad_null.parquet", "text", "embedding");
    assert!(e.contains("row 1") && e.contains("is null"), "{e}");
    let e = error("bad_ragged.parquet", "text", "embedding");
    assert!(
        e.contains("row 1: a vector of length 1, the first row's is 2"),
        "{e}"
    );
    let e = error("bad_nan.parquet", "text", "embedding");
    assert!(
        e.contains("row 1") && e.contains("NaN at 1") && e.contains("finite"),
        "{e}"
    );

    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture("vectors.parquet")).unwrap();
    for cut in [bytes.len() / 2, bytes.len() - 3, 4] {
        let path = dir.path().join(format!("cut{cut}.parquet"));
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let e = error(path.to_str().unwrap(), "text", "embedding");
        assert!(e.contains("not a readable Parquet file"), "{cut}: {e}");
    }
    let e = error(
        dir.path().join("none.parquet").to_str().unwrap(),
        "text",
        "embedding",
    );
    assert!(e.contains("none.parquet"), "{e}");
    let empty = tempfile::tempdir().unwrap();
    let e = error(empty.path().to_str().unwrap(), "text", "embedding");
    assert!(e.contains("without .parquet files"), "{e}");
}

/// Damaged bytes inside a Parquet file (its pages, its footer) are an error
/// or, where the damage hits only values, rows that read; never a panic.
#[test]
fn damaged_parquet_bytes_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture("vectors.parquet")).unwrap();
    let path = dir.path().join("d.parquet");
    for at in (4..bytes.len() - 8).step_by(7) {
        for flip in [0x01u8, 0xff] {
            let mut b = bytes.clone();
            b[at] ^= flip;
            std::fs::write(&path, &b).unwrap();
            let result = std::panic::catch_unwind(|| {
                let Ok(mut source) = open_rows(&path, "text", "embedding") else {
                    return;
                };
                while let Ok(Some(_)) = source.next_rows(2) {}
            });
            assert!(result.is_ok(), "byte {at} ^ {flip:#x} panicked");
        }
    }
}
