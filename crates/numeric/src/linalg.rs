//! Column means, centred Gram (co-moment) matrices and symmetric
//! eigendecompositions, all in f64.

use ndarray::linalg::general_mat_mul;
use ndarray::{s, Array1, Array2, ArrayView2, ArrayViewMut2};

/// Rows per block of [`centred_gram_cols`]: the largest f64 copy it makes is
/// `GRAM_BLOCK x d` per thread.
pub const GRAM_BLOCK: usize = 512;

/// Why an eigendecomposition gave no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EigenError {
    /// The input matrix or the computed eigenvalues contain NaN or inf.
    #[error("the eigendecomposition produced non-finite eigenvalues")]
    NonFinite,
    /// The iteration did not converge.
    #[error("the symmetric eigendecomposition did not converge")]
    NotConverged,
}

/// Column means in f64: the rows are summed in order, then divided by the
/// row count (an empty matrix gives zeros).
pub fn col_mean<T: Copy + Into<f64>>(x: ArrayView2<'_, T>) -> Array1<f64> {
    let mut m = Array1::<f64>::zeros(x.ncols());
    for row in x.rows() {
        for (a, &v) in m.iter_mut().zip(row.iter()) {
            *a += v.into();
        }
    }
    m /= x.nrows().max(1) as f64;
    m
}

/// Fills `block` with rows `start..start + block.nrows()` of `x` minus `mean`.
fn centre_rows<T: Copy + Into<f64>>(
    x: ArrayView2<'_, T>,
    start: usize,
    mean: &[f64],
    mut block: ArrayViewMut2<'_, f64>,
) {
    for (i, mut out) in block.rows_mut().into_iter().enumerate() {
        for ((o, &v), &m) in out.iter_mut().zip(x.row(start + i).iter()).zip(mean) {
            *o = v.into() - m;
        }
    }
}

/// `Xc^T Xc` (d x d, f64) of `x` centred by `mean` (usually its column mean),
/// accumulated over blocks of [`GRAM_BLOCK`] rows, so no n x d f64 copy is
/// ever made. The rows are split into `threads` contiguous ranges (at most
/// one per block), one worker each, and the partial sums added in range
/// order: the result is deterministic for a given `threads`.
///
/// `mean.len()` must equal `x.ncols()`.
pub fn centred_gram_cols<T: Copy + Into<f64> + Sync>(
    x: ArrayView2<'_, T>,
    mean: &[f64],
    threads: usize,
) -> Array2<f64> {
    let (n, d) = x.dim();
    assert_eq!(
        mean.len(),
        d,
        "centred_gram_cols: mean has the wrong length"
    );
    let threads = threads.min(n.div_ceil(GRAM_BLOCK)).max(1);
    let rows_per_thread = n.div_ceil(threads);
    let range = |t: usize| {
        (
            (t * rows_per_thread).min(n),
            ((t + 1) * rows_per_thread).min(n),
        )
    };
    let work = |(lo, hi): (usize, usize)| {
        let mut g = Array2::<f64>::zeros((d, d));
        let mut buf = Array2::<f64>::zeros((GRAM_BLOCK.min(hi - lo), d));
        let mut start = lo;
        while start < hi {
            let end = (start + GRAM_BLOCK).min(hi);
            let mut block = buf.slice_mut(s![..end - start, ..]);
            centre_rows(x, start, mean, block.view_mut());
            general_mat_mul(1.0, &block.t(), &block, 1.0, &mut g);
            start = end;
        }
        g
    };
    if threads == 1 {
        return work((0, n));
    }
    let partials: Vec<Array2<f64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let work = &work;
                scope.spawn(move || work(range(t)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut total = Array2::<f64>::zeros((d, d));
    for p in partials {
        total += &p;
    }
    total
}

/// Columns per panel of [`centred_gram_sym`].
const SYM_PANEL: usize = 128;

/// `Xc^T Xc` (d x d, f64) of `x` centred by `mean`, like
/// [`centred_gram_cols`] with one thread, but only the panels of columns on
/// and above the diagonal are multiplied (about half the work for large d)
/// and the lower triangle is copied from the upper one, so the result is
/// exactly symmetric. Deterministic; the largest f64 copy is
/// `GRAM_BLOCK x d`.
pub fn centred_gram_sym<T: Copy + Into<f64>>(x: ArrayView2<'_, T>, mean: &[f64]) -> Array2<f64> {
    let (n, d) = x.dim();
    assert_eq!(mean.len(), d, "centred_gram_sym: mean has the wrong length");
    let mut g = Array2::<f64>::zeros((d, d));
    let mut buf = Array2::<f64>::zeros((GRAM_BLOCK.min(n), d));
    let panels: Vec<(usize, usize)> = (0..d)
        .step_by(SYM_PANEL)
        .map(|lo| (lo, (lo + SYM_PANEL).min(d)))
        .collect();
    let mut start = 0;
    while start < n {
        let end = (start + GRAM_BLOCK).min(n);
        let mut block = buf.slice_mut(s![..end - start, ..]);
        centre_rows(x, start, mean, block.view_mut());
        for (p, &(a0, a1)) in panels.iter().enumerate() {
            let left = block.slice(s![.., a0..a1]);
            for &(b0, b1) in &panels[p..] {
                let right = block.slice(s![.., b0..b1]);
                let mut out = g.slice_mut(s![a0..a1, b0..b1]);
                general_mat_mul(1.0, &left.t(), &right, 1.0, &mut out);
            }
        }
        start = end;
    }
    for i in 0..d {
        for j in 0..i {
            g[[i, j]] = g[[j, i]];
        }
    }
    g
}

/// `Xc Xc^T` (n x n, f64) of `x` centred by `mean`; the cheaper Gram matrix
/// when n < d (it has the same non-zero eigenvalues as `Xc^T Xc`).
pub fn centred_gram_rows<T: Copy + Into<f64>>(x: ArrayView2<'_, T>, mean: &[f64]) -> Array2<f64> {
    let (n, d) = x.dim();
    let mut xc = Array2::<f64>::zeros((n, d));
    centre_rows(x, 0, mean, xc.view_mut());
    xc.dot(&xc.t())
}

fn to_nalgebra(a: &Array2<f64>, symmetrise: bool) -> nalgebra::DMatrix<f64> {
    let d = a.nrows();
    if symmetrise {
        nalgebra::DMatrix::<f64>::from_fn(d, d, |i, j| 0.5 * (a[[i, j]] + a[[j, i]]))
    } else {
        nalgebra::DMatrix::<f64>::from_fn(d, d, |i, j| a[[i, j]])
    }
}

fn check_square_finite(a: &Array2<f64>) -> Result<(), EigenError> {
    assert_eq!(
        a.nrows(),
        a.ncols(),
        "eigendecomposition of a non-square matrix"
    );
    if a.iter().any(|v| !v.is_finite()) {
        return Err(EigenError::NonFinite);
    }
    Ok(())
}

/// Eigenvalues of the symmetric part `(A + A^T) / 2` of a square matrix, in
/// decreasing order.
pub fn sym_eigenvalues_desc(a: &Array2<f64>) -> Result<Vec<f64>, EigenError> {
    check_square_finite(a)?;
    let mut eig: Vec<f64> = to_nalgebra(a, true)
        .symmetric_eigenvalues()
        .iter()
        .copied()
        .collect();
    if eig.iter().any(|v| !v.is_finite()) {
        return Err(EigenError::NonFinite);
    }
    eig.sort_by(|a, b| b.total_cmp(a));
    Ok(eig)
}

/// Eigendecomposition of a symmetric matrix (only its lower triangle is
/// read): eigenvalues in decreasing order, eigenvectors as the matching
/// columns. Each eigenvector's sign is fixed so that its largest-magnitude
/// component (the first one on ties) is positive, so the result is
/// reproducible.
pub fn sym_eigen_desc(a: &Array2<f64>) -> Result<(Vec<f64>, Array2<f64>), EigenError> {
    check_square_finite(a)?;
    let d = a.nrows();
    let eig = nalgebra::SymmetricEigen::try_new(to_nalgebra(a, false), f64::EPSILON, 0)
        .ok_or(EigenError::NotConverged)?;
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&i, &j| eig.eigenvalues[j].total_cmp(&eig.eigenvalues[i]));
    let values: Vec<f64> = order.iter().map(|&i| eig.eigenvalues[i]).collect();
    if values.iter().any(|v| !v.is_finite()) {
        return Err(EigenError::NonFinite);
    }
    let mut vectors = Array2::<f64>::zeros((d, d));
    for (new, &old) in order.iter().enumerate() {
        let col = eig.eigenvectors.column(old);
        let mut best = 0;
        for i in 1..d {
            if col[i].abs() > col[best].abs() {
                best = i;
            }
        }
        let sign = if col[best] < 0.0 { -1.0 } else { 1.0 };
        for i in 0..d {
            vectors[[i, new]] = sign * col[i];
        }
    }
    Ok((values, vectors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    fn naive_gram(x: &Array2<f32>, mean: &[f64]) -> Array2<f64> {
        let (n, d) = x.dim();
        Array2::from_shape_fn((d, d), |(a, b)| {
            (0..n)
                .map(|i| (f64::from(x[[i, a]]) - mean[a]) * (f64::from(x[[i, b]]) - mean[b]))
                .sum()
        })
    }

    #[test]
    fn gram_matches_naive_for_any_thread_count() {
        // 1300 rows: three blocks, the last one partial.
        let x = Array2::from_shape_fn((1300, 3), |(i, j)| ((i * 31 + j * 17) % 23) as f32 * 0.1);
        let mean = col_mean(x.view());
        let naive = naive_gram(&x, mean.as_slice().unwrap());
        for threads in [0, 1, 2, 3, 8] {
            let g = centred_gram_cols(x.view(), mean.as_slice().unwrap(), threads);
            for (a, b) in g.iter().zip(naive.iter()) {
                assert!(
                    (a - b).abs() < 1e-6 * b.abs().max(1.0),
                    "{threads}: {a} vs {b}"
                );
            }
        }
        // f64 input gives the same as its f32 original.
        let g64 = centred_gram_cols(x.mapv(f64::from).view(), mean.as_slice().unwrap(), 1);
        assert_eq!(
            g64,
            centred_gram_cols(x.view(), mean.as_slice().unwrap(), 1)
        );
        let rows = centred_gram_rows(x.slice(s![..5, ..]), mean.as_slice().unwrap());
        assert_eq!(rows.dim(), (5, 5));
        let xc0: Vec<f64> = (0..3).map(|j| f64::from(x[[0, j]]) - mean[j]).collect();
        let xc1: Vec<f64> = (0..3).map(|j| f64::from(x[[1, j]]) - mean[j]).collect();
        let dot: f64 = xc0.iter().zip(&xc1).map(|(a, b)| a * b).sum();
        assert!((rows[[0, 1]] - dot).abs() < 1e-12);
    }

    #[test]
    fn symmetric_gram_matches_the_full_product() {
        // 300 columns: three panels, the last one partial; 1100 rows: three blocks.
        let x = Array2::from_shape_fn((1100, 300), |(i, j)| {
            ((i * 31 + j * 17) % 23) as f32 * 0.1 + (j % 7) as f32
        });
        let mean = col_mean(x.view());
        let full = centred_gram_cols(x.view(), mean.as_slice().unwrap(), 1);
        let sym = centred_gram_sym(x.view(), mean.as_slice().unwrap());
        let scale = full.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (a, b) in sym.iter().zip(full.iter()) {
            assert!((a - b).abs() <= 1e-12 * scale, "{a} vs {b}");
        }
        assert_eq!(sym, sym.t());
        assert_eq!(
            centred_gram_sym(x.slice(s![..0, ..]), mean.as_slice().unwrap()),
            Array2::<f64>::zeros((300, 300))
        );
    }

    #[test]
    fn empty_inputs() {
        let x = Array2::<f32>::zeros((0, 4));
        assert_eq!(col_mean(x.view()), Array1::<f64>::zeros(4));
        assert_eq!(
            centred_gram_cols(x.view(), &[0.0; 4], 2),
            Array2::zeros((4, 4))
        );
    }

    #[test]
    fn eigen_of_known_matrix() {
        // [[2, 1], [1, 2]]: eigenvalues 3 and 1, eigenvectors (1, 1)/sqrt2 and
        // (1, -1)/sqrt2 up to sign; the sign rule makes the largest component
        // positive (the first on ties).
        let a = array![[2.0, 1.0], [1.0, 2.0]];
        let (values, vectors) = sym_eigen_desc(&a).unwrap();
        assert!((values[0] - 3.0).abs() < 1e-12 && (values[1] - 1.0).abs() < 1e-12);
        let h = 0.5f64.sqrt();
        let expect = array![[h, h], [h, -h]];
        for (a, b) in vectors.iter().zip(expect.iter()) {
            assert!((a - b).abs() < 1e-12, "{vectors}");
        }
        let only = sym_eigenvalues_desc(&array![[2.0, 0.5], [1.5, 2.0]]).unwrap();
        assert!((only[0] - 3.0).abs() < 1e-12 && (only[1] - 1.0).abs() < 1e-12);
        assert_eq!(
            sym_eigen_desc(&array![[f64::NAN, 0.0], [0.0, 1.0]]),
            Err(EigenError::NonFinite)
        );
        assert_eq!(
            sym_eigenvalues_desc(&array![[1.0, f64::INFINITY], [0.0, 1.0]]),
            Err(EigenError::NonFinite)
        );
    }
}
