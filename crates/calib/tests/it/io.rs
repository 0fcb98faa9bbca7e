//! Saving and loading calibrator files.

use crate::common;

use std::collections::HashMap;

use bertflow_calib::{
    check_compatible, fit, load, CalibError, CalibSpec, Calibrator, CalibratorMeta, FitOptions,
    Fitted, WeightingMeta, FORMAT_VERSION, METADATA_KEY, WEIGHTING_TENSOR,
};
use common::*;
use ndarray::Array2;
use safetensors::tensor::{SafeTensors, TensorView};

const SPECS: [&str; 14] = [
    "none",
    "sn",
    "whiten",
    "whiten:k=5",
    "natsv:k=2",
    "sn+natsv:k=2",
    "flow:levels=2,steps=2,width=8,epochs=2",
    "flow:levels=2,steps=2,width=8,epochs=2,coupling=affine,seed=7",
    "flow:levels=2,steps=2,width=8,epochs=2,permutation=lu",
    "softwhiten:alpha=0.5,shrink=0.25,drop=2",
    "softwhiten:alpha=0.6,shrink=0,blend=0.5",
    "auto",
    "pca:k=5",
    "pca:centre=true",
];

fn data() -> Array2<f32> {
    embeddings(300, 16, &[3], 1)
}

fn fitted(spec: &str, x: &Array2<f32>) -> Fitted {
    let spec: CalibSpec = spec.parse().unwrap();
    fit(&spec, x.view(), &mut FitOptions::new()).unwrap()
}

fn meta(x: &Array2<f32>) -> CalibratorMeta {
    CalibratorMeta::new(
        "sentence-transformers/all-MiniLM-L6-v2",
        "mean",
        x.ncols(),
        x.nrows(),
    )
    .with_seed(42)
}

#[test]
fn round_trip_gives_bit_identical_transforms() {
    let x = data();
    let dir = tempfile::tempdir().unwrap();
    for spec in SPECS {
        let f = fitted(spec, &x);
        let path = dir.path().join("c.safetensors");
        f.save(&path, &meta(&x)).unwrap();
        let (g, m) = load(&path).unwrap();
        assert_eq!(m, meta(&x));
        assert_eq!(m.format_version, FORMAT_VERSION);
        assert_eq!(g.kind(), f.kind());
        assert_eq!(g.spec(), f.spec());
        assert_eq!(g.spec(), spec.parse::<CalibSpec>().unwrap(), "{spec}");
        assert_eq!(g.describe(), f.describe());
        let a = f.transform(x.view()).unwrap();
        let b = g.transform(x.view()).unwrap();
        assert_eq!(a.dim(), b.dim());
        assert!(
            a.iter()
                .zip(b.iter())
                .all(|(p, q)| p.to_bits() == q.to_bits()),
            "{spec}: transform differs after reload"
        );
        // the header names the kind
        let bytes = std::fs::read(&path).unwrap();
        let (_, md) = SafeTensors::read_metadata(&bytes).unwrap();
        let header = &md.metadata().as_ref().unwrap()[METADATA_KEY];
        let json: serde_json::Value = serde_json::from_str(header).unwrap();
        assert_eq!(json["calibrator"]["kind"], f.kind(), "{header}");
        assert_eq!(json["meta"]["pooling"], "mean");
        assert_eq!(json["meta"]["input_dim"], 16);
    }
}

#[test]
fn same_seed_gives_byte_identical_files() {
    let x = data();
    for spec in SPECS {
        let a = fitted(spec, &x).to_bytes(&meta(&x)).unwrap();
        let b = fitted(spec, &x).to_bytes(&meta(&x)).unwrap();
        assert!(a == b, "{spec}: two fits give different files");
    }
    // and a different seed gives a different flow
    let a = fitted("flow:levels=2,steps=2,width=8,seed=1", &x);
    let b = fitted("flow:levels=2,steps=2,width=8,seed=2", &x);
    assert_ne!(
        a.transform(x.view()).unwrap(),
        b.transform(x.view()).unwrap()
    );
}

/// Rewrites a calibrator file with some tensors changed.
fn rewrite<'a>(bytes: &'a [u8], edit: impl Fn(&mut Vec<(String, TensorView<'a>)>)) -> Vec<u8> {
    let st = SafeTensors::deserialize(bytes).unwrap();
    let (_, md) = SafeTensors::read_metadata(bytes).unwrap();
    let info: HashMap<String, String> = md.metadata().clone().unwrap();
    let mut tensors: Vec<(String, TensorView<'a>)> = st.tensors();
    edit(&mut tensors);
    safetensors::serialize(tensors, Some(info)).unwrap()
}

fn load_bytes(bytes: &[u8]) -> Result<(Fitted, CalibratorMeta), CalibError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.safetensors");
    std::fs::write(&path, bytes).unwrap();
    load(&path)
}

fn format_reason(r: Result<(Fitted, CalibratorMeta), CalibError>) -> String {
    match r {
        Err(CalibError::Format { reason, .. }) => reason,
        Err(e) => panic!("expected a format error, got {e}"),
        Ok(_) => panic!("expected a format error, got a calibrator"),
    }
}

#[test]
fn damaged_files_give_clear_errors() {
    let x = data();
    for spec in ["whiten", "flow:levels=2,steps=2,width=8"] {
        let bytes = fitted(spec, &x).to_bytes(&meta(&x)).unwrap();
        assert!(load_bytes(&bytes).is_ok());

        // truncated anywhere
        for cut in [0, 5, 8, 100, bytes.len() / 2, bytes.len() - 1] {
            let reason = format_reason(load_bytes(&bytes[..cut]));
            assert!(
                reason.contains("damaged or truncated"),
                "{spec} cut {cut}: {reason}"
            );
        }
        // garbage
        let reason = format_reason(load_bytes(b"definitely not a safetensors file"));
        assert!(reason.contains("safetensors"), "{reason}");

        // a missing tensor
        let name = if spec == "whiten" {
            "w"
        } else {
            "level1.step0.coupling.w2"
        };
        let missing = rewrite(&bytes, |t| t.retain(|(n, _)| n != name));
        let reason = format_reason(load_bytes(&missing));
        assert!(
            reason.contains(&format!("missing tensor \"{name}\"")),
            "{reason}"
        );

        // a tensor of the wrong shape
        let wrong = rewrite(&bytes, |t| {
            for (n, v) in t.iter_mut() {
                if n == name {
                    let data = v.data();
                    let len: usize = v.shape().iter().product();
                    *v = TensorView::new(v.dtype(), vec![len], data).unwrap();
                }
            }
        });
        let reason = format_reason(load_bytes(&wrong));
        assert!(reason.contains("has shape"), "{reason}");

        // an unexpected extra tensor
        let extra_data = [0u8; 8];
        let extra = rewrite(&bytes, |t| {
            t.push((
                "stray".to_string(),
                TensorView::new(safetensors::Dtype::F32, vec![2], &extra_data).unwrap(),
            ))
        });
        let reason = format_reason(load_bytes(&extra));
        assert!(
            reason.contains("unexpected tensors [\"stray\"]"),
            "{reason}"
        );
    }

    // a safetensors file that is not a calibrator
    let plain = safetensors::serialize(
        vec![(
            "x".to_string(),
            TensorView::new(safetensors::Dtype::F32, vec![1], &[0u8; 4]).unwrap(),
        )],
        None,
    )
    .unwrap();
    assert!(format_reason(load_bytes(&plain)).contains("not a bertflow calibrator"));

    // non-finite parameters are refused
    let bytes = fitted("sn", &x).to_bytes(&meta(&x)).unwrap();
    let nan = f64::NAN.to_le_bytes().repeat(16);
    let poisoned = rewrite(&bytes, |t| {
        for (n, v) in t.iter_mut() {
            if n == "mean" {
                *v = TensorView::new(v.dtype(), v.shape().to_vec(), &nan).unwrap();
            }
        }
    });
    assert!(format_reason(load_bytes(&poisoned)).contains("non-finite"));

    // the fixed parts of an LU convolution are validated
    let bytes = fitted("flow:levels=1,steps=1,width=4,permutation=lu", &x)
        .to_bytes(&meta(&x))
        .unwrap();
    assert!(load_bytes(&bytes).is_ok());
    let dup: Vec<u8> = [0.0f32, 0.0]
        .iter()
        .chain([2.0f32; 14].iter())
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let bad_perm = rewrite(&bytes, |t| {
        for (n, v) in t.iter_mut() {
            if n == "level0.step0.invconv.perm" {
                *v = TensorView::new(v.dtype(), v.shape().to_vec(), &dup).unwrap();
            }
        }
    });
    assert!(format_reason(load_bytes(&bad_perm)).contains("not a permutation"));

    // a newer format version is refused
    let newer = {
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let (_, md) = SafeTensors::read_metadata(&bytes).unwrap();
        let mut info = md.metadata().clone().unwrap();
        let h = info[METADATA_KEY].replace("\"format_version\":1,", "\"format_version\":99,");
        assert_ne!(h, info[METADATA_KEY]);
        info.insert(METADATA_KEY.to_string(), h);
        safetensors::serialize(st.tensors(), Some(info)).unwrap()
    };
    assert!(format_reason(load_bytes(&newer)).contains("format version 99"));

    // a missing file is an I/O error
    assert!(matches!(
        load("/nonexistent/dir/c.safetensors"),
        Err(CalibError::Io { .. })
    ));
}

#[test]
fn save_checks_the_metadata_dimension() {
    let x = data();
    let f = fitted("sn", &x);
    let mut m = meta(&x);
    m.input_dim = 17;
    assert!(matches!(f.to_bytes(&m), Err(CalibError::Meta(_))));
}

#[test]
fn compatibility_check() {
    let m = CalibratorMeta::new("bert-base", "mean", 768, 1000);
    assert_eq!(
        check_compatible(&m, "bert-base", "mean", 768, false).unwrap(),
        Vec::<String>::new()
    );
    // dimension: always an error
    for allow in [false, true] {
        let e = check_compatible(&m, "bert-base", "mean", 384, allow).unwrap_err();
        assert!(e.to_string().contains("768"), "{e}");
    }
    // model / pooling: error unless allowed
    let e = check_compatible(&m, "roberta", "cls", 768, false).unwrap_err();
    assert!(
        e.to_string().contains("roberta") && e.to_string().contains("cls"),
        "{e}"
    );
    let warnings = check_compatible(&m, "roberta", "cls", 768, true).unwrap();
    assert_eq!(warnings.len(), 2);
    assert!(check_compatible(&m, "bert-base", "cls", 768, false).is_err());
}

#[test]
fn header_only_calibrators_refuse_to_transform() {
    let x = data();
    for spec in SPECS {
        let f = fitted(spec, &x);
        let json = serde_json::to_string(&f).unwrap();
        assert!(
            json.starts_with(&format!("{{\"kind\":\"{}\"", f.kind())),
            "{json}"
        );
        let g: Fitted = serde_json::from_str(&json).unwrap();
        assert_eq!(g.spec(), f.spec());
        if spec == "none" {
            assert!(g.transform(x.view()).is_ok());
        } else {
            assert!(g.transform(x.view()).is_err(), "{spec}");
        }
    }
}

#[test]
fn from_bytes_equals_load_of_the_same_bytes() {
    let x = data();
    for spec in SPECS {
        let f = fitted(spec, &x);
        let bytes = f.to_bytes(&meta(&x)).unwrap();
        let (a, ma) = Fitted::from_bytes(&bytes).unwrap();
        let (b, mb) = load_bytes(&bytes).unwrap();
        assert_eq!(ma, mb, "{spec}");
        assert_eq!(a.spec(), f.spec(), "{spec}");
        let want = f.transform(x.view()).unwrap();
        assert_eq!(a.transform(x.view()).unwrap(), want, "{spec}");
        assert_eq!(b.transform(x.view()).unwrap(), want, "{spec}");
        // Truncated bytes are an error naming the damage, never a panic.
        for cut in [0, 8, bytes.len() / 2, bytes.len() - 1] {
            assert!(
                matches!(
                    Fitted::from_bytes(&bytes[..cut]),
                    Err(CalibError::Format { .. })
                ),
                "{spec}: {cut} bytes"
            );
        }
    }
}

#[test]
fn weighting_round_trips_with_its_weights() {
    let x = data();
    let f = fitted("whiten", &x);
    let mut m = meta(&x);
    m.weighting = Some(WeightingMeta {
        spec: "usif".into(),
        counts_from: "fit corpus".into(),
        key: "0123456789abcdef".into(),
        unseen: 2.5,
        usif_a: Some(1e-4),
        weights: vec![0.0, 1.0, 0.25, 2.5, 1.5],
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    f.save(&path, &m).unwrap();
    let (_, back) = load(&path).unwrap();
    assert_eq!(back, m);
    assert_eq!(
        back.weighting.as_ref().unwrap().weights,
        vec![0.0, 1.0, 0.25, 2.5, 1.5]
    );
    // Files without a weighting have no weights tensor and read back as None.
    f.save(&path, &meta(&x)).unwrap();
    assert_eq!(load(&path).unwrap().1.weighting, None);
    // A weighting whose weights tensor is missing, or negative weights, are errors.
    let mut bad = m.clone();
    bad.weighting.as_mut().unwrap().weights = vec![1.0, -1.0];
    assert!(f
        .save(&path, &bad)
        .unwrap_err()
        .to_string()
        .contains("non-negative"));
    f.save(&path, &m).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let stripped = rewrite(&bytes, |t| t.retain(|(n, _)| n != WEIGHTING_TENSOR));
    let reason = format_reason(load_bytes(&stripped));
    assert!(reason.contains(WEIGHTING_TENSOR), "{reason}");
}

#[test]
fn sampled_from_is_recorded_and_optional() {
    let x = data();
    let f = fitted("flow:levels=2,steps=2,width=8,epochs=2", &x);
    let header = |bytes: &[u8]| -> serde_json::Value {
        let (_, md) = SafeTensors::read_metadata(bytes).unwrap();
        serde_json::from_str(&md.metadata().as_ref().unwrap()[METADATA_KEY]).unwrap()
    };
    // A flow fitted on 300 rows sampled out of 1,000,000.
    let sampled = meta(&x).with_sampled_from(1_000_000);
    let bytes = f.to_bytes(&sampled).unwrap();
    let (_, m) = Fitted::from_bytes(&bytes).unwrap();
    assert_eq!(m.sampled_from, Some(1_000_000));
    assert_eq!(m.fit_corpus_size, 300);
    assert_eq!(header(&bytes)["meta"]["sampled_from"], 1_000_000);
    // Without a sample the key is left out, so files read as before.
    let bytes = f.to_bytes(&meta(&x)).unwrap();
    assert!(header(&bytes)["meta"].get("sampled_from").is_none());
    let (_, m) = Fitted::from_bytes(&bytes).unwrap();
    assert_eq!(m.sampled_from, None);
}
