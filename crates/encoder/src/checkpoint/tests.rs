//! The checkpoint readers against files written by PyTorch and safetensors
//! (tests/fixtures/checkpoint, scripts/reference/make_checkpoint_fixtures.py),
//! and on bad input: every truncation, every flipped byte, wrong magic,
//! unsupported opcodes, deep nesting, storages too short. Errors, never panics.
use super::*;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn by_name(t: NamedTensors) -> std::collections::HashMap<String, HostTensor> {
    t.into_iter().collect()
}

#[test]
fn half_precision_converts_exactly() {
    for (h, want) in [
        (0x3c00u16, 1.0f32),
        (0xc100, -2.5),
        (0x7bff, 65504.0),
        (0x0001, 2f32.powi(-24)),
        (0x03ff, 1023.0 * 2f32.powi(-24)),
        (0x0400, 2f32.powi(-14)),
        (0x8000, -0.0),
        (0x7c00, f32::INFINITY),
        (0xfc00, f32::NEG_INFINITY),
    ] {
        let got = f16_to_f32(h);
        assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}: {got} != {want}");
    }
    assert!(f16_to_f32(0x7e00).is_nan());
}

#[test]
fn torch_and_safetensors_files_of_the_same_tensors_read_the_same() {
    let pt = read_torch(&fixture("checkpoint/dtypes.pt")).unwrap();
    let names: Vec<&str> = pt.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["weight", "bias", "f16", "bf16", "f64", "i64", "scalar", "row", "matrix", "param"]
    );
    let st = by_name(read_safetensors(&fixture("checkpoint/dtypes.safetensors")).unwrap());
    assert_eq!(st.len(), pt.len());
    for (name, t) in &pt {
        let s = &st[name];
        assert_eq!((t.dtype(), t.shape()), (s.dtype(), s.shape()), "{name}");
        assert_eq!(t.bytes(), s.bytes(), "{name}");
        let (a, b) = (t.to_f32(), s.to_f32());
        assert_eq!(
            a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "{name}"
        );
    }
    let pt = by_name(pt);
    assert_eq!(pt["f16"].dtype(), DType::F16);
    assert_eq!(pt["bf16"].dtype(), DType::BF16);
    assert_eq!(pt["scalar"].shape(), &[] as &[usize]);
    assert_eq!(pt["scalar"].to_f32(), [0.75]);
    // base[1] of arange(12).reshape(3, 4) / 7: storage offset 4
    let row: Vec<f32> = (4..8).map(|i| i as f32 / 7.0).collect();
    assert_eq!(pt["row"].to_f32(), row);
    assert_eq!(pt["i64"].to_f32(), [-2.0, -1.0, 0.0, 1.0, 2.0]);
    let f16 = pt["f16"].to_f32();
    assert_eq!(
        (f16[0], f16[1], f16[3], f16[4]),
        (1.0, -2.5, 65504.0, f32::INFINITY)
    );
    assert!(f16[5] == 0.0 && f16[5].is_sign_negative());
}

#[test]
fn a_transformers_bin_reads_as_its_safetensors_twin() {
    let bin = read_torch(&fixture("tiny-bert/pytorch_model.bin")).unwrap();
    let st = by_name(read_safetensors(&fixture("checkpoint/tiny-bert.safetensors")).unwrap());
    assert_eq!(bin.len(), st.len());
    for (name, t) in &bin {
        let s = &st[name];
        assert_eq!((t.dtype(), t.shape()), (s.dtype(), s.shape()), "{name}");
        assert_eq!(t.bytes(), s.bytes(), "{name}");
    }
    let dict = read_torch_state_dict(&fixture("tiny-bert/pytorch_model.bin")).unwrap();
    assert_eq!(dict[0].0, bin[0].0);
    assert_eq!(dict[0].1, bin[0].1.shape());
    assert_eq!(dict[0].2, bin[0].1.to_f32());
}

#[test]
fn a_non_contiguous_tensor_is_refused() {
    let e = read_torch(&fixture("checkpoint/transposed.pt"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tensor t") && e.contains("non-contiguous"),
        "{e}"
    );
    assert!(e.contains("transposed.pt"), "{e}");
}

#[test]
fn every_truncation_and_flipped_byte_is_an_error_or_a_value_never_a_panic() {
    for name in ["checkpoint/dtypes.pt", "checkpoint/transposed.pt"] {
        let bytes = std::fs::read(fixture(name)).unwrap();
        for n in 0..bytes.len() {
            assert!(
                torch::parse(Arc::new(bytes[..n].to_vec())).is_err(),
                "{name}[..{n}]"
            );
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            let _ = torch::parse(Arc::new(b));
            let mut b = bytes.clone();
            b[i] = b[i].wrapping_add(1);
            let _ = torch::parse(Arc::new(b));
        }
    }
    let bytes = std::fs::read(fixture("checkpoint/dtypes.safetensors")).unwrap();
    for n in 0..bytes.len() {
        assert!(
            parse_safetensors(Arc::new(bytes[..n].to_vec())).is_err(),
            "[..{n}]"
        );
    }
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0xff;
        let _ = parse_safetensors(Arc::new(b));
    }
}

#[test]
fn wrong_formats_are_named() {
    let st = std::fs::read(fixture("checkpoint/dtypes.safetensors")).unwrap();
    let e = torch::parse(Arc::new(st)).unwrap_err();
    assert!(e.contains("zip"), "{e}");
    let legacy = vec![
        0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8,
    ];
    let e = torch::parse(Arc::new(legacy)).unwrap_err();
    assert!(e.contains("legacy"), "{e}");
    let pt = std::fs::read(fixture("checkpoint/dtypes.pt")).unwrap();
    let e = parse_safetensors(Arc::new(pt)).unwrap_err();
    assert!(e.contains("safetensors"), "{e}");
}

/// A zip archive of stored `entries` (CRCs left zero: the reader does not check them).
fn stored_zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let (mut out, mut dir) = (Vec::new(), Vec::new());
    for (name, data) in entries {
        let offset = out.len() as u32;
        let (n, len) = (name.len() as u16, data.len() as u32);
        out.extend(0x0403_4b50u32.to_le_bytes());
        out.extend([0u8; 14]); // version, flags, method 0, time, date, crc
        for v in [len, len] {
            out.extend(v.to_le_bytes());
        }
        out.extend(n.to_le_bytes());
        out.extend(0u16.to_le_bytes());
        out.extend(name.as_bytes());
        out.extend(*data);
        dir.extend(0x0201_4b50u32.to_le_bytes());
        dir.extend([0u8; 16]); // versions, flags, method 0, time, date, crc
        for v in [len, len] {
            dir.extend(v.to_le_bytes());
        }
        dir.extend(n.to_le_bytes());
        dir.extend([0u8; 12]); // extra, comment, disk, attributes
        dir.extend(offset.to_le_bytes());
        dir.extend(name.as_bytes());
    }
    let (at, size) = (out.len() as u32, dir.len() as u32);
    out.extend(dir);
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0u8; 4]);
    let n = entries.len() as u16;
    out.extend(n.to_le_bytes());
    out.extend(n.to_le_bytes());
    out.extend(size.to_le_bytes());
    out.extend(at.to_le_bytes());
    out.extend([0u8; 2]);
    out
}

fn unicode(s: &str) -> Vec<u8> {
    let mut b = vec![b'X'];
    b.extend((s.len() as u32).to_le_bytes());
    b.extend(s.as_bytes());
    b
}

/// A pickled `{name: _rebuild_tensor_v2(storage "0", offset, (n,), (1,), False, None)}`.
fn one_tensor_pickle(name: &str, storage: &str, offset: u8, n: u8) -> Vec<u8> {
    let mut p = b"\x80\x02}(".to_vec();
    p.extend(unicode(name));
    p.extend(b"ctorch._utils\n_rebuild_tensor_v2\n((");
    p.extend(unicode("storage"));
    p.extend(format!("ctorch\n{storage}\n").as_bytes());
    p.extend(unicode("0"));
    p.extend(unicode("cpu"));
    p.extend([
        b'K', n, b't', b'Q', b'K', offset, b'K', n, 0x85, b'K', 1, 0x85, 0x89, b'N',
    ]);
    p.extend(b"tRu.");
    p
}

fn parse_archive(pickle: &[u8], data: &[u8]) -> std::result::Result<NamedTensors, String> {
    torch::parse(Arc::new(stored_zip(&[
        ("archive/data.pkl", pickle),
        ("archive/data/0", data),
    ])))
}

#[test]
fn hand_written_archives_read_and_bad_ones_are_named() {
    let data: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let t = parse_archive(&one_tensor_pickle("w", "FloatStorage", 1, 2), &data).unwrap();
    assert_eq!((t[0].0.as_str(), t[0].1.to_f32()), ("w", vec![2.0, 3.0]));
    let e = parse_archive(&one_tensor_pickle("w", "FloatStorage", 2, 2), &data).unwrap_err();
    assert!(
        e.contains("tensor w") && e.contains("past the end of storage"),
        "{e}"
    );
    let e = parse_archive(&one_tensor_pickle("w", "ComplexFloatStorage", 0, 1), &data).unwrap_err();
    assert!(e.contains("ComplexFloatStorage"), "{e}");
    let e = parse_archive(b"\x80\x02cos\nsystem\nq\x00.", &data).unwrap_err();
    assert!(e.contains("not hold a dict"), "{e}");
    // INST (0x69) and protocol 0's STRING are not part of a state dict.
    let e = parse_archive(b"\x80\x02i", &data).unwrap_err();
    assert!(e.contains("opcode 0x69"), "{e}");
    let e = parse_archive(b"\x80\x02h\x05.", &data).unwrap_err();
    assert!(e.contains("memo 5"), "{e}");
    let mut deep = b"\x80\x02)".to_vec();
    deep.extend([0x85; 100_000]);
    deep.push(b'.');
    let e = parse_archive(&deep, &data).unwrap_err();
    assert!(e.contains("nested deeper"), "{e}");
    let e = parse_archive(b"\x80\x02}K\x01K\x02s.", &data).unwrap_err();
    assert!(e.contains("not a string"), "{e}");
    let e = parse_archive(b"\x80\x02}(Q", &data).unwrap_err();
    assert!(e.contains("underflow"), "{e}");
    let e = torch::parse(Arc::new(stored_zip(&[("archive/x", b"")]))).unwrap_err();
    assert!(e.contains("no data.pkl"), "{e}");
}

#[test]
fn host_tensors_slice_stack_and_write() {
    let a = HostTensor::from_f32(vec![3, 2], &[1., 2., 3., 4., 5., 6.]).unwrap();
    assert!(HostTensor::from_f32(vec![4], &[1.]).is_err());
    let tail = a.narrow_rows(1, 2).unwrap();
    assert_eq!(tail.to_f32(), [3., 4., 5., 6.]);
    assert!(a.narrow_rows(2, 2).is_err());
    let both = HostTensor::concat_rows(&[tail, a.narrow_rows(0, 1).unwrap()]).unwrap();
    assert_eq!(
        (both.shape(), both.to_f32()),
        (&[3, 2][..], vec![3., 4., 5., 6., 1., 2.])
    );
    let b = HostTensor::from_f32(vec![2], &[1., 2.]).unwrap();
    assert!(HostTensor::concat_rows(&[a.clone(), b]).is_err());
    let bytes = to_safetensors_bytes([("a", &a), ("both", &both)]).unwrap();
    let back = by_name(parse_safetensors(Arc::new(bytes)).unwrap());
    assert_eq!(back["both"].to_f32(), both.to_f32());
    assert_eq!(back["a"].shape(), a.shape());
}
