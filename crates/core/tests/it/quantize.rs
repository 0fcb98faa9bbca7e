//! Core's compact outputs: code similarities (through the kernels) agree
//! with the cosines `eval` scores, the `.npy` bytes, and errors.

use bertflow_core::quantize::{
    scoring_vectors, similarity, Codes, Output, QuantKind, QuantSpec, Quantizer,
};
use ndarray::Array2;

fn data(n: usize, d: usize) -> Array2<f32> {
    let mut s = 0x1234_5678_9abc_def1u64;
    Array2::from_shape_fn((n, d), |(_, j)| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.45) as f32 * (1.0 + j as f32 * 0.1)
    })
}

fn cos(a: ndarray::ArrayView1<f32>, b: ndarray::ArrayView1<f32>) -> f64 {
    let d = |u: &ndarray::ArrayView1<f32>, v: &ndarray::ArrayView1<f32>| {
        u.iter()
            .zip(v)
            .map(|(p, q)| f64::from(*p) * f64::from(*q))
            .sum::<f64>()
    };
    d(&a, &b) / (d(&a, &a) * d(&b, &b)).sqrt()
}

#[test]
fn code_similarities_are_the_cosines_eval_scores() {
    let x = data(60, 70);
    for spec in [
        "binary",
        "ubinary:itq=true,iters=5",
        "int8",
        "uint8",
        "int8:ranges=dim",
    ] {
        let q = Quantizer::fit(&spec.parse::<QuantSpec>().unwrap(), x.view()).unwrap();
        let a = q.quantize(x.slice(ndarray::s![..30, ..])).unwrap();
        let b = q.quantize(x.slice(ndarray::s![30.., ..])).unwrap();
        let sims = similarity(&q, &a, &b).unwrap();
        let v = scoring_vectors(&q, x.view()).unwrap();
        for (i, sim) in sims.iter().enumerate() {
            let c = cos(v.row(i), v.row(30 + i));
            assert!((sim - c).abs() < 1e-6, "{spec} row {i}: {sim} vs {c}");
        }
        if q.spec.kind.is_bits() {
            // 1 - 2 h / d with h counted bit by bit.
            let h: u32 = (0..70)
                .filter(|&j| {
                    let bit = |c: &Codes| c.bytes[[0, j / 8]] >> (7 - j % 8) & 1;
                    bit(&a) != bit(&b)
                })
                .count() as u32;
            assert!((sims[0] - (1.0 - 2.0 * f64::from(h) / 70.0)).abs() < 1e-12);
        }
    }
}

#[test]
fn npy_bytes_and_bad_codes() {
    let x = data(4, 10);
    let q = Quantizer::fit(&"binary".parse().unwrap(), x.view()).unwrap();
    let out = Output::from_codes(q.quantize(x.view()).unwrap());
    assert_eq!(
        (out.rows(), out.dim(), out.bytes_per_row(), out.kind()),
        (4, 10, 2, "binary")
    );
    let npy = out.npy_bytes();
    let len = 10 + u16::from_le_bytes([npy[8], npy[9]]) as usize;
    let header = String::from_utf8_lossy(&npy[10..len]);
    assert!(
        header.contains("'descr': '|i1'") && header.contains("(4, 2)"),
        "{header}"
    );
    assert_eq!((len % 64, npy.len()), (0, len + 8));
    let other = Codes::new(QuantKind::Binary, 9, Array2::zeros((4, 2))).unwrap();
    let e = similarity(&q, &other, &other).unwrap_err().to_string();
    assert!(e.contains("given to a binary quantizer of 10"), "{e}");
    let short = Codes::new(QuantKind::Binary, 10, Array2::zeros((3, 2))).unwrap();
    let full = q.quantize(x.view()).unwrap();
    assert!(similarity(&q, &full, &short).is_err());
}

#[test]
fn pq_codes_are_uint8_scored_on_their_reconstructions() {
    let x = data(300, 12);
    let q = Quantizer::fit(&"pq:m=3,iters=2".parse::<QuantSpec>().unwrap(), x.view()).unwrap();
    let a = q.quantize(x.slice(ndarray::s![..150, ..])).unwrap();
    let b = q.quantize(x.slice(ndarray::s![150.., ..])).unwrap();
    let sims = similarity(&q, &a, &b).unwrap();
    let v = scoring_vectors(&q, x.view()).unwrap();
    let (ra, rb) = (q.dequantize(&a).unwrap(), q.dequantize(&b).unwrap());
    for (i, sim) in sims.iter().enumerate() {
        assert!(
            (sim - cos(v.row(i), v.row(150 + i))).abs() < 1e-6,
            "row {i}"
        );
        assert!((sim - cos(ra.row(i), rb.row(i))).abs() < 1e-6, "row {i}");
    }
    let out = Output::from_codes(a.clone());
    assert_eq!(
        (out.rows(), out.dim(), out.bytes_per_row(), out.kind()),
        (150, 3, 3, "uint8")
    );
    assert_eq!(out, Output::U8(a.bytes.clone()));
    let other = Codes::new(QuantKind::Pq { m: 4 }, 12, Array2::zeros((150, 4))).unwrap();
    assert!(similarity(&q, &a, &other).is_err());
}
