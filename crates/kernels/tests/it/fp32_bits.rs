//! The fp32 kernels bit for bit against scalar models of their arithmetic, on odd
//! shapes and on channels of very different sizes (which get different scales):
//! * the classical kernels (multiply-adds over k, then `+ b`) give the bits of
//!   the unscaled weights, so the per-channel power-of-two scale changes nothing;
//! * the pair kernel (Winograd's inner product, `Path::Avx512Pair`) computes
//!   `((sum (x0 + w1)(x1 + w0) - R(x)) - C(w)) / s + b` exactly as documented,
//!   and a row's bits do not depend on the rows beside it.
//!
//! A kernel this CPU cannot run is skipped (and named on stderr).
use bertflow_kernels::fp32::{PackedLinear, Path};
use bertflow_kernels::Act;

use crate::common;

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    common::values(n, seed, 1.0)
}

/// Weights `[n, k]` whose channels range over six orders of magnitude.
fn weights(n: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut w = values(n * k, seed);
    for (c, row) in w.chunks_exact_mut(k).enumerate() {
        let size = [1e-4f32, 0.003, 0.05, 0.4, 2.0, 37.0][c % 6];
        row.iter_mut().for_each(|v| *v *= size);
    }
    w
}

/// The documented scale: the power of two `2^e`, `0 <= e <= 40`, that brings the
/// channel's root mean square nearest 1.
fn scale(row: &[f32]) -> f32 {
    let ms = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / row.len() as f64;
    if ms == 0.0 {
        return 1.0;
    }
    ((-0.5 * ms.log2()).round().clamp(0.0, 40.0) as i32 as f32).exp2()
}

/// The layer's output by `dot` per (row, channel), then `+ residual`.
fn model(
    w: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
    x: &[f32],
    res: Option<&[f32]>,
    dot: impl Fn(&[f32], &[f32], f32) -> f32,
) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    for r in 0..m {
        for c in 0..n {
            let v = dot(&x[r * k..(r + 1) * k], &w[c * k..(c + 1) * k], b[c]);
            out[r * n + c] = res.map_or(v, |res| v + res[r * n + c]);
        }
    }
    out
}

/// One output from a row, a channel's weights and its bias.
type Dot = fn(&[f32], &[f32], f32) -> f32;

/// Classical with FMA (AVX-512, AVX2): `fma(x_i, w_i, acc)` in order, then `+ b`.
fn dot_fma(x: &[f32], w: &[f32], b: f32) -> f32 {
    x.iter()
        .zip(w)
        .fold(0f32, |acc, (&a, &v)| a.mul_add(v, acc))
        + b
}

/// Classical portable: `acc + x_i w_i` (two roundings) in order, then `+ b`.
fn dot_plain(x: &[f32], w: &[f32], b: f32) -> f32 {
    x.iter().zip(w).fold(0f32, |acc, (&a, &v)| acc + a * v) + b
}

/// By pairs, on the scaled weights.
fn dot_pair(x: &[f32], w: &[f32], b: f32) -> f32 {
    let s = scale(w);
    let ws: Vec<f32> = w.iter().map(|&v| v * s).collect();
    let mut acc = 0f32;
    for (xp, wp) in x.chunks_exact(2).zip(ws.chunks_exact(2)) {
        acc = (xp[0] + wp[1]).mul_add(xp[1] + wp[0], acc);
    }
    if x.len() % 2 == 1 {
        acc = x[x.len() - 1].mul_add(ws[x.len() - 1], acc);
    }
    let term = |v: &[f32]| {
        v.chunks_exact(2)
            .map(|p| p[0] as f64 * p[1] as f64)
            .sum::<f64>() as f32
    };
    ((acc - term(x)) - term(&ws)).mul_add(1.0 / s, b)
}

#[test]
fn each_kernel_equals_its_scalar_model_bit_for_bit() {
    let cases: [(Path, Dot); 4] = [
        (Path::Scalar, dot_plain),
        (Path::Avx2, dot_fma),
        (Path::Avx512, dot_fma),
        (Path::Avx512Pair, dot_pair),
    ];
    let mut seed = 0;
    for (path, dot) in cases {
        if !path.available() {
            eprintln!("skipped: this CPU cannot run {}", path.name());
            continue;
        }
        // 487 rows: more than two of the driver's 240-row chunks, and a multiple
        // of neither tile height.
        for m in [1, 4, 5, 6, 11, 487] {
            for n in [1, 17, 64, 130] {
                for k in [1, 2, 3, 30, 65] {
                    seed += 1;
                    let (w, b) = (weights(n, k, seed), values(n, seed + 1000));
                    let x = values(m * k, seed + 2000);
                    let res = values(m * n, seed + 3000);
                    let lin = PackedLinear::new(&w, &b, n, k).unwrap();
                    assert_eq!(lin.weights(), w, "the scale is undone exactly");
                    for residual in [None, Some(res.as_slice())] {
                        let want = model(&w, &b, (m, n, k), &x, residual, dot);
                        let mut got = vec![f32::NAN; m * n];
                        lin.forward_with(path, &x, m, residual, Act::None, &mut got)
                            .unwrap();
                        for (i, (g, y)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(
                                g.to_bits(),
                                y.to_bits(),
                                "{path:?} m={m} n={n} k={k} residual={} output {i}: {g} vs {y}",
                                residual.is_some()
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_row_gets_the_same_bits_whatever_rows_surround_it() {
    let (n, k) = (70, 384);
    let (w, b) = (weights(n, k, 7), values(n, 8));
    let lin = PackedLinear::new(&w, &b, n, k).unwrap();
    let m = 487;
    let x = values(m * k, 9);
    for path in Path::available_all() {
        let mut all = vec![0f32; m * n];
        lin.forward_with(path, &x, m, None, Act::GeluErf, &mut all)
            .unwrap();
        for r in 0..m {
            let mut one = vec![0f32; n];
            lin.forward_with(
                path,
                &x[r * k..(r + 1) * k],
                1,
                None,
                Act::GeluErf,
                &mut one,
            )
            .unwrap();
            assert_eq!(one, all[r * n..(r + 1) * n], "{path:?} row {r}");
        }
    }
}
