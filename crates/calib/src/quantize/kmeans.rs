//! k-means for the product quantizer's sub-spaces: k-means++ seeding from a
//! fixed seed, Lloyd iterations, and empty clusters re-seeded on the points
//! farthest from their centroids. Distances come from matrix products in
//! blocks of rows (`||x||^2 - 2 x.c + ||c||^2`; the `||x||^2` term does not
//! change the nearest centroid). Ties go to the lowest centroid index, so
//! a fit is deterministic.

use bertflow_numeric::rng::SplitMix64;
use ndarray::{linalg::general_mat_mul, s, Array1, Array2, ArrayView2};

/// Rows per block of the distance products (a block's distances stay in
/// cache: 1024 x 256 f32).
const BLOCK: usize = 1024;

/// Squared norms of the rows of `c`.
fn row_norms(c: ArrayView2<f32>) -> Array1<f32> {
    c.rows().into_iter().map(|r| r.dot(&r)).collect()
}

/// The nearest centroid of each row of `x` and its squared distance (f64,
/// from the difference itself, so exact up to rounding).
pub(crate) fn assign(x: ArrayView2<f32>, c: ArrayView2<f32>) -> (Vec<usize>, Vec<f64>) {
    let n = x.nrows();
    let k = c.nrows();
    let cn = row_norms(c);
    let mut labels = Vec::with_capacity(n);
    let mut dist = Vec::with_capacity(n);
    let mut prod = Array2::<f32>::zeros((BLOCK.min(n.max(1)), k));
    for start in (0..n).step_by(BLOCK) {
        let end = (start + BLOCK).min(n);
        let xb = x.slice(s![start..end, ..]);
        let mut pb = prod.slice_mut(s![..end - start, ..]);
        general_mat_mul(1.0, &xb, &c.t(), 0.0, &mut pb);
        for (row, p) in xb.rows().into_iter().zip(pb.rows()) {
            let (mut best, mut best_d) = (0usize, f32::INFINITY);
            for (j, (&pj, &nj)) in p.iter().zip(cn.iter()).enumerate() {
                let d = nj - 2.0 * pj;
                if d < best_d {
                    best_d = d;
                    best = j;
                }
            }
            let e = row
                .iter()
                .zip(c.row(best))
                .map(|(&a, &b)| f64::from(a - b).powi(2))
                .sum::<f64>();
            labels.push(best);
            dist.push(e);
        }
    }
    (labels, dist)
}

/// k-means++ seeding: the first centroid a random row, each next one a row
/// drawn with probability proportional to its squared distance to the
/// nearest chosen centroid (a duplicate row when every distance is 0).
pub(crate) fn seed_plus_plus(x: ArrayView2<f32>, k: usize, rng: &mut SplitMix64) -> Array2<f32> {
    let n = x.nrows();
    let mut c = Array2::<f32>::zeros((k, x.ncols()));
    let first = rng.below(n);
    c.row_mut(0).assign(&x.row(first));
    let sq = |i: usize, row: ndarray::ArrayView1<f32>| -> f64 {
        x.row(i)
            .iter()
            .zip(row)
            .map(|(&a, &b)| f64::from(a - b).powi(2))
            .sum()
    };
    let mut d: Vec<f64> = (0..n).map(|i| sq(i, c.row(0))).collect();
    for j in 1..k {
        let total: f64 = d.iter().sum();
        let pick = if total > 0.0 {
            let mut target = rng.next_f64() * total;
            let mut pick = n - 1;
            for (i, &di) in d.iter().enumerate() {
                if target < di {
                    pick = i;
                    break;
                }
                target -= di;
            }
            pick
        } else {
            rng.below(n)
        };
        c.row_mut(j).assign(&x.row(pick));
        for (i, di) in d.iter_mut().enumerate() {
            let e = sq(i, c.row(j));
            if e < *di {
                *di = e;
            }
        }
    }
    c
}

/// Lloyd iterations from the centroids `c` (k x d) on the rows of `x`:
/// each assigns every row to its nearest centroid, then moves each
/// centroid to the mean of its rows; a centroid left without rows moves to
/// the row farthest from its own centroid (distinct rows for several empty
/// ones), which can only lower the error. Returns the labels and the total
/// squared error of the last assignment to the final centroids.
pub(crate) fn lloyd(x: ArrayView2<f32>, c: &mut Array2<f32>, iters: usize) -> (Vec<usize>, f64) {
    let (k, d) = c.dim();
    for _ in 0..iters {
        let (labels, dist) = assign(x, c.view());
        let mut sums = Array2::<f64>::zeros((k, d));
        let mut counts = vec![0usize; k];
        for (row, &l) in x.rows().into_iter().zip(&labels) {
            counts[l] += 1;
            sums.row_mut(l)
                .iter_mut()
                .zip(row)
                .for_each(|(s, &v)| *s += f64::from(v));
        }
        let mut far: Vec<usize> = Vec::new();
        for (j, &count) in counts.iter().enumerate() {
            if count > 0 {
                let inv = 1.0 / count as f64;
                c.row_mut(j)
                    .iter_mut()
                    .zip(sums.row(j))
                    .for_each(|(cj, &s)| *cj = (s * inv) as f32);
                continue;
            }
            if far.is_empty() {
                far = (0..x.nrows()).collect();
                // Farthest first; ties by row index (stable sort).
                far.sort_by(|&a, &b| dist[b].total_cmp(&dist[a]));
                far.reverse();
            }
            if let Some(i) = far.pop() {
                c.row_mut(j).assign(&x.row(i));
            }
        }
    }
    let (labels, dist) = assign(x, c.view());
    (labels, dist.iter().sum())
}

/// k-means of the rows of `x` into `k` clusters: k-means++ from `seed`,
/// then `iters` Lloyd iterations. `x` needs at least one row.
#[cfg(test)]
pub(crate) fn fit(x: ArrayView2<f32>, k: usize, iters: usize, seed: u64) -> Array2<f32> {
    let mut rng = SplitMix64::new(seed);
    let mut c = seed_plus_plus(x, k, &mut rng);
    lloyd(x, &mut c, iters);
    c
}

/// The rows of `x` as a standard-layout copy (sub-space column blocks are
/// strided views).
pub(crate) fn contiguous(x: ArrayView2<f32>) -> Array2<f32> {
    let mut out = Array2::<f32>::zeros(x.dim());
    out.assign(&x);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four tight, well separated clusters in 2-D: k-means with k = 4
    /// recovers the partition exactly and the centroids are the means.
    #[test]
    fn recovers_separated_clusters() {
        let centres = [[0.0f32, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]];
        let mut rng = SplitMix64::new(7);
        let mut x = Array2::<f32>::zeros((400, 2));
        let mut truth = Vec::new();
        for i in 0..400 {
            let c = (i * 7) % 4;
            truth.push(c);
            x[[i, 0]] = centres[c][0] + 0.1 * rng.normal() as f32;
            x[[i, 1]] = centres[c][1] + 0.1 * rng.normal() as f32;
        }
        for seed in 0..5 {
            let c = fit(x.view(), 4, 20, seed);
            let (labels, _) = assign(x.view(), c.view());
            // Same partition: one label per true cluster, all different.
            let mut map = [usize::MAX; 4];
            for (&t, &l) in truth.iter().zip(&labels) {
                if map[t] == usize::MAX {
                    map[t] = l;
                }
                assert_eq!(map[t], l, "seed {seed}: cluster {t} split");
            }
            let mut seen = map.to_vec();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), 4, "seed {seed}: clusters merged");
            for t in 0..4 {
                let rows: Vec<usize> = (0..400).filter(|&i| truth[i] == t).collect();
                for col in 0..2 {
                    let mean = rows.iter().map(|&i| f64::from(x[[i, col]])).sum::<f64>()
                        / rows.len() as f64;
                    assert!((f64::from(c[[map[t], col]]) - mean).abs() < 1e-4);
                }
            }
        }
    }

    /// A centroid with no rows is moved onto the farthest row: three
    /// centroids on two distinct points, one far away from both.
    #[test]
    fn empty_cluster_is_reseeded() {
        let x = ndarray::array![[0.0f32], [0.0], [1.0], [1.0], [100.0]];
        let mut c = ndarray::array![[0.0f32], [1.0], [-50.0]];
        let (labels, err) = lloyd(x.view(), &mut c, 3);
        assert_eq!(c.column(0).to_vec(), vec![0.0, 1.0, 100.0]);
        assert_eq!(labels, vec![0, 0, 1, 1, 2]);
        assert_eq!(err, 0.0);
    }

    #[test]
    fn assignment_breaks_ties_by_lowest_index() {
        let x = ndarray::array![[0.5f32]];
        let c = ndarray::array![[0.0f32], [1.0]];
        assert_eq!(assign(x.view(), c.view()).0, vec![0]);
    }
}
