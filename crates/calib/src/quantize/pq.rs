//! Product quantization (Jégou et al. 2011) with an optional learned
//! rotation (OPQ, Ge et al. 2013, the non-parametric alternation faiss's
//! `OPQMatrix` runs).
//!
//! The `dim` coordinates (after the rotation `R`, `z = x R`) are cut into
//! `m` sub-vectors of `dim / m`; each has its own 256 centroids (k-means on
//! the fit set), and a vector's code is the index of the nearest centroid
//! of each sub-vector: one byte per sub-vector. Its reconstruction is the
//! chosen centroids concatenated and rotated back (`y R^T`), so cosines of
//! reconstructions stand for cosines of the vectors (faiss's `sa_decode`).
//!
//! OPQ starts from a random rotation (seeded; faiss's start), which spreads
//! every direction over all the sub-spaces, then alternates:
//! k-means of the rotated rows (warm-started from the previous centroids),
//! and the orthogonal Procrustes rotation `R` that brings `X R` closest to
//! the reconstructions `Y` (the polar factor of `X^T Y`, as in ITQ). Neither
//! step raises the reconstruction error `||X R - Y||^2`; its value after
//! each round is kept in [`Fit::objective`].
//!
//! Another start was measured on all-MiniLM-L6-v2 `last-avg` at 64
//! bytes and dropped: eigenvalue allocation (the principal axes dealt to
//! the sub-spaces so that their energy products balance, Ge et al.'s
//! parametric start) reaches a lower reconstruction error but a much lower
//! recall@10 (0.713 against 0.765 for plain PQ): it leaves the dominant
//! common direction of the embeddings in one sub-space, whose error every
//! query's large component along it then amplifies.

use ndarray::{s, Array2, Array3, ArrayView2, Axis};

use super::kmeans;
use crate::error::Result;

/// Centroids per sub-space (one byte per code).
pub const CENTROIDS: usize = 256;
/// Lloyd iterations of the first k-means and of the final one.
pub const KMEANS_ITERS: usize = 25;
/// Lloyd iterations of the k-means within each OPQ round (warm-started;
/// faiss's `niter_pq`).
pub const OPQ_KMEANS_ITERS: usize = 4;
/// Seed of the k-means++ seeding (fits are deterministic).
pub const SEED: u64 = 0x005E_ED0F_C0DE;

/// A fitted product quantizer.
pub(crate) struct Fit {
    /// Centroids, `m x 256 x dim / m`.
    pub centroids: Array3<f32>,
    /// The rotation (`dim x dim`), with OPQ.
    pub rotation: Option<Array2<f64>>,
    /// OPQ: `||X R - Y||^2` after each round (non-increasing).
    pub objective: Vec<f64>,
}

/// The rotated rows `x R` in f32.
pub(crate) fn rotate(x: ArrayView2<f32>, r: Option<&Array2<f64>>) -> Array2<f32> {
    match r {
        Some(r) => x.dot(&r.mapv(|v| v as f32)),
        None => kmeans::contiguous(x),
    }
}

/// `f(j)` for each sub-space `j < m`, on every core (sub-spaces are
/// independent, so the results do not depend on the number of threads).
fn per_subspace<T: Send>(m: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(m);
    if threads <= 1 {
        return (0..m).map(f).collect();
    }
    let f = &f;
    let mut parts: Vec<Vec<(usize, T)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| scope.spawn(move || (t..m).step_by(threads).map(|j| (j, f(j))).collect()))
            .collect();
        handles
            .into_iter()
            // A worker panics only where `f` itself would have: pass it on.
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut out: Vec<(usize, T)> = parts.drain(..).flatten().collect();
    out.sort_by_key(|(j, _)| *j);
    out.into_iter().map(|(_, t)| t).collect()
}

/// Trains (or, with `warm`, refines) the sub-space centroids of the rows
/// `z` in `iters` Lloyd iterations; returns them with the codes and the
/// total squared error.
fn train(
    z: ArrayView2<f32>,
    m: usize,
    iters: usize,
    warm: Option<Array3<f32>>,
) -> (Array3<f32>, Array2<u8>, f64) {
    let dsub = z.ncols() / m;
    let fitted = per_subspace(m, |j| {
        let sub = kmeans::contiguous(z.slice(s![.., j * dsub..(j + 1) * dsub]));
        let mut c = match &warm {
            None => {
                let mut rng = bertflow_numeric::rng::SplitMix64::new(SEED ^ j as u64);
                kmeans::seed_plus_plus(sub.view(), CENTROIDS, &mut rng)
            }
            Some(w) => w.index_axis(Axis(0), j).to_owned(),
        };
        let (labels, err) = kmeans::lloyd(sub.view(), &mut c, iters);
        (c, labels, err)
    });
    let mut centroids = Array3::zeros((m, CENTROIDS, dsub));
    let mut codes = Array2::<u8>::zeros((z.nrows(), m));
    let mut total = 0.0;
    for (j, (c, labels, err)) in fitted.into_iter().enumerate() {
        centroids.index_axis_mut(Axis(0), j).assign(&c);
        for (code, l) in codes.column_mut(j).iter_mut().zip(labels) {
            *code = l as u8;
        }
        total += err;
    }
    (centroids, codes, total)
}

/// The codes of the (rotated) rows `z`.
pub(crate) fn encode(z: ArrayView2<f32>, centroids: &Array3<f32>) -> Array2<u8> {
    let (m, _, dsub) = centroids.dim();
    let labels = per_subspace(m, |j| {
        let sub = kmeans::contiguous(z.slice(s![.., j * dsub..(j + 1) * dsub]));
        kmeans::assign(sub.view(), centroids.index_axis(Axis(0), j)).0
    });
    let mut codes = Array2::<u8>::zeros((z.nrows(), m));
    for (j, labels) in labels.into_iter().enumerate() {
        for (code, l) in codes.column_mut(j).iter_mut().zip(labels) {
            *code = l as u8;
        }
    }
    codes
}

/// The centroids of `codes` concatenated (in the rotated space).
pub(crate) fn decode(codes: ArrayView2<u8>, centroids: &Array3<f32>) -> Array2<f32> {
    let (m, _, dsub) = centroids.dim();
    let mut y = Array2::<f32>::zeros((codes.nrows(), m * dsub));
    for (mut out, row) in y.rows_mut().into_iter().zip(codes.rows()) {
        for (j, &c) in row.iter().enumerate() {
            out.slice_mut(s![j * dsub..(j + 1) * dsub])
                .assign(&centroids.slice(s![j, usize::from(c), ..]));
        }
    }
    y
}

/// A random rotation (the orthogonal polar factor of a Gaussian matrix,
/// from [`SEED`]): faiss's `OPQMatrix` start.
fn random_rotation(d: usize) -> Result<Array2<f64>> {
    let mut rng = bertflow_numeric::rng::SplitMix64::new(SEED);
    let g = Array2::from_shape_simple_fn((d, d), || rng.normal());
    super::itq::polar(&g)
}

/// Fits `m` sub-quantizers on the rows of `x` (`dim` divisible by `m`, at
/// least 256 rows: checked by the caller); with `opq = Some(rounds)`, the
/// rotation first, in that many rounds.
pub(crate) fn fit(x: ArrayView2<f32>, m: usize, opq: Option<usize>) -> Result<Fit> {
    let Some(rounds) = opq else {
        let (centroids, _, _) = train(x, m, KMEANS_ITERS, None);
        return Ok(Fit {
            centroids,
            rotation: None,
            objective: Vec::new(),
        });
    };
    let xt = x.t().to_owned();
    let mut r = random_rotation(x.ncols())?;
    let mut z = rotate(x, Some(&r));
    let (mut centroids, mut codes, err) = train(z.view(), m, KMEANS_ITERS, None);
    let mut objective = vec![err];
    for _ in 0..rounds {
        let y = decode(codes.view(), &centroids);
        let xty = xt.dot(&y).mapv(f64::from);
        r = super::itq::polar(&xty)?;
        z = rotate(x, Some(&r));
        let (c, k, err) = train(z.view(), m, OPQ_KMEANS_ITERS, Some(centroids));
        (centroids, codes) = (c, k);
        objective.push(err);
    }
    let (centroids, _, _) = train(z.view(), m, KMEANS_ITERS, Some(centroids));
    Ok(Fit {
        centroids,
        rotation: Some(r),
        objective,
    })
}
