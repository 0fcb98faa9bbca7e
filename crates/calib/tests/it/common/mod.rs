//! Seeded synthetic data for the tests.
#![allow(dead_code)]

use ndarray::{Array1, Array2};

/// SplitMix64 + Box-Muller.
pub struct Gen(u64);

impl Gen {
    pub fn new(seed: u64) -> Self {
        Gen(seed)
    }
    pub fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// A random orthogonal matrix (Gram-Schmidt on Gaussian columns).
pub fn orthogonal(d: usize, g: &mut Gen) -> Array2<f64> {
    let mut q = Array2::<f64>::zeros((d, d));
    for j in 0..d {
        let mut v: Vec<f64> = (0..d).map(|_| g.normal()).collect();
        for k in 0..j {
            let dot: f64 = (0..d).map(|i| v[i] * q[[i, k]]).sum();
            for i in 0..d {
                v[i] -= dot * q[[i, k]];
            }
        }
        let norm = v.iter().map(|a| a * a).sum::<f64>().sqrt();
        for i in 0..d {
            q[[i, j]] = v[i] / norm;
        }
    }
    q
}

/// Gaussian rows with covariance `R diag(vars) R^T` (R = identity when
/// `rotate` is false) and the given mean.
pub fn gaussian(n: usize, mean: &[f64], vars: &[f64], rotate: bool, seed: u64) -> Array2<f32> {
    let d = mean.len();
    let mut g = Gen::new(seed);
    let r = if rotate {
        orthogonal(d, &mut g)
    } else {
        Array2::eye(d)
    };
    let mut x = Array2::<f32>::zeros((n, d));
    let mut z = vec![0.0; d];
    for mut row in x.rows_mut() {
        for (k, zk) in z.iter_mut().enumerate() {
            *zk = g.normal() * vars[k].sqrt();
        }
        for (i, v) in row.iter_mut().enumerate() {
            let s: f64 = (0..d).map(|k| r[[i, k]] * z[k]).sum();
            *v = (mean[i] + s) as f32;
        }
    }
    x
}

/// Variances log-spaced from `lo` to `hi`.
pub fn logspace(lo: f64, hi: f64, d: usize) -> Vec<f64> {
    (0..d)
        .map(|j| lo * (hi / lo).powf(j as f64 / (d - 1).max(1) as f64))
        .collect()
}

/// Embedding-like data: anisotropic, correlated, non-centred, with the
/// given columns set to a constant.
pub fn embeddings(n: usize, d: usize, constant_cols: &[usize], seed: u64) -> Array2<f32> {
    let mean: Vec<f64> = (0..d).map(|j| 0.1 * ((j * 37 % 11) as f64 - 5.0)).collect();
    let vars = logspace(1e-4, 1.0, d);
    let mut x = gaussian(n, &mean, &vars, true, seed);
    for &c in constant_cols {
        x.column_mut(c).fill(0.37 + c as f32 * 1e-3);
    }
    x
}

/// Column means and covariance (divided by n - 1) in f64.
pub fn moments<T: Copy + Into<f64>>(x: &Array2<T>) -> (Array1<f64>, Array2<f64>) {
    let xf = x.mapv(|v| v.into());
    let n = xf.nrows() as f64;
    let mean = xf.mean_axis(ndarray::Axis(0)).unwrap();
    let c = &xf - &mean;
    let cov = c.t().dot(&c) / (n - 1.0);
    (mean, cov)
}

/// max |a - b| over all entries.
pub fn max_abs_diff(a: &Array2<f64>, b: &Array2<f64>) -> f64 {
    assert_eq!(a.dim(), b.dim());
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}
