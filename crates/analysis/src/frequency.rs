//! Word frequency vs geometry of the static word-embedding matrix
//! (Li et al. 2020, section 2.2: frequent words lie closer to the origin and
//! rare words are sparsely scattered, far from their neighbours).

use ndarray::{Array2, ArrayView2};
use serde::{Deserialize, Serialize};

use crate::error::{check_finite, AnalysisError, Result};
use crate::linalg::{block_dot_t, par_blocks, row_sq_norms};
use bertflow_numeric::SplitMix64;

/// Parameters of [`frequency_geometry`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrequencyConfig {
    /// Strictly increasing frequency-rank edges: bucket `i` holds the ranks
    /// `[edges[i], edges[i+1])` and the last bucket `[edges[last], inf)`.
    /// Ranks below `edges[0]` are in no bucket.
    pub bucket_edges: Vec<usize>,
    /// Number of nearest neighbours (`>= 1`).
    pub k: usize,
    /// At most this many query tokens per bucket for the kNN distance
    /// (a seeded random subset); `None` queries every token of the bucket.
    pub max_queries_per_bucket: Option<usize>,
    /// Seed of the query subsampling.
    pub seed: u64,
}

impl Default for FrequencyConfig {
    /// Edges `[0, 100, 500, 1000, 5000, 10000]`, `k = 3`, at most 2000 kNN
    /// queries per bucket (so at most 12,000 queries in all, whatever the
    /// corpus), seed 0.
    fn default() -> Self {
        Self {
            bucket_edges: vec![0, 100, 500, 1000, 5000, 10000],
            k: 3,
            max_queries_per_bucket: Some(2000),
            seed: 0,
        }
    }
}

/// One frequency-rank bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrequencyBucket {
    /// First rank of the bucket (rank 0 = most frequent token).
    pub rank_start: usize,
    /// One past the last rank; `None` for the open last bucket.
    pub rank_end: Option<usize>,
    /// Number of tokens (with count > 0) in the bucket.
    pub n_tokens: usize,
    /// Mean l2 norm of their embeddings (`None` for an empty bucket).
    pub mean_norm: Option<f64>,
    /// Mean over the query tokens of the mean l2 distance to their `k`
    /// nearest neighbours (`None` for an empty bucket).
    pub mean_knn_distance: Option<f64>,
    /// Number of tokens used as kNN queries (all, or the capped subset).
    pub n_knn_queries: usize,
}

/// One token with a non-zero count, for the norm-vs-rank plot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenPoint {
    /// Row of the embedding matrix.
    pub token_id: usize,
    /// Frequency rank (0 = most frequent).
    pub rank: usize,
    /// Occurrence count.
    pub count: u64,
    /// l2 norm of the token's embedding.
    pub norm: f64,
}

/// Result of [`frequency_geometry`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrequencyGeometry {
    /// Number of neighbours used.
    pub k: usize,
    /// Rows of the embedding matrix.
    pub vocab_size: usize,
    /// Tokens with count > 0.
    pub n_seen_tokens: usize,
    /// One row per bucket, in edge order.
    pub buckets: Vec<FrequencyBucket>,
    /// Every token with count > 0, by increasing rank.
    pub tokens: Vec<TokenPoint>,
}

/// Norms and kNN distances of word embeddings per frequency-rank bucket.
///
/// * `counts[t]` is the number of occurrences of token `t` in a corpus;
///   `embeddings` has one row per token (vocab x hidden), `counts.len()` rows.
/// * Ranks: tokens with count > 0 sorted by decreasing count, ties by
///   increasing token id. Tokens with count 0 get no rank and are in no
///   bucket, but they are candidate neighbours.
/// * kNN: exact brute force. The queries are the bucketed tokens (or a
///   seeded subset of at most `max_queries_per_bucket` per bucket); the
///   candidates are **all** vocabulary rows except the query itself (a
///   different token with an identical vector is a neighbour at distance 0).
///   Candidates are selected with blocked f32 matrix products
///   (`|q|^2 + |v|^2 - 2 q.v`, several threads) and the distances to the
///   selected `k` are recomputed exactly in f64. Cost
///   `O(queries x vocab x hidden)`: 10k queries x 30k x 384 is about 2e11
///   flops, several seconds on two cores; the default query cap bounds it.
///
/// Errors: `counts.len()` differs from the number of rows, no columns,
/// non-finite values, `k == 0` or `k >= vocab size`, edges empty or not
/// strictly increasing, `max_queries_per_bucket == Some(0)`.
pub fn frequency_geometry(
    counts: &[u64],
    embeddings: ArrayView2<'_, f32>,
    config: &FrequencyConfig,
) -> Result<FrequencyGeometry> {
    let (vocab, hidden) = embeddings.dim();
    if counts.len() != vocab {
        return Err(AnalysisError::LengthMismatch {
            what: "frequency_geometry: token counts vs embedding rows",
            left: counts.len(),
            right: vocab,
        });
    }
    if hidden == 0 {
        return Err(AnalysisError::TooFew {
            what: "frequency_geometry: embedding dimensions",
            needed: 1,
            got: 0,
        });
    }
    if config.k == 0 || config.k >= vocab {
        return Err(AnalysisError::InvalidParameter(format!(
            "frequency_geometry: k must be in 1..{vocab} (vocabulary size), got {}",
            config.k
        )));
    }
    let edges = &config.bucket_edges;
    if edges.is_empty() || edges.windows(2).any(|w| w[0] >= w[1]) {
        return Err(AnalysisError::InvalidParameter(format!(
            "frequency_geometry: bucket edges must be non-empty and strictly increasing, got {edges:?}"
        )));
    }
    if config.max_queries_per_bucket == Some(0) {
        return Err(AnalysisError::InvalidParameter(
            "frequency_geometry: max_queries_per_bucket must be at least 1".into(),
        ));
    }
    check_finite("frequency_geometry: embeddings", embeddings.iter())?;

    let sq = row_sq_norms(embeddings);
    let mut seen: Vec<usize> = (0..vocab).filter(|&t| counts[t] > 0).collect();
    seen.sort_by(|&a, &b| counts[b].cmp(&counts[a]).then(a.cmp(&b)));
    let tokens: Vec<TokenPoint> = seen
        .iter()
        .enumerate()
        .map(|(rank, &t)| TokenPoint {
            token_id: t,
            rank,
            count: counts[t],
            norm: sq[t].sqrt(),
        })
        .collect();

    // Bucket membership (ranks) and the kNN queries of each bucket.
    let mut rng = SplitMix64::new(config.seed);
    let mut ranges = Vec::with_capacity(edges.len());
    let mut queries: Vec<Vec<usize>> = Vec::with_capacity(edges.len());
    for (b, &lo) in edges.iter().enumerate() {
        let hi = edges.get(b + 1).copied();
        let lo_c = lo.min(seen.len());
        let hi_c = hi.unwrap_or(seen.len()).min(seen.len());
        let members = &seen[lo_c..hi_c];
        let mut q = members.to_vec();
        if let Some(cap) = config.max_queries_per_bucket {
            if q.len() > cap {
                // Partial Fisher-Yates: the first `cap` entries are a uniform subset.
                for i in 0..cap {
                    let j = i + rng.below(q.len() - i);
                    q.swap(i, j);
                }
                q.truncate(cap);
            }
        }
        ranges.push((lo, hi, lo_c, hi_c));
        queries.push(q);
    }
    let all_queries: Vec<usize> = queries.iter().flatten().copied().collect();
    let knn = knn_mean_distances(embeddings, &sq, &all_queries, config.k);

    let mut offset = 0;
    let buckets = ranges
        .iter()
        .zip(&queries)
        .map(|(&(lo, hi, lo_c, hi_c), q)| {
            let members = &tokens[lo_c..hi_c];
            let n = members.len();
            let mean_norm = (n > 0).then(|| members.iter().map(|t| t.norm).sum::<f64>() / n as f64);
            let dists = &knn[offset..offset + q.len()];
            offset += q.len();
            let mean_knn_distance =
                (!dists.is_empty()).then(|| dists.iter().sum::<f64>() / dists.len() as f64);
            FrequencyBucket {
                rank_start: lo,
                rank_end: hi,
                n_tokens: n,
                mean_norm,
                mean_knn_distance,
                n_knn_queries: q.len(),
            }
        })
        .collect();

    Ok(FrequencyGeometry {
        k: config.k,
        vocab_size: vocab,
        n_seen_tokens: seen.len(),
        buckets,
        tokens,
    })
}

/// For each query row id, the mean l2 distance to its `k` nearest other rows
/// of `emb` (requires `k < emb.nrows()`).
fn knn_mean_distances(
    emb: ArrayView2<'_, f32>,
    sq: &[f64],
    queries: &[usize],
    k: usize,
) -> Vec<f64> {
    const BLOCK: usize = 128;
    let hidden = emb.ncols();
    let q = Array2::from_shape_fn((queries.len(), hidden), |(i, j)| emb[[queries[i], j]]);
    let qv = q.view();
    let per_block = par_blocks(queries.len(), BLOCK, |lo, hi| {
        let dots = block_dot_t(qv, lo, hi, emb);
        let mut out = Vec::with_capacity(hi - lo);
        // (approximate squared distance, row), sorted increasing, length <= k.
        let mut best: Vec<(f64, usize)> = Vec::with_capacity(k + 1);
        for (bi, &qid) in queries[lo..hi].iter().enumerate() {
            best.clear();
            for (cid, &dot) in dots.row(bi).iter().enumerate() {
                if cid == qid {
                    continue;
                }
                let d2 = sq[qid] + sq[cid] - 2.0 * f64::from(dot);
                if best.len() < k || d2 < best[best.len() - 1].0 {
                    let pos = best.partition_point(|&(v, _)| v <= d2);
                    best.insert(pos, (d2, cid));
                    best.truncate(k);
                }
            }
            let qrow = emb.row(qid);
            let mean = best
                .iter()
                .map(|&(_, cid)| {
                    qrow.iter()
                        .zip(emb.row(cid))
                        .map(|(&a, &b)| {
                            let d = f64::from(a) - f64::from(b);
                            d * d
                        })
                        .sum::<f64>()
                        .sqrt()
                })
                .sum::<f64>()
                / best.len() as f64;
            out.push(mean);
        }
        out
    });
    per_block.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    /// Vocabulary of 5 tokens in 2-D:
    /// id0 (1,0), id1 (2,0), id2 (4,0), id3 (0,3), id4 (8,0);
    /// counts [10, 5, 0, 7, 1] -> ranks: id0 0, id3 1, id1 2, id4 3; id2 unseen.
    fn vocab() -> (Vec<u64>, Array2<f32>) {
        (
            vec![10, 5, 0, 7, 1],
            array![
                [1.0f32, 0.0],
                [2.0, 0.0],
                [4.0, 0.0],
                [0.0, 3.0],
                [8.0, 0.0]
            ],
        )
    }

    fn cfg(edges: &[usize], k: usize) -> FrequencyConfig {
        FrequencyConfig {
            bucket_edges: edges.to_vec(),
            k,
            max_queries_per_bucket: None,
            seed: 0,
        }
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        (a.unwrap() - b).abs() < 1e-9
    }

    #[test]
    fn hand_computed_buckets_k1() {
        let (counts, emb) = vocab();
        let g = frequency_geometry(&counts, emb.view(), &cfg(&[0, 2], 1)).unwrap();
        assert_eq!(g.n_seen_tokens, 4);
        let ranks: Vec<(usize, usize)> = g.tokens.iter().map(|t| (t.token_id, t.rank)).collect();
        assert_eq!(ranks, vec![(0, 0), (3, 1), (1, 2), (4, 3)]);
        assert_eq!(g.buckets.len(), 2);
        // Bucket [0,2): id0 (norm 1), id3 (norm 3) -> mean norm 2.
        // 1-NN: id0 -> id1 at 1; id3 -> id0 at sqrt(10).
        let b0 = &g.buckets[0];
        assert_eq!((b0.rank_start, b0.rank_end, b0.n_tokens), (0, Some(2), 2));
        assert!(close(b0.mean_norm, 2.0));
        assert!(close(b0.mean_knn_distance, (1.0 + 10f64.sqrt()) / 2.0));
        // Bucket [2,inf): id1 (norm 2), id4 (norm 8) -> 5.
        // 1-NN: id1 -> id0 at 1; id4 -> id2 (unseen, still a neighbour) at 4.
        let b1 = &g.buckets[1];
        assert_eq!((b1.rank_start, b1.rank_end, b1.n_tokens), (2, None, 2));
        assert!(close(b1.mean_norm, 5.0));
        assert!(close(b1.mean_knn_distance, 2.5));
        assert_eq!(b1.n_knn_queries, 2);
    }

    #[test]
    fn hand_computed_buckets_k2() {
        // 2-NN: id0 -> {id1: 1, id2: 3} = 2; id3 -> {id0: sqrt10, id1: sqrt13};
        //       id1 -> {id0: 1, id2: 2} = 1.5; id4 -> {id2: 4, id1: 6} = 5.
        let (counts, emb) = vocab();
        let g = frequency_geometry(&counts, emb.view(), &cfg(&[0, 2], 2)).unwrap();
        let id3 = (10f64.sqrt() + 13f64.sqrt()) / 2.0;
        assert!(close(g.buckets[0].mean_knn_distance, (2.0 + id3) / 2.0));
        assert!(close(g.buckets[1].mean_knn_distance, 3.25));
    }

    #[test]
    fn empty_buckets_and_offset_edges() {
        // Edges [1, 3, 10]: [1,3) = id3, id1; [3,10) = id4; [10,inf) empty.
        let (counts, emb) = vocab();
        let g = frequency_geometry(&counts, emb.view(), &cfg(&[1, 3, 10], 1)).unwrap();
        assert_eq!(g.buckets[0].n_tokens, 2);
        assert!(close(g.buckets[0].mean_norm, 2.5));
        assert!(close(g.buckets[1].mean_norm, 8.0));
        assert_eq!(g.buckets[2].n_tokens, 0);
        assert_eq!(g.buckets[2].mean_norm, None);
        assert_eq!(g.buckets[2].mean_knn_distance, None);
    }

    #[test]
    fn duplicate_vectors_are_neighbours_but_self_is_not() {
        let counts = vec![1, 1, 1];
        let emb = array![[1.0f32, 1.0], [1.0, 1.0], [5.0, 1.0]];
        let g = frequency_geometry(&counts, emb.view(), &cfg(&[0], 1)).unwrap();
        // id0 -> id1 at 0, id1 -> id0 at 0, id2 -> id0/id1 at 4: mean 4/3.
        assert!(close(g.buckets[0].mean_knn_distance, 4.0 / 3.0));
    }

    #[test]
    fn query_cap_subsamples() {
        let (counts, emb) = vocab();
        let mut c = cfg(&[0, 2], 1);
        c.max_queries_per_bucket = Some(1);
        let g = frequency_geometry(&counts, emb.view(), &c).unwrap();
        assert_eq!(g.buckets[0].n_knn_queries, 1);
        assert_eq!(g.buckets[0].n_tokens, 2);
        let d = g.buckets[0].mean_knn_distance.unwrap();
        assert!((d - 1.0).abs() < 1e-9 || (d - 10f64.sqrt()).abs() < 1e-9);
        // Norms still use every token of the bucket.
        assert!(close(g.buckets[0].mean_norm, 2.0));
    }

    #[test]
    fn many_tokens_match_brute_force() {
        // More tokens than one query block, checked against a direct search.
        let v = 300;
        let emb = Array2::from_shape_fn((v, 4), |(i, j)| ((i * 7919 + j * 104729) % 21) as f32);
        let counts: Vec<u64> = (0..v as u64).map(|i| i % 5).collect();
        let g = frequency_geometry(&counts, emb.view(), &cfg(&[0], 3)).unwrap();
        let mut total = 0.0;
        let mut n = 0;
        for q in 0..v {
            if counts[q] == 0 {
                continue;
            }
            let mut d: Vec<f64> = (0..v)
                .filter(|&c| c != q)
                .map(|c| {
                    (0..4)
                        .map(|j| (f64::from(emb[[q, j]]) - f64::from(emb[[c, j]])).powi(2))
                        .sum::<f64>()
                        .sqrt()
                })
                .collect();
            d.sort_by(f64::total_cmp);
            total += d[..3].iter().sum::<f64>() / 3.0;
            n += 1;
        }
        assert!(close(g.buckets[0].mean_knn_distance, total / n as f64));
    }

    #[test]
    fn bad_inputs_are_errors() {
        let (counts, emb) = vocab();
        assert!(matches!(
            frequency_geometry(&counts[..4], emb.view(), &cfg(&[0], 1)),
            Err(AnalysisError::LengthMismatch { .. })
        ));
        for bad in [
            cfg(&[0], 0),
            cfg(&[0], 5),
            cfg(&[], 1),
            cfg(&[2, 2], 1),
            cfg(&[3, 1], 1),
        ] {
            assert!(matches!(
                frequency_geometry(&counts, emb.view(), &bad),
                Err(AnalysisError::InvalidParameter(_))
            ));
        }
        let mut c = cfg(&[0], 1);
        c.max_queries_per_bucket = Some(0);
        assert!(frequency_geometry(&counts, emb.view(), &c).is_err());
        let mut nan = emb.clone();
        nan[[0, 0]] = f32::NAN;
        assert!(matches!(
            frequency_geometry(&counts, nan.view(), &cfg(&[0], 1)),
            Err(AnalysisError::NonFinite(_))
        ));
    }
}
