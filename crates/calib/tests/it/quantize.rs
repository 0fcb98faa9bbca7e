//! Quantizers: bit order, int8/uint8 ranges, ITQ's objective, files that
//! end in a quantizer stage, and bad input.

use crate::common;

use bertflow_calib::{
    fit, load, CalibSpec, Calibrator, CalibratorMeta, Codes, FitOptions, Fitted, QuantKind,
    QuantSpec, Quantizer, FORMAT_VERSION, QUANTIZED_FORMAT_VERSION,
};
use common::*;
use ndarray::{array, Array2};

fn quantizer(spec: &str, x: &Array2<f32>) -> Quantizer {
    Quantizer::fit(&spec.parse().unwrap(), x.view()).unwrap()
}

fn fitted(spec: &str, x: &Array2<f32>) -> Fitted {
    let spec: CalibSpec = spec.parse().unwrap();
    fit(&spec, x.view(), &mut FitOptions::new()).unwrap()
}

#[test]
fn bits_are_packed_msb_first_as_numpy_packbits() {
    // numpy.packbits([1,0,0,0,0,0,0,1, 1,0]) == [129, 128]
    let x = array![[1.0f32, -1.0, 0.0, -2.0, -1.0, -1.0, -1.0, 3.0, 0.5, -0.5]];
    let u = quantizer("ubinary", &x).quantize(x.view()).unwrap();
    assert_eq!((u.kind, u.dim), (QuantKind::Ubinary, 10));
    assert_eq!(u.bytes, array![[129u8, 128]]);
    // sentence-transformers' binary: packbits - 128 as int8
    let b = quantizer("binary", &x).quantize(x.view()).unwrap();
    assert_eq!(b.as_i8(), array![[1i8, 0]]);
    assert_eq!(quantizer("binary", &x).code_bytes(), 2);
}

#[test]
fn int8_global_scale_codes_and_uint8_offset() {
    let x = array![[0.5f32, -1.0, 0.25], [1.27, 0.0, -0.635]];
    let q = quantizer("int8", &x);
    assert!((q.scales()[0] - 1.27 / 127.0).abs() < 1e-9);
    let c = q.quantize(x.view()).unwrap();
    assert_eq!(c.as_i8(), array![[50i8, -100, 25], [127, 0, -64]]);
    let u = quantizer("uint8", &x).quantize(x.view()).unwrap();
    assert_eq!(u.bytes, array![[178u8, 28, 153], [255, 128, 64]]);
    // values beyond the fit range are clamped
    let far = array![[10.0f32, -10.0, 0.0]];
    assert_eq!(
        q.quantize(far.view()).unwrap().as_i8(),
        array![[127i8, -127, 0]]
    );
    let back = q.dequantize(&c).unwrap();
    for (a, b) in back.iter().zip(x.iter()) {
        assert!((a - b).abs() <= 0.5 * 1.27 / 127.0 + 1e-6);
    }
}

#[test]
fn int8_codes_compared_as_integers_keep_cosines() {
    let x = embeddings(300, 32, &[], 3);
    let c = quantizer("int8", &x).quantize(x.view()).unwrap().as_i8();
    let cos = |a: &[f64], b: &[f64]| {
        let d: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        d / (a.iter().map(|v| v * v).sum::<f64>() * b.iter().map(|v| v * v).sum::<f64>()).sqrt()
    };
    for i in 0..20 {
        let (a, b) = (x.row(i).mapv(f64::from), x.row(i + 1).mapv(f64::from));
        let (qa, qb) = (c.row(i).mapv(f64::from), c.row(i + 1).mapv(f64::from));
        let (f, q) = (
            cos(a.as_slice().unwrap(), b.as_slice().unwrap()),
            cos(qa.as_slice().unwrap(), qb.as_slice().unwrap()),
        );
        assert!((f - q).abs() < 0.02, "row {i}: {f} vs {q}");
    }
}

#[test]
fn per_dimension_ranges_span_the_fit_set() {
    let x = array![[0.0f32, 10.0], [1.0, 20.0], [0.5, 15.0], [0.2, 10.0]];
    let q = quantizer("int8:ranges=dim", &x);
    let c = q.quantize(x.view()).unwrap().as_i8();
    assert_eq!(c.column(0).to_vec(), vec![-128i8, 127, 0, -77]);
    assert_eq!(c.column(1).to_vec(), vec![-128i8, 127, 0, -128]);
    let u = quantizer("uint8:ranges=dim", &x)
        .quantize(x.view())
        .unwrap();
    assert_eq!(u.bytes.column(0).to_vec(), vec![0u8, 255, 128, 51]);
    let back = q.dequantize(&q.quantize(x.view()).unwrap()).unwrap();
    for (j, step) in [1.0f32 / 255.0, 10.0 / 255.0].into_iter().enumerate() {
        for i in 0..4 {
            assert!((back[[i, j]] - x[[i, j]]).abs() <= step / 2.0 + 1e-5);
        }
    }
}

#[test]
fn itq_objective_never_increases_and_the_rotation_is_orthogonal() {
    let x = embeddings(600, 16, &[], 9);
    let y = fitted("pca", &x).transform(x.view()).unwrap();
    let q = quantizer("binary:itq=true,iters=30", &y);
    let obj = q.objective();
    assert_eq!(obj.len(), 31);
    for w in obj.windows(2) {
        assert!(
            w[1] <= w[0] * (1.0 + 1e-12),
            "objective rose: {} -> {}",
            w[0],
            w[1]
        );
    }
    assert!(obj[30] < obj[0], "ITQ lowered nothing: {obj:?}");
    let r = q.rotation().unwrap();
    let eye = r.t().dot(r);
    assert!(max_abs_diff(&eye, &Array2::eye(16)) < 1e-9);
    // The codes are the signs of the rotated rows.
    let z = y.mapv(f64::from).dot(r);
    let c = q.quantize(y.view()).unwrap();
    let signed = q.dequantize(&c).unwrap();
    for (s, v) in signed.iter().zip(z.iter()) {
        assert_eq!(*s > 0.0, *v > 0.0);
    }
}

#[test]
fn a_file_ending_in_a_quantizer_round_trips() {
    let x = embeddings(400, 12, &[], 4);
    let dir = tempfile::tempdir().unwrap();
    for (kind, qspec) in [
        ("pca:k=8", "binary:itq=true,iters=10"),
        ("pca", "ubinary"),
        ("whiten", "int8"),
        ("pca:k=5", "uint8:ranges=dim"),
    ] {
        let f = fitted(kind, &x);
        let y = f.transform(x.view()).unwrap();
        let q = quantizer(qspec, &y);
        let mut meta = CalibratorMeta::new("m", "mean", 12, 400);
        meta.quantizer = Some(q.clone());
        let path = dir.path().join("q.safetensors");
        f.save(&path, &meta).unwrap();
        let (g, m) = load(&path).unwrap();
        assert_eq!(m.format_version, QUANTIZED_FORMAT_VERSION);
        let back = m.quantizer.expect("the stage is kept");
        assert_eq!(back.spec.to_string(), qspec);
        let codes = back
            .quantize(g.transform(x.view()).unwrap().view())
            .unwrap();
        assert_eq!(codes, q.quantize(y.view()).unwrap(), "{kind} {qspec}");
    }
    // A file without a stage keeps the old layout and version.
    let f = fitted("pca", &x);
    let path = dir.path().join("plain.safetensors");
    f.save(&path, &CalibratorMeta::new("m", "mean", 12, 400))
        .unwrap();
    let (_, m) = load(&path).unwrap();
    assert_eq!(
        (m.format_version, m.quantizer.is_none()),
        (FORMAT_VERSION, true)
    );
}

#[test]
fn a_quantizer_of_another_dimension_is_refused() {
    let x = embeddings(100, 12, &[], 5);
    let f = fitted("pca:k=4", &x);
    let mut meta = CalibratorMeta::new("m", "mean", 12, 100);
    meta.quantizer = Some(quantizer("int8", &x)); // fitted on 12 dims, not 4
    let e = f.to_bytes(&meta).unwrap_err().to_string();
    assert!(
        e.contains("the quantizer takes 12 dimensions, the calibrator gives 4"),
        "{e}"
    );
    let q = quantizer("binary", &x);
    let e = q
        .quantize(x.slice(ndarray::s![.., ..4]).view())
        .unwrap_err();
    assert!(e.to_string().contains("expects 12 columns, got 4"), "{e}");
}

#[test]
fn codes_of_the_wrong_width_or_kind_are_refused() {
    let e = Codes::new(QuantKind::Binary, 384, Array2::zeros((2, 47))).unwrap_err();
    assert!(
        e.to_string()
            .contains("have 48 bytes per row, these have 47"),
        "{e}"
    );
    assert!(Codes::new(QuantKind::Int8, 10, Array2::zeros((2, 10))).is_ok());
    let x = embeddings(50, 10, &[], 6);
    let q = quantizer("int8", &x);
    let other = Codes::new(QuantKind::Int8, 9, Array2::zeros((1, 9))).unwrap();
    assert!(q.dequantize(&other).is_err());
    let bits = Codes::new(QuantKind::Ubinary, 10, Array2::zeros((1, 2))).unwrap();
    assert!(q.check_codes(&bits).is_err());
}

#[test]
fn specs_parse_display_and_refuse_nonsense() {
    for s in [
        "int8",
        "uint8:ranges=dim",
        "binary",
        "ubinary:itq=true",
        "binary:itq=true,iters=7",
    ] {
        assert_eq!(s.parse::<QuantSpec>().unwrap().to_string(), s);
    }
    for (bad, words) in [
        ("int4", "unknown quantizer"),
        ("int8:itq=true", "valid options for int8: ranges"),
        ("binary:ranges=dim", "valid options for binary: itq, iters"),
        ("binary:iters=5", "iters applies with itq=true"),
        ("binary:itq=yes", "valid values: false, true"),
        ("int8:ranges=dim,ranges=global", "given twice"),
        ("binary:itq=true,iters=0", "1..=10000"),
    ] {
        let e = bad.parse::<QuantSpec>().unwrap_err().to_string();
        assert!(e.contains(words), "{bad}: {e}");
    }
    let zeros = Array2::<f32>::zeros((3, 4));
    assert!(Quantizer::fit(&"int8".parse().unwrap(), zeros.view()).is_err());
}
