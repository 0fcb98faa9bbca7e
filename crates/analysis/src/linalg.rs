//! Blocked, multi-threaded dense helpers built on ndarray's matrix product
//! (the centred Gram matrices live in `bertflow-numeric`).

use ndarray::linalg::general_mat_mul;
use ndarray::{s, Array2, ArrayView2};

/// Number of worker threads for the heavy products (at most 8).
pub(crate) fn n_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
}

/// Runs `f(block_start, block_end)` for consecutive row blocks of `0..n` on
/// worker threads and returns the results in block order.
pub(crate) fn par_blocks<R, F>(n: usize, block: usize, f: F) -> Vec<R>
where
    R: Send,
    F: Fn(usize, usize) -> R + Sync,
{
    let n_blocks = n.div_ceil(block.max(1));
    let threads = n_threads().min(n_blocks).max(1);
    let f = &f;
    let mut per_thread: Vec<Vec<(usize, R)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut out = Vec::new();
                    let mut b = t;
                    while b < n_blocks {
                        let lo = b * block;
                        let hi = (lo + block).min(n);
                        out.push((b, f(lo, hi)));
                        b += threads;
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut all: Vec<(usize, R)> = per_thread.iter_mut().flat_map(std::mem::take).collect();
    all.sort_by_key(|(b, _)| *b);
    all.into_iter().map(|(_, r)| r).collect()
}

/// Squared l2 norms of the rows, in f64.
pub(crate) fn row_sq_norms(x: ArrayView2<'_, f32>) -> Vec<f64> {
    x.rows()
        .into_iter()
        .map(|r| r.iter().map(|&v| f64::from(v) * f64::from(v)).sum())
        .collect()
}

/// Rows scaled to unit l2 norm (zero rows stay zero).
/// The result is always in standard (row-major, contiguous) layout.
pub(crate) fn l2_normalise(x: ArrayView2<'_, f32>) -> Array2<f32> {
    let mut out = x.as_standard_layout().into_owned();
    for mut row in out.rows_mut() {
        let n = row
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt();
        if n > 0.0 {
            row.mapv_inplace(|v| (f64::from(v) / n) as f32);
        }
    }
    out
}

/// Dot product of two equally long f32 slices: eight f32 lanes (which the
/// compiler vectorises), summed in f64.
pub(crate) fn dot_f32(a: &[f32], b: &[f32]) -> f64 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let tail: f64 = ra
        .iter()
        .zip(rb)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    acc.iter().map(|&v| f64::from(v)).sum::<f64>() + tail
}

/// `a[lo..hi] · b^T` as an f32 matrix.
pub(crate) fn block_dot_t(
    a: ArrayView2<'_, f32>,
    lo: usize,
    hi: usize,
    b: ArrayView2<'_, f32>,
) -> Array2<f32> {
    let qa = a.slice(s![lo..hi, ..]);
    let mut out = Array2::<f32>::zeros((hi - lo, b.nrows()));
    general_mat_mul(1.0, &qa, &b.t(), 0.0, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn par_blocks_keeps_order() {
        let r = par_blocks(10, 3, |lo, hi| (lo, hi));
        assert_eq!(r, vec![(0, 3), (3, 6), (6, 9), (9, 10)]);
        assert!(par_blocks(0, 3, |lo, hi| (lo, hi)).is_empty());
    }

    #[test]
    fn dot_matches_naive_with_remainder() {
        let a: Vec<f32> = (0..21).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..21).map(|i| 3.0 - i as f32).collect();
        let naive: f64 = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| f64::from(x) * f64::from(y))
            .sum();
        assert!((dot_f32(&a, &b) - naive).abs() < 1e-9);
        assert_eq!(dot_f32(&[], &[]), 0.0);
    }

    #[test]
    fn normalise_makes_standard_layout() {
        let x = array![[3.0f32, 0.0], [4.0, 2.0]];
        let y = l2_normalise(x.t());
        assert!(y.is_standard_layout());
        assert_eq!(y, array![[0.6f32, 0.8], [0.0, 1.0]]);
    }

    #[test]
    fn normalise_keeps_zero_rows() {
        let x = array![[3.0f32, 4.0], [0.0, 0.0]];
        let y = l2_normalise(x.view());
        assert_eq!(y, array![[0.6f32, 0.8], [0.0, 0.0]]);
    }
}
