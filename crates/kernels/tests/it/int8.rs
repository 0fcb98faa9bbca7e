//! Every int8 kernel this CPU can run, forced, against the plain-loop reference with
//! its own activation code range, on odd shapes (M, N not multiples of the 6 x 64
//! tile, K not a multiple of 4); the AVX-VNNI tile also with EVEX `vpdpbusd`, so that
//! it runs on AVX-512 CPUs without AVX-VNNI.
use bertflow_kernels::int8::RowLanes;
use bertflow_kernels::int8::{
    quantize_row, quantize_weights, reference_forward, KernelError, QMAX_7BIT, QMAX_8BIT,
};
use bertflow_kernels::{Act, Isa, QuantInput, QuantLinear};

use crate::common;
use common::values;

const SHAPES: [(usize, usize, usize); 11] = [
    (1, 1, 1),
    (1, 3, 17),
    (3, 5, 15),
    (4, 4, 16),
    (5, 7, 33),
    (7, 13, 31),
    (9, 384, 49),
    (13, 385, 257),
    (33, 1537, 18),
    (17, 130, 129),
    (6, 8, 64),
];

/// One odd-shape case: a layer and its inputs.
struct Case {
    m: usize,
    k: usize,
    n: usize,
    w: Vec<f32>,
    b: Vec<f32>,
    x: Vec<f32>,
    res: Vec<f32>,
}

/// Every shape of [`SHAPES`] with its deterministic data.
fn cases() -> impl Iterator<Item = Case> {
    SHAPES.iter().enumerate().map(|(i, &(m, k, n))| Case {
        m,
        k,
        n,
        w: values(n * k, 1 + i as u64, 0.5),
        b: values(n, 100 + i as u64, 0.1),
        // Rows with an offset, so the zero point is not in the middle.
        x: values(m * k, 200 + i as u64, 3.0)
            .iter()
            .enumerate()
            .map(|(j, v)| v + (j / k) as f32 * 0.7)
            .collect(),
        res: values(m * n, 300 + i as u64, 1.0),
    })
}

#[test]
fn every_available_kernel_matches_the_reference_bit_for_bit() {
    let paths = Isa::available_all();
    assert!(paths.contains(&Isa::Scalar));
    eprintln!("kernels tested: {paths:?}");
    for Case {
        m,
        k,
        n,
        w,
        b,
        x,
        res,
    } in cases()
    {
        let lin = QuantLinear::new(&w, &b, n, k).unwrap();
        let (q, s) = quantize_weights(&w, n, k);
        for act in [Act::None, Act::GeluErf, Act::GeluPoly, Act::Relu] {
            for residual in [None, Some(res.as_slice())] {
                for &isa in &paths {
                    let want =
                        reference_forward(isa.act_max(), &q, &s, &b, n, k, &x, m, residual, act);
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

/// The output's row ranges gathered while it is written (the AVX512-VNNI output
/// stage at widths of 64, a scan elsewhere) give the next layer's input exactly
/// as a scan does: same output, same codes, scales and zero points.
#[test]
fn row_lanes_gathered_by_the_product_quantise_its_output_as_a_scan_does() {
    let mut lanes = RowLanes::new();
    let (mut inp, mut want, mut got) = (QuantInput::new(), QuantInput::new(), QuantInput::new());
    for c in cases() {
        let (m, k, n) = (c.m, c.k, c.n);
        let lin = QuantLinear::new(&c.w, &c.b, n, k).unwrap();
        for act in [Act::None, Act::GeluErf, Act::GeluPoly, Act::Relu] {
            for residual in [None, Some(c.res.as_slice())] {
                for isa in Isa::available_all() {
                    let case = format!("{isa:?} m={m} k={k} n={n} {act:?} {}", residual.is_some());
                    inp.quantize(isa, &c.x, m, k).unwrap();
                    let mut plain = vec![f32::NAN; m * n];
                    lin.forward_quantized(isa, &inp, residual, act, &mut plain)
                        .unwrap();
                    let mut out = vec![f32::NAN; m * n];
                    lin.forward_quantized_lanes(isa, &inp, residual, act, &mut out, &mut lanes)
                        .unwrap();
                    assert_eq!(out, plain, "{case}");
                    want.quantize(isa, &out, m, n).unwrap();
                    got.quantize_lanes(isa, &out, m, n, &lanes).unwrap();
                    assert_eq!(got, want, "{case}");
                }
            }
        }
        // Lanes of another shape are refused.
        let r = got.quantize_lanes(Isa::Scalar, &vec![0.0; (m + 1) * n], m + 1, n, &lanes);
        assert!(matches!(r, Err(KernelError::Shape(_))), "{r:?}");
    }
}

#[test]
fn every_kernel_is_listed_and_the_best_available_is_chosen() {
    let names: Vec<_> = Isa::ALL.iter().map(|i| i.name()).collect();
    assert_eq!(names, ["scalar", "avx2", "avxvnni", "avx512vnni"]);
    let acts: Vec<_> = Isa::ALL.iter().map(|i| i.act_max()).collect();
    assert_eq!(acts, [QMAX_8BIT, QMAX_7BIT, QMAX_8BIT, QMAX_8BIT]);
    let order = [Isa::Avx512Vnni, Isa::AvxVnni, Isa::Avx2, Isa::Scalar];
    let best = *order.iter().find(|i| i.available()).unwrap();
    assert_eq!(Isa::best(), best);
    let want: Vec<_> = Isa::ALL.into_iter().filter(|i| i.available()).collect();
    assert_eq!(Isa::available_all(), want);
}

#[test]
fn the_avxvnni_tile_with_evex_vpdpbusd_matches_the_reference_bit_for_bit() {
    if !QuantLinear::avxvnni_evex_available() {
        eprintln!("skipped: this CPU lacks AVX512-VNNI/VL (the EVEX AVX-VNNI tile)");
        let lin = QuantLinear::new(&[1.0; 6], &[0.0; 2], 2, 3).unwrap();
        let mut inp = QuantInput::new();
        inp.quantize(Isa::AvxVnni, &[1.0; 6], 2, 3).unwrap();
        let r = lin.forward_quantized_avxvnni_evex(&inp, None, Act::None, &mut [0.0; 4]);
        assert!(matches!(r, Err(KernelError::Unavailable(..))), "{r:?}");
        return;
    }
    let mut inp = QuantInput::new();
    for c in cases() {
        let (m, k, n) = (c.m, c.k, c.n);
        let lin = QuantLinear::new(&c.w, &c.b, n, k).unwrap();
        let (q, s) = quantize_weights(&c.w, n, k);
        inp.quantize(Isa::AvxVnni, &c.x, m, k).unwrap();
        for act in [Act::None, Act::GeluErf, Act::GeluPoly, Act::Relu] {
            for residual in [None, Some(c.res.as_slice())] {
                let want = reference_forward(QMAX_8BIT, &q, &s, &c.b, n, k, &c.x, m, residual, act);
                let mut got = vec![f32::NAN; m * n];
                lin.forward_quantized_avxvnni_evex(&inp, residual, act, &mut got)
                    .unwrap();
                assert_eq!(
                    got,
                    want,
                    "m={m} k={k} n={n} {act:?} residual={}",
                    residual.is_some()
                );
            }
        }
        // 7-bit codes (the AVX2 kernel's), or an output of the wrong size: errors.
        let mut out = vec![0f32; m * n];
        inp.quantize(Isa::Avx2, &c.x, m, k).unwrap();
        let r = lin.forward_quantized_avxvnni_evex(&inp, None, Act::None, &mut out);
        assert!(matches!(r, Err(KernelError::Shape(_))), "{r:?}");
        inp.quantize(Isa::AvxVnni, &c.x, m, k).unwrap();
        let r = lin.forward_quantized_avxvnni_evex(&inp, None, Act::None, &mut out[1..]);
        assert!(matches!(r, Err(KernelError::Shape(_))), "{r:?}");
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
    let (s, z) = quantize_row(&x, &mut q, QMAX_7BIT);
    assert!(q.iter().all(|&v| v as i32 <= QMAX_7BIT));
    assert_eq!(&q[6..], &[0, 0], "padding is zeroed");
    assert_eq!(q[0], 0);
    assert_eq!(q[5] as i32, QMAX_7BIT);
    for (&v, &c) in x.iter().zip(&q) {
        let back = s * (c as i32 - z) as f32;
        assert!((back - v).abs() <= s * 0.5 + 1e-6, "{v} -> {c} -> {back}");
    }
    // An all-positive row still represents 0 exactly (the range includes it).
    let (s2, z2) = quantize_row(&[1.0, 2.0], &mut q, QMAX_7BIT);
    assert_eq!(z2, 0);
    assert_eq!(q[1] as i32, QMAX_7BIT);
    assert!((s2 - 2.0 / 127.0).abs() < 1e-7);
}

#[test]
fn eight_bit_codes_use_the_full_byte_and_round_half_to_even() {
    // Range 0..=255 with scale 1: codes are the values themselves, rounded.
    let x = [0.0f32, 255.0, 2.5, 3.5, 7.4, 7.6];
    let mut q = [9u8; 9];
    let (s, z) = quantize_row(&x, &mut q, 255);
    assert_eq!((s, z), (1.0, 0));
    assert_eq!(&q[..7], &[0, 255, 2, 4, 7, 8, 0]);
    // NaN codes to 0 and out-of-range values clamp (scale from the finite part).
    let (_, z) = quantize_row(&[-1.0, f32::NAN, 1.0], &mut q, 255);
    assert_eq!(q[1] as i32, 0);
    assert!((127..=128).contains(&z), "zero point {z}");
    assert_eq!(q[0], 0);
    assert!(q[2] >= 254, "the top of the range codes to {}", q[2]);
}

#[test]
fn a_quantised_input_is_reused_across_layers_and_checked() {
    let (m, k) = (7, 20);
    let x = values(m * k, 11, 1.0);
    let a = QuantLinear::new(&values(5 * k, 12, 0.3), &[0.0; 5], 5, k).unwrap();
    let b = QuantLinear::new(&values(70 * k, 13, 0.3), &values(70, 14, 0.1), 70, k).unwrap();
    let c = QuantLinear::new(&values(5 * 21, 15, 0.3), &[0.0; 5], 5, 21).unwrap();
    for isa in Isa::available_all() {
        let mut inp = QuantInput::new();
        inp.quantize(isa, &x, m, k).unwrap();
        assert_eq!(inp.rows(), m);
        for lin in [&a, &b] {
            let n = lin.out_dim();
            let (mut got, mut want) = (vec![0f32; m * n], vec![0f32; m * n]);
            lin.forward_quantized(isa, &inp, None, Act::GeluErf, &mut got)
                .unwrap();
            lin.forward(isa, &x, m, None, Act::GeluErf, &mut want)
                .unwrap();
            assert_eq!(got, want, "{isa:?} n={n}");
        }
        // Another layer width (K padded to 24 vs 20) or another kernel's codes: errors.
        let mut out = vec![0f32; m * 5];
        assert!(c
            .forward_quantized(isa, &inp, None, Act::None, &mut out)
            .is_err());
        for other in Isa::available_all() {
            if other.act_max() != isa.act_max() {
                assert!(a
                    .forward_quantized(other, &inp, None, Act::None, &mut out)
                    .is_err());
            }
        }
    }
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
    assert!(out.iter().all(|v| (v - 3.0).abs() < 1e-6), "{out:?}");
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
