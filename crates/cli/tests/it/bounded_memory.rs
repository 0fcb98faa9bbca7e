//! `fit --embeddings` and `transform` stream: peak resident memory stays far below
//! the size of the input (each child's own peak: `common::peak_mb`).
use crate::common;
use common::peak_mb;

#[test]
fn whitening_fit_and_transform_peak_far_below_the_input_size() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    // 400,000 x 64 float32 = 102 MB of data, written in pieces (the test itself
    // never holds the matrix either).
    let (rows, cols) = (400_000usize, 64usize);
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&x).unwrap());
        f.write_all(&bertflow_core::matrix_file::npy_header_bytes(rows, cols))
            .unwrap();
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..rows * cols {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let v = (s >> 40) as f32 / (1u64 << 24) as f32 + 1.0;
            f.write_all(&v.to_le_bytes()).unwrap();
        }
    }
    let c = dir.path().join("w.safetensors");
    let y = dir.path().join("y.npy");
    let xs = x.to_str().unwrap();
    let fit = peak_mb(
        &[
            "fit",
            "--embeddings",
            xs,
            "--kind",
            "whiten",
            "-o",
            c.to_str().unwrap(),
        ],
        dir.path(),
    );
    let transform = peak_mb(
        &[
            "transform",
            "-c",
            c.to_str().unwrap(),
            "-i",
            xs,
            "-o",
            y.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(
        std::fs::metadata(&y).unwrap().len(),
        std::fs::metadata(&x).unwrap().len()
    );
    let peak_mb = fit.max(transform);
    assert!(
        peak_mb < 48.0,
        "peak resident memory of fit/transform was {peak_mb:.1} MB for a 102 MB input"
    );
}
