//! Streaming, mergeable moment statistics: count, mean and co-moment matrix
//! in f64, the sufficient statistics of `none`, `sn`, `whiten`, `natsv` and
//! `sn+natsv`.
//!
//! Batches are folded in with the pairwise update of Chan, Golub & LeVeque
//! (1979): a batch's own mean and centred co-moment (a matrix product on the
//! centred f64 block) are merged into the running statistics, so memory is
//! `O(d^2)` whatever the number of rows, and statistics from different
//! workers or files merge exactly (up to rounding) into those of the union.

use bertflow_numeric::{centred_gram_sym, col_mean};
use ndarray::{s, Array1, Array2, ArrayView2};

use crate::error::{CalibError, Result};

mod bytes;

/// Rows per block of [`MomentStats::update`]: each block's statistics are
/// computed on their own (in parallel) and merged in block order, so the
/// result does not depend on the number of threads, and feeding a matrix in
/// chunks whose sizes are multiples of `MOMENT_BLOCK` gives bit for bit the
/// statistics of one `update` with the whole matrix.
pub const MOMENT_BLOCK: usize = 1024;

/// The in-flight per-thread co-moment matrices of one `update` are kept
/// below this many bytes (relevant only for very wide embeddings).
const PARTIALS_BUDGET: usize = 256 << 20;

/// Count, mean and co-moment matrix `M2 = sum_i (x_i - mean)(x_i - mean)^T`
/// of a stream of `d`-dimensional rows, in f64.
///
/// ```
/// use bertflow_calib::{MomentStats, CalibSpec, Calibrator};
/// # fn demo(a: ndarray::Array2<f32>, b: ndarray::Array2<f32>) -> bertflow_calib::Result<()> {
/// let mut left = MomentStats::new(a.ncols());
/// left.update(a.view())?;
/// let mut right = MomentStats::new(b.ncols());
/// right.update(b.view())?;
/// left.merge(&right)?;
/// let again = MomentStats::from_bytes(&left.to_bytes())?;
/// let whiten = again.fit(&"whiten:k=256".parse::<CalibSpec>()?)?;
/// let y = whiten.transform(a.view())?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MomentStats {
    dim: usize,
    count: u64,
    mean: Array1<f64>,
    m2: Array2<f64>,
    threads: usize,
}

/// One block's statistics, before they are merged.
struct Part {
    count: u64,
    mean: Array1<f64>,
    m2: Array2<f64>,
}

impl MomentStats {
    /// Empty statistics of `dim`-dimensional rows.
    pub fn new(dim: usize) -> Self {
        MomentStats {
            dim,
            count: 0,
            mean: Array1::zeros(dim),
            m2: Array2::zeros((dim, dim)),
            threads: 0,
        }
    }

    /// The statistics of `x` (one row per embedding), in one [`update`](Self::update).
    pub fn from_data(x: ArrayView2<f32>) -> Result<Self> {
        let mut s = MomentStats::new(x.ncols());
        s.update(x)?;
        Ok(s)
    }

    /// Worker threads of [`update`](Self::update): 0 (the default) uses the
    /// available cores, at most 8. The result never depends on it.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// Row dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of rows seen.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Column means (zeros while empty).
    pub fn mean(&self) -> &Array1<f64> {
        &self.mean
    }

    /// The co-moment matrix `M2` (d x d, exactly symmetric).
    pub fn comoment(&self) -> &Array2<f64> {
        &self.m2
    }

    /// Sample covariance `M2 / (n - 1)` (numpy's `np.cov`). Needs 2 rows.
    pub fn covariance(&self) -> Result<Array2<f64>> {
        crate::stats::check_rows("covariance", self.count, 2)?;
        Ok(&self.m2 / (self.count - 1) as f64)
    }

    /// Population variance per dimension, `diag(M2) / n` (numpy's
    /// `np.var`). Needs 1 row.
    pub fn variance(&self) -> Result<Array1<f64>> {
        crate::stats::check_rows("variance", self.count, 1)?;
        Ok(self.m2.diag().mapv(|v| v / self.count as f64))
    }

    /// Adds the rows of `x`. Errors, leaving the statistics unchanged, on a
    /// column count other than [`dim`](Self::dim) or a NaN/inf value (the
    /// error names its row within `x` and its column). An empty `x` is a
    /// no-op.
    pub fn update(&mut self, x: ArrayView2<f32>) -> Result<()> {
        self.check_batch(x.ncols())?;
        crate::stats::check_finite(x)?;
        self.update_checked(x)
    }

    /// [`update`](Self::update) for f64 rows (reported non-finite values
    /// are shown as f32).
    pub fn update_f64(&mut self, x: ArrayView2<f64>) -> Result<()> {
        self.check_batch(x.ncols())?;
        if let Some(((row, col), &v)) = x.indexed_iter().find(|(_, v)| !v.is_finite()) {
            return Err(CalibError::NonFiniteInput {
                row,
                col,
                value: v as f32,
            });
        }
        self.update_checked(x)
    }

    fn check_batch(&self, cols: usize) -> Result<()> {
        if cols != self.dim {
            return Err(CalibError::DimMismatch {
                expected: self.dim,
                found: cols,
            });
        }
        Ok(())
    }

    fn threads_for(&self, blocks: usize) -> usize {
        let want = if self.threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
        } else {
            self.threads
        };
        let per_thread = (self.dim * self.dim + bertflow_numeric::linalg::GRAM_BLOCK * self.dim)
            * std::mem::size_of::<f64>();
        let by_memory = PARTIALS_BUDGET / per_thread.max(1);
        want.min(by_memory).min(blocks).max(1)
    }

    /// Adds finite rows of the right width: blocks of [`MOMENT_BLOCK`] rows
    /// are reduced in parallel rounds and merged in order.
    fn update_checked<T: Copy + Into<f64> + Sync>(&mut self, x: ArrayView2<T>) -> Result<()> {
        let n = x.nrows();
        if n == 0 {
            return Ok(());
        }
        let blocks = n.div_ceil(MOMENT_BLOCK);
        let threads = self.threads_for(blocks);
        let block = |b: usize| {
            let rows = x.slice(s![b * MOMENT_BLOCK..((b + 1) * MOMENT_BLOCK).min(n), ..]);
            block_part(rows)
        };
        let mut next = self.clone();
        let mut b = 0;
        while b < blocks {
            let round = threads.min(blocks - b);
            let parts: Vec<Part> = if round == 1 {
                vec![block(b)]
            } else {
                std::thread::scope(|scope| {
                    let handles: Vec<_> = (b..b + round)
                        .map(|i| {
                            let block = &block;
                            scope.spawn(move || block(i))
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                        .collect()
                })
            };
            for part in &parts {
                next.merge_part(part.count, &part.mean, &part.m2)?;
            }
            b += round;
        }
        if next
            .mean
            .iter()
            .chain(next.m2.iter())
            .any(|v| !v.is_finite())
        {
            return Err(CalibError::Numerical(
                "the moment statistics overflowed (values too large for f64 squares)".into(),
            ));
        }
        *self = next;
        Ok(())
    }

    /// Merges `other` (statistics of other rows of the same dimension) into
    /// `self`, with the pairwise formula of Chan, Golub & LeVeque:
    /// `n = na + nb`, `delta = mean_b - mean_a`,
    /// `mean = mean_a + delta nb / n`,
    /// `M2 = M2_a + M2_b + delta delta^T na nb / n`.
    /// Merging with an empty side copies the other side exactly.
    pub fn merge(&mut self, other: &MomentStats) -> Result<()> {
        self.check_batch(other.dim)?;
        self.merge_part(other.count, &other.mean, &other.m2)
    }

    fn merge_part(&mut self, nb: u64, mean_b: &Array1<f64>, m2_b: &Array2<f64>) -> Result<()> {
        if nb == 0 {
            return Ok(());
        }
        let total = self.count.checked_add(nb).ok_or_else(|| {
            CalibError::Moments("the row count overflows a 64-bit integer".into())
        })?;
        if self.count == 0 {
            self.count = nb;
            self.mean.assign(mean_b);
            self.m2.assign(m2_b);
            return Ok(());
        }
        let (na, nbf) = (self.count as f64, nb as f64);
        let n = total as f64;
        let delta = mean_b - &self.mean;
        self.mean.scaled_add(nbf / n, &delta);
        let f = na * nbf / n;
        self.m2 += m2_b;
        // (d_i d_j) f is exactly symmetric, so M2 stays exactly symmetric.
        for (mut row, &di) in self.m2.rows_mut().into_iter().zip(delta.iter()) {
            for (m, &dj) in row.iter_mut().zip(delta.iter()) {
                *m += di * dj * f;
            }
        }
        self.count = total;
        Ok(())
    }

    /// The statistics as bytes: a versioned little-endian format with a
    /// magic string, the dimension, the count, the mean, the upper triangle
    /// of `M2` and a CRC-32 (see [`MomentStats::from_bytes`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        bytes::encode(self)
    }

    /// Reads [`MomentStats::to_bytes`]' format. A truncated, padded or
    /// corrupted buffer, a wrong magic string or an unknown version is an
    /// error ([`CalibError::Moments`]), never a panic.
    pub fn from_bytes(buf: &[u8]) -> Result<Self> {
        bytes::decode(buf)
    }
}

/// A block's own count, mean and (exactly symmetric) centred co-moment.
fn block_part<T: Copy + Into<f64> + Sync>(rows: ArrayView2<T>) -> Part {
    let mean = col_mean(rows);
    let m2 = centred_gram_sym(rows, mean.as_slice().expect("contiguous mean"));
    Part {
        count: rows.nrows() as u64,
        mean,
        m2,
    }
}

/// Checks that moment statistics can fit `kind`: at least one column and
/// `min_rows` rows (the same messages as a fit on the data itself).
pub(crate) fn check_moments(kind: &'static str, stats: &MomentStats, min_rows: u64) -> Result<()> {
    crate::stats::check_size(kind, stats.dim(), stats.count(), min_rows)
}

/// Internal constructor for [`bytes::decode`].
pub(crate) fn from_parts(
    dim: usize,
    count: u64,
    mean: Array1<f64>,
    m2: Array2<f64>,
) -> MomentStats {
    MomentStats {
        dim,
        count,
        mean,
        m2,
        threads: 0,
    }
}
