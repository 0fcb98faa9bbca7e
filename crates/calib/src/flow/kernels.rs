//! Small dense matrix products for the flow, register-tiled so the
//! accumulators stay in registers. Each output element is a plain sum over
//! the reduction index in increasing order (no fused multiply-add, no
//! reassociation), so the results are the same bit for bit whether the
//! AVX2 or the baseline SSE2 build of a kernel runs.

use crate::real::Real;

const MR: usize = 4;
const NR: usize = 8;

/// `c[i, j] (+)= sum_q x(i, q) * y[q, j]` for `i < m`, `j < n`, `q < p`,
/// where `x(i, q) = x[i * xs_m + q * xs_p]`, `y[q, j] = y[q * ys + j]` and
/// `c[i, j] = c[i * cs + j]`. With `acc` the sum starts from the current
/// value of `c`, otherwise from zero.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn gemm_body<T: Real>(
    m: usize,
    n: usize,
    p: usize,
    x: &[T],
    xs_m: usize,
    xs_p: usize,
    y: &[T],
    ys: usize,
    c: &mut [T],
    cs: usize,
    acc: bool,
) {
    let mut i = 0;
    while i + MR <= m {
        let mut j = 0;
        while j + NR <= n {
            let mut t = [[T::ZERO; NR]; MR];
            if acc {
                for (r, tr) in t.iter_mut().enumerate() {
                    tr.copy_from_slice(&c[(i + r) * cs + j..(i + r) * cs + j + NR]);
                }
            }
            for q in 0..p {
                let yv: &[T; NR] = (&y[q * ys + j..q * ys + j + NR]).try_into().unwrap();
                let xb = i * xs_m + q * xs_p;
                let xv = [x[xb], x[xb + xs_m], x[xb + 2 * xs_m], x[xb + 3 * xs_m]];
                for r in 0..MR {
                    for l in 0..NR {
                        t[r][l] += xv[r] * yv[l];
                    }
                }
            }
            for (r, tr) in t.iter().enumerate() {
                c[(i + r) * cs + j..(i + r) * cs + j + NR].copy_from_slice(tr);
            }
            j += NR;
        }
        if j < n {
            gemm_scalar(i, i + MR, j, n, p, x, xs_m, xs_p, y, ys, c, cs, acc);
        }
        i += MR;
    }
    if i < m {
        gemm_scalar(i, m, 0, n, p, x, xs_m, xs_p, y, ys, c, cs, acc);
    }
}

/// The same sums for rows `i0..i1` and columns `j0..j1`, one element at a time.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn gemm_scalar<T: Real>(
    i0: usize,
    i1: usize,
    j0: usize,
    j1: usize,
    p: usize,
    x: &[T],
    xs_m: usize,
    xs_p: usize,
    y: &[T],
    ys: usize,
    c: &mut [T],
    cs: usize,
    acc: bool,
) {
    for i in i0..i1 {
        for j in j0..j1 {
            let mut s = if acc { c[i * cs + j] } else { T::ZERO };
            for q in 0..p {
                s += x[i * xs_m + q * xs_p] * y[q * ys + j];
            }
            c[i * cs + j] = s;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
fn gemm_avx2<T: Real>(
    m: usize,
    n: usize,
    p: usize,
    x: &[T],
    xs_m: usize,
    xs_p: usize,
    y: &[T],
    ys: usize,
    c: &mut [T],
    cs: usize,
    acc: bool,
) {
    gemm_body(m, n, p, x, xs_m, xs_p, y, ys, c, cs, acc)
}

#[allow(clippy::too_many_arguments)]
fn gemm<T: Real>(
    m: usize,
    n: usize,
    p: usize,
    x: &[T],
    xs_m: usize,
    xs_p: usize,
    y: &[T],
    ys: usize,
    c: &mut [T],
    cs: usize,
    acc: bool,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            unsafe { gemm_avx2(m, n, p, x, xs_m, xs_p, y, ys, c, cs, acc) };
            return;
        }
    }
    gemm_body(m, n, p, x, xs_m, xs_p, y, ys, c, cs, acc)
}

/// `out[i, ..n] (+)= a[i, ..k] . w` for `i < rows`; `w` is `k x n`
/// row-major, `a` and `out` have row strides `a_stride` and `out_stride`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul<T: Real>(
    a: &[T],
    a_stride: usize,
    rows: usize,
    k: usize,
    w: &[T],
    n: usize,
    out: &mut [T],
    out_stride: usize,
    acc: bool,
) {
    gemm(rows, n, k, a, a_stride, 1, w, n, out, out_stride, acc)
}

/// `dw (k x n) += a[.., ..k]^T . d[.., ..n]` over `rows` rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_tn_acc<T: Real>(
    a: &[T],
    a_stride: usize,
    rows: usize,
    k: usize,
    d: &[T],
    d_stride: usize,
    n: usize,
    dw: &mut [T],
) {
    gemm(k, n, rows, a, 1, a_stride, d, d_stride, dw, n, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::too_many_arguments)]
    fn naive(
        m: usize,
        n: usize,
        p: usize,
        x: &[f64],
        xs_m: usize,
        xs_p: usize,
        y: &[f64],
        c0: &[f64],
        acc: bool,
    ) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = if acc { c0[i * n + j] } else { 0.0 };
                for q in 0..p {
                    s += x[i * xs_m + q * xs_p] * y[q * n + j];
                }
                c[i * n + j] = s;
            }
        }
        c
    }

    #[test]
    fn f32_dispatch_matches_the_baseline_build_bit_for_bit() {
        let mut rng = bertflow_numeric::Xoshiro256StarStar::new(5);
        let (m, n, p) = (32, 40, 67);
        let x: Vec<f32> = (0..m * p).map(|_| rng.normal() as f32).collect();
        let y: Vec<f32> = (0..p * n).map(|_| rng.normal() as f32).collect();
        let mut a = vec![0.0f32; m * n];
        let mut b = vec![0.0f32; m * n];
        gemm(m, n, p, &x, p, 1, &y, n, &mut a, n, false);
        gemm_body(m, n, p, &x, p, 1, &y, n, &mut b, n, false);
        assert!(a.iter().zip(&b).all(|(u, v)| u.to_bits() == v.to_bits()));
        // and both are the plain in-order sums
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f32;
                for q in 0..p {
                    s += x[i * p + q] * y[q * n + j];
                }
                assert_eq!(s.to_bits(), a[i * n + j].to_bits());
            }
        }
    }

    #[test]
    fn tiled_products_equal_naive_sums_bit_for_bit() {
        let mut rng = bertflow_numeric::Xoshiro256StarStar::new(4);
        for (m, n, p) in [
            (1, 1, 1),
            (4, 8, 3),
            (5, 9, 7),
            (32, 32, 192),
            (13, 17, 5),
            (8, 24, 0),
        ] {
            let x: Vec<f64> = (0..m * p).map(|_| rng.normal()).collect();
            let y: Vec<f64> = (0..p * n).map(|_| rng.normal()).collect();
            let c0: Vec<f64> = (0..m * n).map(|_| rng.normal()).collect();
            for acc in [false, true] {
                // x as m x p row-major
                let mut c = c0.clone();
                gemm(m, n, p, &x, p, 1, &y, n, &mut c, n, acc);
                assert_eq!(c, naive(m, n, p, &x, p, 1, &y, &c0, acc), "{m}x{n}x{p}");
                // x as p x m row-major, read transposed
                let mut c = c0.clone();
                gemm(m, n, p, &x, 1, m, &y, n, &mut c, n, acc);
                assert_eq!(c, naive(m, n, p, &x, 1, m, &y, &c0, acc), "{m}x{n}x{p} T");
                let mut c = c0.clone();
                gemm_body(m, n, p, &x, 1, m, &y, n, &mut c, n, acc);
                assert_eq!(
                    c,
                    naive(m, n, p, &x, 1, m, &y, &c0, acc),
                    "{m}x{n}x{p} baseline"
                );
            }
        }
    }
}
