//! k-means for the product quantizer's sub-spaces: k-means++ seeding from a
//! fixed seed, Lloyd iterations, and empty clusters re-seeded on the points
//! farthest from their centroids. The nearest centroid of a row minimises
//! `||c||^2 - 2 x.c` (the `||x||^2` term does not change it), accumulated
//! over the row's few coordinates against the centroids stored column-major
//! (`k` lanes per coordinate), so a row's `k` scores stay in registers and
//! no `n x k` product is ever written (sub-spaces have 1-16 coordinates: a
//! matrix product spends its time packing). Ties go to the lowest centroid
//! index, so a fit is deterministic.

use bertflow_numeric::rng::SplitMix64;
use ndarray::{Array2, ArrayView2};

/// Squared norms of the rows of `c`.
fn row_norms(c: ArrayView2<f32>) -> Vec<f32> {
    c.rows().into_iter().map(|r| r.dot(&r)).collect()
}

/// The nearest centroid of each row of `x` and its squared distance (f64,
/// from the difference itself, so exact up to rounding).
pub(crate) fn assign(x: ArrayView2<f32>, c: ArrayView2<f32>) -> (Vec<usize>, Vec<f64>) {
    let d = c.ncols();
    let cn = row_norms(c);
    // Column-major centroids: coordinate t of every centroid, contiguous.
    let ct: Vec<f32> = c.t().iter().copied().collect();
    let mut labels = Vec::with_capacity(x.nrows());
    let mut dist = Vec::with_capacity(x.nrows());
    let mut row_buf = vec![0f32; d];
    for row in x.rows() {
        row_buf.iter_mut().zip(row).for_each(|(b, &v)| *b = v);
        let best = nearest(&row_buf, &ct, &cn);
        let e = row
            .iter()
            .zip(c.row(best))
            .map(|(&a, &b)| f64::from(a - b).powi(2))
            .sum::<f64>();
        labels.push(best);
        dist.push(e);
    }
    (labels, dist)
}

/// The index of the centroid minimising `cn[j] - 2 x.c_j` (the lowest on
/// ties), `ct` holding the centroids column-major (`x.len() x cn.len()`).
fn nearest(x: &[f32], ct: &[f32], cn: &[f32]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present (checked just above).
        return unsafe { nearest_avx2(x, ct, cn) };
    }
    nearest_scalar(x, ct, cn, 0, usize::MAX, f32::INFINITY)
}

/// The score of centroid `j` (the same operations in the same order as
/// the vector kernel, so both pick the same centroid).
#[inline(always)]
fn score(x: &[f32], ct: &[f32], cn: &[f32], j: usize) -> f32 {
    let k = cn.len();
    x.iter()
        .enumerate()
        .fold(cn[j], |s, (t, &xt)| s + (-2.0 * xt) * ct[t * k + j])
}

/// [`nearest`] over the centroids from `from` on, given the best so far.
fn nearest_scalar(x: &[f32], ct: &[f32], cn: &[f32], from: usize, arg: usize, min: f32) -> usize {
    let (mut min, mut arg) = (min, arg);
    for j in from..cn.len() {
        let v = score(x, ct, cn, j);
        if v < min {
            (min, arg) = (v, j);
        }
    }
    if arg == usize::MAX {
        0
    } else {
        arg
    }
}

/// Centroids scored at once by the AVX2 kernel (four registers).
#[cfg(target_arch = "x86_64")]
const LANES: usize = 32;

/// [`nearest`] with AVX2: 32 centroids' scores held in four registers over
/// the coordinates, with the lowest score of each lane and the group where
/// it was first seen.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn nearest_avx2(x: &[f32], ct: &[f32], cn: &[f32]) -> usize {
    use std::arch::x86_64::*;
    let k = cn.len();
    let full = k - k % LANES;
    let mut best = [_mm256_set1_ps(f32::INFINITY); 4];
    let mut at = [_mm256_set1_epi32(-1); 4];
    for c0 in (0..full).step_by(LANES) {
        let mut a = [_mm256_setzero_ps(); 4];
        for (i, a) in a.iter_mut().enumerate() {
            *a = _mm256_loadu_ps(cn[c0 + 8 * i..].as_ptr());
        }
        for (t, &xt) in x.iter().enumerate() {
            let xv = _mm256_set1_ps(-2.0 * xt);
            let col = &ct[t * k + c0..t * k + c0 + LANES];
            for (i, a) in a.iter_mut().enumerate() {
                let c = _mm256_loadu_ps(col[8 * i..].as_ptr());
                *a = _mm256_add_ps(*a, _mm256_mul_ps(xv, c));
            }
        }
        let group = _mm256_set1_epi32(c0 as i32);
        for i in 0..4 {
            let lower = _mm256_cmp_ps::<_CMP_LT_OQ>(a[i], best[i]);
            best[i] = _mm256_blendv_ps(best[i], a[i], lower);
            at[i] = _mm256_blendv_epi8(at[i], group, _mm256_castps_si256(lower));
        }
    }
    let mut vals = [0f32; LANES];
    let mut groups = [0i32; LANES];
    for i in 0..4 {
        _mm256_storeu_ps(vals[8 * i..].as_mut_ptr(), best[i]);
        _mm256_storeu_si256(groups[8 * i..].as_mut_ptr().cast(), at[i]);
    }
    let (mut min, mut arg) = (f32::INFINITY, usize::MAX);
    for (l, (&v, &g)) in vals.iter().zip(&groups).enumerate() {
        if g < 0 {
            continue;
        }
        let j = g as usize + l;
        if v < min || (v == min && j < arg) {
            (min, arg) = (v, j);
        }
    }
    nearest_scalar(x, ct, cn, full, arg, min)
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

    /// The vector kernel picks the centroid the scalar model picks, ties
    /// included (duplicated centroids), for counts around the lane width.
    #[test]
    fn nearest_kernel_equals_the_scalar_model() {
        let mut rng = SplitMix64::new(11);
        for (k, d) in [
            (1, 1),
            (31, 3),
            (32, 6),
            (33, 2),
            (64, 12),
            (256, 6),
            (300, 1),
        ] {
            let mut c = Array2::<f32>::zeros((k, d));
            c.mapv_inplace(|_| rng.normal() as f32);
            // Duplicates: ties between a low and a high index.
            if k > 40 {
                let low = c.row(3).to_owned();
                c.row_mut(k - 1).assign(&low);
            }
            let cn = row_norms(c.view());
            let ct: Vec<f32> = c.t().iter().copied().collect();
            for i in 0..200 {
                let x: Vec<f32> = if i % 4 == 0 {
                    c.row(3 % k).to_vec()
                } else {
                    (0..d).map(|_| rng.normal() as f32).collect()
                };
                let want = nearest_scalar(&x, &ct, &cn, 0, usize::MAX, f32::INFINITY);
                assert_eq!(nearest(&x, &ct, &cn), want, "k {k} d {d} row {i}");
            }
        }
    }

    #[test]
    fn assignment_breaks_ties_by_lowest_index() {
        let x = ndarray::array![[0.5f32]];
        let c = ndarray::array![[0.0f32], [1.0]];
        assert_eq!(assign(x.view(), c.view()).0, vec![0]);
    }
}
