//! Chunked matrix files: header parsing against NumPy-written bytes, chunking,
//! float64 input, truncation and bad headers.
use bertflow_core::matrix_file::{matrix_fingerprint, npy_header_bytes, MatrixReader, NpyWriter};
use ndarray::Array2;
use std::path::Path;

/// A .npy exactly as `np.save` writes a float64 (3, 2) array (format 1.0).
fn numpy_f64_3x2(path: &Path) {
    let header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }";
    let mut h = header.to_vec();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(b' ');
    }
    h.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(&h);
    for v in [1.0f64, 2.0, 3.0, 4.0, 5.5, -6.25] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, out).unwrap();
}

#[test]
fn reads_float64_npy_in_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.npy");
    numpy_f64_3x2(&p);
    let mut r = MatrixReader::open(&p).unwrap();
    assert_eq!((r.rows(), r.cols()), (3, 2));
    let a = r.next_chunk(2).unwrap().unwrap();
    assert_eq!(
        a,
        Array2::from_shape_vec((2, 2), vec![1.0, 2.0, 3.0, 4.0]).unwrap()
    );
    let b = r.next_chunk(2).unwrap().unwrap();
    assert_eq!(b, Array2::from_shape_vec((1, 2), vec![5.5, -6.25]).unwrap());
    assert!(r.next_chunk(2).unwrap().is_none());
    assert_eq!(r.fingerprint().unwrap().len(), 16);
}

#[test]
fn writer_round_trips_and_header_is_aligned() {
    assert_eq!(npy_header_bytes(7, 384).len() % 64, 0);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("y.npy");
    let m = Array2::from_shape_fn((5, 3), |(i, j)| (i * 3 + j) as f32 * 0.5);
    let mut w = NpyWriter::create(&p, 5, 3).unwrap();
    w.write_chunk(m.slice(ndarray::s![..2, ..])).unwrap();
    w.write_chunk(m.slice(ndarray::s![2.., ..])).unwrap();
    w.finish().unwrap();
    let mut r = MatrixReader::open(&p).unwrap();
    assert_eq!(r.next_chunk(100).unwrap().unwrap(), m);
    // Same bytes, same fingerprint; one value changed, another fingerprint.
    let f1 = r.fingerprint().unwrap();
    let mut r2 = MatrixReader::open(&p).unwrap();
    while r2.next_chunk(2).unwrap().is_some() {}
    assert_eq!(r2.fingerprint().unwrap(), f1);
    // The in-memory fingerprint (Python's fit) equals the file's; the
    // transposed view (other logical order) differs.
    assert_eq!(matrix_fingerprint(5, 3, m.iter().copied()), f1);
    assert_ne!(matrix_fingerprint(3, 5, m.t().iter().copied()), f1);
    let mut bytes = std::fs::read(&p).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 1;
    std::fs::write(&p, bytes).unwrap();
    let mut r3 = MatrixReader::open(&p).unwrap();
    while r3.next_chunk(2).unwrap().is_some() {}
    assert_ne!(r3.fingerprint().unwrap(), f1);
}

#[test]
fn writer_refuses_missing_rows() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("y.npy");
    let mut w = NpyWriter::create(&p, 3, 2).unwrap();
    w.write_chunk(Array2::<f32>::zeros((2, 2)).view()).unwrap();
    assert!(w.finish().is_err());
}

#[test]
fn safetensors_embeddings_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.safetensors");
    let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let other: Vec<u8> = [9.0f32].iter().flat_map(|v| v.to_le_bytes()).collect();
    let t =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, 3], &data).unwrap();
    let o = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], &other).unwrap();
    let bytes = safetensors::tensor::serialize([("a_first", o), ("embeddings", t)], None).unwrap();
    std::fs::write(&p, bytes).unwrap();
    let mut r = MatrixReader::open(&p).unwrap();
    assert_eq!((r.rows(), r.cols()), (2, 3));
    let m = r.next_chunk(10).unwrap().unwrap();
    assert_eq!(m.row(1).to_vec(), vec![4.0, 5.0, 6.0]);
}

#[test]
fn bad_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.npy", vec![], "too short"),
        ("text.npy", b"hello world, not numpy".to_vec(), "magic"),
        (
            "oned.npy",
            {
                let mut b = b"\x93NUMPY\x01\x00".to_vec();
                let h = b"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }          \n";
                b.extend_from_slice(&(h.len() as u16).to_le_bytes());
                b.extend_from_slice(h);
                b.extend_from_slice(&[0u8; 12]);
                b
            },
            "2-D",
        ),
        (
            "int.npy",
            {
                let mut b = b"\x93NUMPY\x01\x00".to_vec();
                let h = b"{'descr': '<i8', 'fortran_order': False, 'shape': (1, 1), }       \n";
                b.extend_from_slice(&(h.len() as u16).to_le_bytes());
                b.extend_from_slice(h);
                b.extend_from_slice(&[0u8; 8]);
                b
            },
            "unsupported dtype",
        ),
        (
            "trunc.npy",
            {
                let mut b = npy_header_bytes(10, 4);
                b.extend_from_slice(&[0u8; 12]);
                b
            },
            "truncated",
        ),
        (
            "nan.npy",
            {
                let mut b = npy_header_bytes(1, 2);
                b.extend_from_slice(&1.0f32.to_le_bytes());
                b.extend_from_slice(&f32::NAN.to_le_bytes());
                b
            },
            "row 0 column 1",
        ),
    ];
    for (name, bytes, want) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let err = MatrixReader::open(&p).and_then(|mut r| r.next_chunk(8).map(|_| ()));
        let msg = err.expect_err(name).to_string();
        assert!(msg.contains(want), "{name}: {msg}");
    }
    let missing = MatrixReader::open(&dir.path().join("nope.npy"))
        .err()
        .unwrap();
    assert!(missing.to_string().contains("cannot open"), "{missing}");
}
