//! Inputs found by fuzzing (crates/fuzzkit, target `matrix`), kept as regression tests.

use bertflow_core::matrix_file::MatrixReader;

/// A `.npy` announcing shape (5, 2^64 - 1): rows x cols x 4 wrapped around,
/// so the truncation check passed and sampling rows panicked in ndarray
/// ("Shape too large"). Now the size is computed checked and refused.
#[test]
fn npy_shape_whose_size_overflows_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.npy");
    std::fs::write(&p, include_bytes!("../fixtures/fuzz/shape-overflow.npy")).unwrap();
    let err = MatrixReader::open(&p).err().expect("refused");
    assert!(
        err.to_string().contains("more than any file can hold"),
        "{err}"
    );
    // The same for shapes of 2^32 x 2^32 and (2^62, 1).
    for shape in ["(4294967296, 4294967296)", "(4611686018427387904, 1)"] {
        let header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}\n");
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((header.len() as u16).to_le_bytes());
        bytes.extend(header.as_bytes());
        bytes.extend([0u8; 64]);
        std::fs::write(&p, &bytes).unwrap();
        assert!(MatrixReader::open(&p).is_err(), "{shape}");
    }
}

/// A `.safetensors` whose data offset is near 2^64: the header length plus
/// the offset overflowed.
#[test]
fn safetensors_offset_overflow_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.safetensors");
    let header =
        br#"{"embeddings":{"dtype":"F32","shape":[1,1],"data_offsets":[18446744073709551615,4]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header);
    bytes.extend([0u8; 4]);
    std::fs::write(&p, &bytes).unwrap();
    assert!(MatrixReader::open(&p).is_err());
}
