//! Calibrator files are read no further than their header declares, from
//! regular files only, and their tensors' checksum is checked at load.

use crate::common;

use std::collections::HashMap;

use bertflow_calib::{fit, load, CalibError, CalibSpec, CalibratorMeta, FitOptions, METADATA_KEY};
use common::*;
use safetensors::tensor::SafeTensors;

fn saved(dir: &std::path::Path) -> std::path::PathBuf {
    let x = embeddings(300, 16, &[3], 1);
    let spec: CalibSpec = "whiten".parse().unwrap();
    let f = fit(&spec, x.view(), &mut FitOptions::new()).unwrap();
    let path = dir.join("c.safetensors");
    f.save(&path, &CalibratorMeta::new("m", "mean", 16, 300))
        .unwrap();
    path
}

fn format_error(path: &std::path::Path) -> String {
    match load(path) {
        Err(e @ CalibError::Format { .. }) => e.to_string(),
        other => panic!("{}: expected a format error, got {other:?}", path.display()),
    }
}

#[test]
fn special_files_are_refused_without_reading_them() {
    let e = format_error(std::path::Path::new("/dev/zero"));
    assert!(e.contains("not a regular file"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let e = format_error(&fifo);
    assert!(e.contains("not a regular file"), "{e}");
}

#[test]
fn a_header_declaring_more_or_fewer_bytes_than_the_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = saved(dir.path());
    let good = std::fs::read(&path).unwrap();
    // Truncated, extended, and a header length past the file.
    std::fs::write(&path, &good[..good.len() - 1]).unwrap();
    assert!(format_error(&path).contains("declares"));
    std::fs::write(&path, [good.as_slice(), b"x"].concat()).unwrap();
    assert!(format_error(&path).contains("declares"));
    let mut huge = good.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&path, &huge).unwrap();
    assert!(format_error(&path).contains("declares"));
}

#[test]
fn every_flipped_tensor_byte_is_refused_and_old_files_without_a_checksum_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = saved(dir.path());
    let good = std::fs::read(&path).unwrap();
    let header_len = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let data_at = 8 + header_len;
    let st = SafeTensors::deserialize(&good).unwrap();
    let (_, md) = SafeTensors::read_metadata(&good).unwrap();
    let header = md.metadata().as_ref().unwrap()[METADATA_KEY].clone();
    let mut json: serde_json::Value = serde_json::from_str(&header).unwrap();
    assert!(json["tensors_crc32"].is_string(), "{json}");
    // A byte in every 97 of the tensors' data.
    for at in (data_at..good.len()).step_by(97) {
        let mut bad = good.clone();
        bad[at] ^= 0x04;
        std::fs::write(&path, &bad).unwrap();
        let e = format_error(&path);
        assert!(e.contains("checksum"), "byte {at}: {e}");
    }

    // The same file as written before the checksum existed: loads.
    let views: Vec<_> = st.tensors();
    json.as_object_mut().unwrap().remove("tensors_crc32");
    let info = HashMap::from([(METADATA_KEY.to_string(), json.to_string())]);
    let old = safetensors::serialize(views, Some(info)).unwrap();
    std::fs::write(&path, &old).unwrap();
    load(&path).unwrap();
}

/// The calibrator at `path` rewritten with its header's JSON edited by `edit`.
fn with_header(path: &std::path::Path, edit: impl Fn(&mut serde_json::Value)) -> Vec<u8> {
    let good = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&good).unwrap();
    let (_, md) = SafeTensors::read_metadata(&good).unwrap();
    let mut json: serde_json::Value =
        serde_json::from_str(&md.metadata().as_ref().unwrap()[METADATA_KEY]).unwrap();
    edit(&mut json);
    let info = HashMap::from([(METADATA_KEY.to_string(), json.to_string())]);
    safetensors::serialize(st.tensors(), Some(info)).unwrap()
}

#[test]
fn unknown_or_misspelt_header_keys_are_errors_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = saved(dir.path());
    let bad = dir.path().join("bad.safetensors");
    let rename = |obj: &'static str, from: &'static str, to: &'static str| {
        with_header(&path, move |j| {
            let o = if obj.is_empty() { j } else { &mut j[obj] };
            let o = o.as_object_mut().unwrap();
            let v = o.remove(from).unwrap_or(serde_json::Value::Null);
            o.insert(to.into(), v);
        })
    };
    // tensors_crc32 -> tensors_crc33 would switch the checksum off.
    std::fs::write(&bad, rename("", "tensors_crc32", "tensors_crc33")).unwrap();
    let e = format_error(&bad);
    assert!(e.contains("unknown key \"tensors_crc33\""), "{e}");
    // quantizer -> quantizes would drop the quantizer stage.
    std::fs::write(&bad, rename("meta", "quantizer", "quantizes")).unwrap();
    let e = format_error(&bad);
    assert!(e.contains("unknown field `quantizes`"), "{e}");
    std::fs::write(&bad, rename("meta", "pooling", "poolign")).unwrap();
    let e = format_error(&bad);
    assert!(e.contains("poolign"), "{e}");
    // The optional keys of older files may be absent, or present as written
    // (null seed, absent external / sampled_from / weighting / warnings).
    let old = with_header(&path, |j| {
        let m = j["meta"].as_object_mut().unwrap();
        for k in [
            "external",
            "sampled_from",
            "weighting",
            "warnings",
            "quantizer",
        ] {
            m.remove(k);
        }
        m.insert("seed".into(), serde_json::Value::Null);
    });
    std::fs::write(&bad, old).unwrap();
    load(&bad).unwrap();
}
