//! Every fp32 kernel this CPU can run, forced, against a plain f64 reference on odd
//! shapes (M, N not multiples of the 6 x 64 tile, K of any length), and against
//! each other; shape errors are errors.
use bertflow_kernels::fp32::{PackedLinear, Path};
use bertflow_kernels::Act;

use crate::common;
use common::values;

/// `act(x W^T + b [+ residual])` in f64, and per output the sum of the magnitudes
/// of its terms (the scale of fp32 rounding).
#[allow(clippy::too_many_arguments)]
fn reference(
    w: &[f32],
    b: &[f32],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    residual: Option<&[f32]>,
    act: Act,
) -> (Vec<f64>, Vec<f64>) {
    let (mut y, mut mag) = (vec![0f64; m * n], vec![0f64; m * n]);
    for r in 0..m {
        for c in 0..n {
            let (mut s, mut a) = (b[c] as f64, (b[c] as f64).abs());
            for i in 0..k {
                let p = x[r * k + i] as f64 * w[c * k + i] as f64;
                s += p;
                a += p.abs();
            }
            if let Some(res) = residual {
                s += res[r * n + c] as f64;
                a += (res[r * n + c] as f64).abs();
            }
            y[r * n + c] = match act {
                Act::None => s,
                Act::Relu => s.max(0.0),
                Act::GeluErf => 0.5 * s * (1.0 + erf(s / std::f64::consts::SQRT_2)),
                Act::GeluPoly => bertflow_kernels::gelu_poly(s as f32) as f64,
            };
            mag[r * n + c] = a;
        }
    }
    (y, mag)
}

/// erf in f64: the Taylor series below 4 (its largest term is below e^16, so the
/// cancellation error stays under 1e-8), +-1 above (erfc(4) < 1.6e-8).
fn erf(x: f64) -> f64 {
    if x.abs() >= 4.0 {
        return x.signum();
    }
    // erf x = 2/sqrt(pi) sum_n (-1)^n x^(2n+1) / (n! (2n+1))
    let (mut term, mut sum) = (x, x);
    for n in 1..200 {
        term *= -x * x / n as f64;
        let t = term / (2 * n + 1) as f64;
        sum += t;
        if t.abs() < 1e-17 {
            break;
        }
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn every_available_kernel_matches_the_f64_reference_and_the_others() {
    let paths = Path::available_all();
    assert!(paths.contains(&Path::Scalar));
    eprintln!("kernels tested: {paths:?}");
    let mut case = 0u64;
    for m in [1, 5, 7, 13] {
        for n in [1, 17, 64, 65, 130] {
            for k in [1, 3, 31, 384] {
                case += 1;
                let w = values(n * k, 1 + case, 0.5);
                let b = values(n, 1000 + case, 0.3);
                let x = values(m * k, 2000 + case, 2.0);
                let res = values(m * n, 3000 + case, 1.5);
                let lin = PackedLinear::new(&w, &b, n, k).unwrap();
                assert_eq!((lin.in_dim(), lin.out_dim()), (k, n));
                assert_eq!(lin.weights(), w);
                assert_eq!(lin.bias(), b);
                for act in [Act::None, Act::GeluErf, Act::Relu] {
                    for residual in [None, Some(res.as_slice())] {
                        let (want, mag) = reference(&w, &b, n, k, &x, m, residual, act);
                        let mut first: Option<Vec<f32>> = None;
                        for &path in &paths {
                            let mut got = vec![f32::NAN; m * n];
                            lin.forward_with(path, &x, m, residual, act, &mut got)
                                .unwrap();
                            for (i, ((&g, &y), &a)) in got.iter().zip(&want).zip(&mag).enumerate() {
                                // fp32 rounding of k + 2 terms, plus GELU's erf
                                // approximation (< 1.5e-7 absolute).
                                let tol = 1e-6 * (k as f64 + 2.0).sqrt() * a + 1e-6;
                                assert!(
                                    (g as f64 - y).abs() <= tol,
                                    "{path:?} m={m} n={n} k={k} {act:?} residual={} \
                                     output {i}: {g} vs {y} (tol {tol})",
                                    residual.is_some()
                                );
                            }
                            match &first {
                                None => first = Some(got),
                                Some(f) => {
                                    for (&g, &h) in got.iter().zip(f) {
                                        assert!((g - h).abs() <= 1e-5 * (1.0 + h.abs()));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn the_default_forward_is_the_best_kernel() {
    let (m, n, k) = (9, 70, 40);
    let (w, b, x) = (
        values(n * k, 1, 0.5),
        values(n, 2, 0.1),
        values(m * k, 3, 1.0),
    );
    let lin = PackedLinear::new(&w, &b, n, k).unwrap();
    assert_eq!(lin.path(), Path::best());
    let (mut a, mut c) = (vec![0f32; m * n], vec![0f32; m * n]);
    lin.forward(&x, m, None, Act::GeluErf, &mut a).unwrap();
    lin.forward_with(Path::best(), &x, m, None, Act::GeluErf, &mut c)
        .unwrap();
    assert_eq!(a, c);
}

#[test]
fn bad_shapes_are_errors() {
    let (n, k) = (5, 3);
    let (w, b) = (values(n * k, 1, 0.5), values(n, 2, 0.1));
    assert!(PackedLinear::new(&w, &b, n, k + 1).is_err());
    assert!(PackedLinear::new(&w, &b[..4], n, k).is_err());
    assert!(PackedLinear::new(&[], &[], 0, 0).is_err());
    assert!(PackedLinear::new(&w[..0], &b, n, 0).is_err());
    assert!(PackedLinear::new(&w, &b, n, usize::MAX / 2).is_err());
    let lin = PackedLinear::new(&w, &b, n, k).unwrap();
    let x = values(2 * k, 3, 1.0);
    let res = values(2 * n, 4, 1.0);
    let mut out = vec![0f32; 2 * n];
    for path in Path::available_all() {
        let f = |x: &[f32], m, r: Option<&[f32]>, o: &mut [f32]| {
            lin.forward_with(path, x, m, r, Act::None, o)
        };
        assert!(f(&x, 3, None, &mut out).is_err());
        assert!(f(&x[..5], 2, None, &mut out).is_err());
        assert!(f(&x, 2, None, &mut out[..9]).is_err());
        assert!(f(&x, 2, Some(&res[..9]), &mut out).is_err());
        assert!(f(&x, 2, Some(&res), &mut out).is_ok());
        assert!(f(&x[..0], 0, None, &mut out[..0]).is_ok());
        assert!(f(&x, usize::MAX / 2, None, &mut out).is_err());
    }
    for path in Path::ALL {
        let r = lin.forward_with(path, &x, 2, None, Act::None, &mut out);
        assert_eq!(r.is_ok(), path.available());
    }
}
