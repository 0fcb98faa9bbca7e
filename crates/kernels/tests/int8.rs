//! Every int8 kernel this CPU can run, forced, against the plain-loop reference on
//! odd shapes (M, N not multiples of the 4 x 16 tile, K not a multiple of 4).
use bertflow_kernels::int8::{quantize_row, quantize_weights, reference_forward, QMAX_ACT};
use bertflow_kernels::{Act, Isa, QuantLinear};

/// Deterministic pseudo-random values in [-scale, scale) (xorshift).
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

const SHAPES: [(usize, usize, usize); 9] = [
    (1, 1, 1),
    (1, 3, 17),
    (3, 5, 15),
    (4, 4, 16),
    (5, 7, 33),
    (7, 13, 31),
    (9, 384, 49),
    (13, 385, 257),
    (33, 1537, 18),
];

#[test]
fn every_available_kernel_matches_the_reference_bit_for_bit() {
    let paths = Isa::available_all();
    assert!(paths.contains(&Isa::Scalar));
    eprintln!("kernels tested: {paths:?}");
    for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
        let w = values(n * k, 1 + i as u64, 0.5);
        let b = values(n, 100 + i as u64, 0.1);
        // Rows with an offset, so the zero point is not in the middle.
        let x: Vec<f32> = values(m * k, 200 + i as u64, 3.0)
            .iter()
            .enumerate()
            .map(|(j, v)| v + (j / k) as f32 * 0.7)
            .collect();
        let res = values(m * n, 300 + i as u64, 1.0);
        let lin = QuantLinear::new(&w, &b, n, k).unwrap();
        let (q, s) = quantize_weights(&w, n, k);
        for act in [Act::None, Act::GeluErf, Act::Relu] {
            for residual in [None, Some(res.as_slice())] {
                let want = reference_forward(&q, &s, &b, n, k, &x, m, residual, act);
                for &isa in &paths {
                    let mut got = vec![f32::NAN; m * n];
                    lin.forward(isa, &x, m, residual, act, &mut got).unwrap();
                    assert_eq!(
                        got,
                        want,
                        "{isa:?} m={m} k={k} n={n} {act:?} residual={}",
                        residual.is_some()
                    );
                }
            }
        }
    }
}

#[test]
fn the_int8_product_is_close_to_the_float_product() {
    let (m, k, n) = (6, 385, 21);
    let w = values(n * k, 7, 0.2);
    let b = values(n, 8, 0.1);
    let x = values(m * k, 9, 2.0);
    let lin = QuantLinear::new(&w, &b, n, k).unwrap();
    let mut got = vec![0f32; m * n];
    lin.forward(Isa::best(), &x, m, None, Act::None, &mut got)
        .unwrap();
    let mut err2 = 0f64;
    let mut ref2 = 0f64;
    for r in 0..m {
        for c in 0..n {
            let y: f32 = (0..k).map(|j| x[r * k + j] * w[c * k + j]).sum::<f32>() + b[c];
            err2 += ((got[r * n + c] - y) as f64).powi(2);
            ref2 += (y as f64).powi(2);
        }
    }
    let rel = (err2 / ref2).sqrt();
    // 7-bit activations and 8-bit weights: about 1% relative error for random data.
    assert!(rel < 0.02, "relative error {rel}");
    assert!(
        rel > 1e-5,
        "suspiciously exact ({rel}): is it quantising at all?"
    );
}

#[test]
fn activation_codes_stay_within_seven_bits_and_round_trip() {
    let x = [-3.0f32, -1.0, 0.0, 0.5, 2.0, 4.35];
    let mut q = [255u8; 8];
    let (s, z) = quantize_row(&x, &mut q);
    assert!(q.iter().all(|&v| v as i32 <= QMAX_ACT));
    assert_eq!(&q[6..], &[0, 0], "padding is zeroed");
    assert_eq!(q[0], 0);
    assert_eq!(q[5] as i32, QMAX_ACT);
    for (&v, &c) in x.iter().zip(&q) {
        let back = s * (c as i32 - z) as f32;
        assert!((back - v).abs() <= s * 0.5 + 1e-6, "{v} -> {c} -> {back}");
    }
    // An all-positive row still represents 0 exactly (the range includes it).
    let (s2, z2) = quantize_row(&[1.0, 2.0], &mut q);
    assert_eq!(z2, 0);
    assert_eq!(q[1] as i32, QMAX_ACT);
    assert!((s2 - 2.0 / 127.0).abs() < 1e-7);
}

#[test]
fn weight_codes_use_the_symmetric_range() {
    let (q, s) = quantize_weights(&[0.5, -1.0, 0.25, 0.0, 0.0, 0.0], 2, 3);
    assert_eq!(&q[..3], &[64, -127, 32]);
    assert_eq!(&q[3..], &[0, 0, 0]);
    assert!((s[0] - 1.0 / 127.0).abs() < 1e-9);
    assert_eq!(
        s[1], 1.0,
        "an all-zero channel gets scale 1, not a division by 0"
    );
}

#[test]
fn bad_shapes_are_errors() {
    assert!(QuantLinear::new(&[1.0; 6], &[0.0; 2], 2, 4).is_err());
    assert!(QuantLinear::new(&[], &[], 0, 4).is_err());
    let lin = QuantLinear::new(&[1.0; 6], &[0.0; 2], 2, 3).unwrap();
    let mut out = vec![0f32; 4];
    assert!(lin
        .forward(Isa::Scalar, &[1.0; 5], 2, None, Act::None, &mut out)
        .is_err());
    assert!(lin
        .forward(
            Isa::Scalar,
            &[1.0; 6],
            2,
            Some(&[0.0; 3]),
            Act::None,
            &mut out
        )
        .is_err());
    lin.forward(Isa::Scalar, &[1.0; 6], 2, None, Act::None, &mut out)
        .unwrap();
    assert_eq!(out, vec![3.0; 4]);
}

#[test]
fn unavailable_kernels_are_errors_not_crashes() {
    let lin = QuantLinear::new(&[1.0; 6], &[0.0; 2], 2, 3).unwrap();
    let mut out = vec![0f32; 4];
    for isa in Isa::ALL {
        let r = lin.forward(isa, &[1.0; 6], 2, None, Act::None, &mut out);
        assert_eq!(r.is_ok(), isa.available(), "{isa:?}");
    }
}
