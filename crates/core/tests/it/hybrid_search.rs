//! The search modes of core (`index search --mode`, `/search`'s mode): their
//! names, the fusion parameters' ranges and defaults, and every mode on a
//! small index with sparse vectors against a brute-force scan: sparse equals
//! the exact dot products, hybrid equals RRF (or the weighted sum) computed
//! by hand from brute-force dense and sparse lists.
use bertflow_core::index::{
    sparse_dot, Identity, Index, IndexWriter, SearchParams, SparseInfo, SparseRef,
};
use bertflow_core::indexing::{
    default_depth, fuse_rrf, search_index, Fusion, FusionParams, SearchMode, DEFAULT_ALPHA,
    DEFAULT_RRF_K,
};
use bertflow_core::retrieval::SparseVector;

const D: usize = 6;
const N: usize = 300;

fn identity() -> Identity {
    Identity {
        model: "m@1".into(),
        pooling: "cls".into(),
        calibrator: None,
        dimension: D,
        precision: "fp32".into(),
    }
}

/// A xorshift generator.
fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut h = seed | 1;
    move || {
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
        h
    }
}

fn dense_rows(n: usize, seed: u64) -> Vec<f32> {
    let mut next = rng(seed);
    (0..n * D)
        .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}

fn sparse_rows(n: usize, seed: u64) -> Vec<SparseVector> {
    let mut next = rng(seed);
    (0..n)
        .map(|_| {
            let pairs = (0..1 + next() % 5)
                .map(|_| {
                    (
                        (next() % 40) as u32,
                        [0.5f32, 1.0, 1.5][(next() % 3) as usize],
                    )
                })
                .collect();
            SparseVector::from_pairs(pairs)
        })
        .collect()
}

fn build(path: &std::path::Path) -> (Vec<f32>, Vec<SparseVector>) {
    let info = SparseInfo {
        source: "test".into(),
        dimension: 40,
    };
    let mut w = IndexWriter::create_sparse(path, identity(), None, info).unwrap();
    let (dense, sparse) = (dense_rows(N, 3), sparse_rows(N, 4));
    for (k, (d, s)) in dense.chunks(100 * D).zip(sparse.chunks(100)).enumerate() {
        let texts: Vec<String> = (0..s.len()).map(|i| format!("t{}", k * 100 + i)).collect();
        let refs: Vec<SparseRef> = s.iter().map(|v| (&v.indices[..], &v.values[..])).collect();
        w.add_sparse(d, &texts, &refs).unwrap();
    }
    w.finish().unwrap();
    (dense, sparse)
}

fn sorted(mut v: Vec<(usize, f32)>, k: usize) -> Vec<(usize, f32)> {
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(k);
    v
}

/// Brute-force sparse list: rows sharing a token, by exact dot product.
fn brute_sparse(rows: &[SparseVector], q: &SparseVector, k: usize) -> Vec<(usize, f32)> {
    let scored = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.indices.iter().any(|i| q.indices.contains(i)))
        .map(|(i, r)| {
            (
                i,
                sparse_dot((&r.indices, &r.values), (&q.indices, &q.values)),
            )
        })
        .collect();
    sorted(scored, k)
}

#[test]
fn names_defaults_and_ranges() {
    for (s, m) in [
        ("dense", SearchMode::Dense),
        ("sparse", SearchMode::Sparse),
        ("hybrid", SearchMode::Hybrid),
    ] {
        assert_eq!(s.parse::<SearchMode>().unwrap(), m);
        assert_eq!(m.to_string(), s);
    }
    let e = "both".parse::<SearchMode>().unwrap_err().to_string();
    assert!(e.contains("dense, sparse, hybrid"), "{e}");
    assert_eq!("weighted".parse::<Fusion>().unwrap(), Fusion::Weighted);
    assert!("sum".parse::<Fusion>().is_err());
    assert_eq!(SearchMode::default(), SearchMode::Dense);
    let p = FusionParams::default();
    assert_eq!(
        (p.fusion, p.rrf_k, p.alpha),
        (Fusion::Rrf, DEFAULT_RRF_K, DEFAULT_ALPHA)
    );
    assert_eq!((DEFAULT_RRF_K, DEFAULT_ALPHA), (60.0, 0.5));
    assert_eq!(
        (default_depth(5), default_depth(10), default_depth(30)),
        (100, 100, 300)
    );
    assert_eq!(p.depth_for(30), 300);
    let depth = FusionParams {
        depth: Some(3),
        ..p
    };
    assert_eq!(depth.depth_for(10), 10);
    for (bad, what) in [
        (FusionParams { rrf_k: 0.5, ..p }, "rrf-k"),
        (
            FusionParams {
                rrf_k: f64::NAN,
                ..p
            },
            "rrf-k",
        ),
        (FusionParams { alpha: 1.5, ..p }, "alpha"),
        (FusionParams { alpha: -0.1, ..p }, "alpha"),
        (
            FusionParams {
                depth: Some(0),
                ..p
            },
            "depth",
        ),
    ] {
        let e = bad.check().unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    }
    assert!(p.check().is_ok());
}

#[test]
fn rrf_by_hand() {
    let dense = [(7, 0.9), (3, 0.8), (5, 0.1)];
    let sparse = [(3, 9.0), (8, 4.0)];
    let got = fuse_rrf(&dense, &sparse, 60.0, 10);
    let r = |rank: f64| 1.0 / (60.0 + rank);
    // 3: ranks 2 and 1; 7: rank 1; 8: rank 2 (ties 8 and... none); 5: rank 3.
    let want = [(3, r(2.0) + r(1.0)), (7, r(1.0)), (8, r(2.0)), (5, r(3.0))];
    assert_eq!(got.len(), 4);
    for ((gr, gs), (wr, ws)) in got.iter().zip(want) {
        assert_eq!(*gr, wr);
        assert!((f64::from(*gs) - ws).abs() < 1e-7);
    }
    // Ties (7 and 8 both rank 1 in one list): the lower row first.
    let tied = fuse_rrf(&[(8, 1.0)], &[(7, 1.0)], 60.0, 2);
    assert_eq!(tied.iter().map(|h| h.0).collect::<Vec<_>>(), [7, 8]);
    assert_eq!(fuse_rrf(&dense, &sparse, 60.0, 1).len(), 1);
}

#[test]
fn every_mode_equals_a_brute_force_scan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.bfi");
    let (dense, sparse) = build(&path);
    let index = Index::open(&path, true).unwrap();
    let plain = SearchParams::default();
    let unit = |v: &[f32]| {
        let n = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        v.iter()
            .map(|x| (f64::from(*x) / n) as f32)
            .collect::<Vec<_>>()
    };
    let queries = sparse_rows(12, 99);
    for (qi, (qd, qs)) in dense_rows(12, 98).chunks(D).zip(&queries).enumerate() {
        for k in [1, 10, 40] {
            let run = |mode, f: &FusionParams| {
                search_index(&index, Some(qd), Some(qs), mode, k, f, &plain).unwrap()
            };
            let p = FusionParams::default();
            assert_eq!(
                run(SearchMode::Dense, &p),
                index.search_exact(qd, k).unwrap()
            );
            assert_eq!(
                run(SearchMode::Sparse, &p),
                brute_sparse(&sparse, qs, k),
                "q{qi}"
            );
            // Hybrid RRF from brute-force lists at the default depth.
            let depth = default_depth(k);
            let dl = index.search_exact(qd, depth).unwrap();
            let sl = brute_sparse(&sparse, qs, depth);
            let want = fuse_rrf(&dl, &sl, 60.0, k);
            assert_eq!(run(SearchMode::Hybrid, &p), want, "q{qi} k{k}");
            // Weighted, shallow lists: every candidate's exact cosine and
            // sparse score, the sparse one over the query's best.
            let w = FusionParams {
                fusion: Fusion::Weighted,
                alpha: 0.3,
                depth: Some(k + 5),
                ..p
            };
            let (dl, sl) = (
                index.search_exact(qd, k + 5).unwrap(),
                brute_sparse(&sparse, qs, k + 5),
            );
            let best = sl.first().map_or(0.0, |h| h.1);
            let q = unit(qd);
            let mut rows: Vec<usize> = dl.iter().chain(&sl).map(|h| h.0).collect();
            rows.sort_unstable();
            rows.dedup();
            let fused: Vec<(usize, f32)> = rows
                .iter()
                .map(|&r| {
                    let v = index.vector(r).unwrap();
                    let cos = bertflow_core::index::dot(v, &q);
                    let s = sparse_dot(
                        (&sparse[r].indices, &sparse[r].values),
                        (&qs.indices, &qs.values),
                    );
                    (r, 0.3 * cos + 0.7 * if best > 0.0 { s / best } else { 0.0 })
                })
                .collect();
            let got = run(SearchMode::Hybrid, &w);
            let want = sorted(fused, k);
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.0, w.0, "q{qi} k{k}: {got:?} vs {want:?}");
                assert!((g.1 - w.1).abs() < 1e-6);
            }
        }
    }
    let _ = dense;
    // A mode without its query vector, an index without sparse vectors.
    let p = FusionParams::default();
    let e = search_index(
        &index,
        None,
        Some(&queries[0]),
        SearchMode::Hybrid,
        3,
        &p,
        &plain,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("hybrid search needs the query's dense vector"),
        "{e}"
    );
    let e = search_index(
        &index,
        Some(&[1.0; D]),
        None,
        SearchMode::Sparse,
        3,
        &p,
        &plain,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("sparse vector"), "{e}");
    let plain_path = dir.path().join("p.bfi");
    let mut w = IndexWriter::create(&plain_path, identity()).unwrap();
    w.add(&dense_rows(3, 1), &["a".into(), "b".into(), "c".into()])
        .unwrap();
    w.finish().unwrap();
    let old = Index::open(&plain_path, true).unwrap();
    assert_eq!(
        search_index(
            &old,
            Some(&[1.0; D]),
            None,
            SearchMode::Dense,
            2,
            &p,
            &plain
        )
        .unwrap()
        .len(),
        2
    );
    for mode in [SearchMode::Sparse, SearchMode::Hybrid] {
        let e = search_index(
            &old,
            Some(&[1.0; D]),
            Some(&queries[0]),
            mode,
            2,
            &p,
            &plain,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("stores no sparse vectors") && e.contains("--with-sparse"),
            "{e}"
        );
    }
}
