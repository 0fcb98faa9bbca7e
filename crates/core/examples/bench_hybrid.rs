//! Recall@10 and latency of sparse search over the index's postings and of
//! hybrid search (core's `search_index`), against an exact scan, on synthetic
//! SPLADE-like vectors (benchmarks/hybrid-search.md).
//!
//! ```text
//! cargo run --release -p bertflow-core --features index --example bench_hybrid -- \
//!     [docs 100000] [vocab 30000] [doc nnz 100] [query nnz 20] [queries 200] [dim 384]
//! ```
//!
//! No real SPLADE weights can be had offline: token ids are drawn from a
//! Zipf(1) law over the vocabulary (a few tokens in most texts, most in few),
//! weights from `log(1 + x)` of an exponential (SPLADE's activation on
//! positive logits), the dense vectors at random (only their cost matters).
//! The exact scan scores every stored sparse vector by a merge of sorted ids
//! (CSR rows in memory) and every dense row; its lists, cut and fused as the
//! index's, are the truth.
use bertflow_core::index::{
    sparse_dot, CodeKind, Identity, Index, IndexWriter, Quantization, SearchParams, SparseInfo,
    SparseRef,
};
use bertflow_core::indexing::{default_depth, fuse_rrf, search_index, FusionParams, SearchMode};
use bertflow_core::retrieval::SparseVector;
use std::time::Instant;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` sparse vectors of about `nnz` entries, ids Zipf(1) over `vocab`.
fn sparse(n: usize, vocab: usize, nnz: usize, rng: &mut Rng, cdf: &[f64]) -> Vec<SparseVector> {
    (0..n)
        .map(|_| {
            let k = nnz / 2 + (rng.next() % nnz as u64) as usize;
            let pairs = (0..k)
                .map(|_| {
                    let u = rng.unit();
                    let id = cdf.partition_point(|&c| c < u).min(vocab - 1) as u32;
                    let w = (1.0 - rng.unit().max(1e-12).ln()).ln() as f32 + 0.01;
                    (id, w)
                })
                .collect();
            SparseVector::from_pairs(pairs)
        })
        .collect()
}

fn dense(n: usize, d: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n * d).map(|_| rng.unit() as f32 * 2.0 - 1.0).collect()
}

fn r(v: &SparseVector) -> SparseRef<'_> {
    (&v.indices, &v.values)
}

fn top(mut v: Vec<(usize, f32)>, k: usize) -> Vec<(usize, f32)> {
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(k);
    v
}

fn recall(got: &[(usize, f32)], truth: &[(usize, f32)]) -> f64 {
    let hit = got
        .iter()
        .filter(|g| truth.iter().any(|t| t.0 == g.0))
        .count();
    hit as f64 / truth.len().max(1) as f64
}

fn ms(t: Instant, n: usize) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0 / n as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().unwrap())
        .collect();
    let get = |i: usize, d: usize| a.get(i).copied().unwrap_or(d);
    let (n, vocab, nnz, qnnz, nq, d) = (
        get(0, 100_000),
        get(1, 30_000),
        get(2, 100),
        get(3, 20),
        get(4, 200),
        get(5, 384),
    );
    let mut cdf: Vec<f64> = (1..=vocab).map(|r| 1.0 / r as f64).collect();
    let total: f64 = cdf.iter().sum();
    let mut acc = 0.0;
    for c in cdf.iter_mut() {
        acc += *c / total;
        *c = acc;
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let docs = sparse(n, vocab, nnz, &mut rng, &cdf);
    let queries = sparse(nq, vocab, qnnz, &mut rng, &cdf);
    let vectors = dense(n, d, &mut rng);
    let qvec = dense(nq, d, &mut rng);
    let postings: usize = docs.iter().map(|v| v.nnz()).sum();
    println!(
        "{n} docs, vocabulary {vocab}, {:.1} entries a doc ({postings} postings), {nq} queries of {:.1} entries, dense dimension {d}",
        postings as f64 / n as f64,
        queries.iter().map(|q| q.nnz()).sum::<usize>() as f64 / nq as f64
    );
    let dir = tempfile::tempdir()?;
    let identity = Identity {
        model: "synthetic@0".into(),
        pooling: "cls".into(),
        calibrator: None,
        dimension: d,
        precision: "fp32".into(),
    };
    let info = SparseInfo {
        source: "synthetic zipf".into(),
        dimension: vocab as u64,
    };
    let mut indexes = Vec::new();
    for quantized in [false, true] {
        let path = dir.path().join(format!("b{quantized}.bfi"));
        let q = quantized
            .then(|| Quantization::new("binary", CodeKind::Binary, d, None, None, "none"))
            .transpose()?;
        let t = Instant::now();
        let mut w = IndexWriter::create_sparse(&path, identity.clone(), q, info.clone())?;
        let texts: Vec<String> = (0..8192).map(|i| i.to_string()).collect();
        for (c, (vs, ds)) in vectors.chunks(8192 * d).zip(docs.chunks(8192)).enumerate() {
            let refs: Vec<SparseRef> = ds.iter().map(r).collect();
            let _ = c;
            w.add_sparse(vs, &texts[..ds.len()], &refs)?;
        }
        w.finish()?;
        let bytes = std::fs::metadata(&path)?.len();
        println!(
            "build ({}): {:.1} s, {:.0} MB",
            if quantized { "binary codes" } else { "f32" },
            t.elapsed().as_secs_f64(),
            bytes as f64 / 1e6
        );
        indexes.push(Index::open(&path, true)?);
    }
    let k = 10;
    let depth = default_depth(k);
    // Exact scan: every sparse vector, every dense row.
    let t = Instant::now();
    let exact_sparse: Vec<Vec<(usize, f32)>> = queries
        .iter()
        .map(|q| {
            top(
                docs.iter()
                    .enumerate()
                    .filter(|(_, v)| v.indices.iter().any(|i| q.indices.binary_search(i).is_ok()))
                    .map(|(i, v)| (i, sparse_dot(r(v), r(q))))
                    .collect(),
                depth,
            )
        })
        .collect();
    let scan_sparse_ms = ms(t, nq);
    let plain = &indexes[0];
    let t = Instant::now();
    let exact_dense: Vec<Vec<(usize, f32)>> = qvec
        .chunks(d)
        .map(|q| plain.search_exact(q, depth).unwrap())
        .collect();
    let scan_dense_ms = ms(t, nq);
    let exact_hybrid: Vec<Vec<(usize, f32)>> = exact_dense
        .iter()
        .zip(&exact_sparse)
        .map(|(dl, sl)| fuse_rrf(dl, sl, 60.0, k))
        .collect();
    println!("exact scan: sparse {scan_sparse_ms:.2} ms/query, dense {scan_dense_ms:.2} ms/query, hybrid {:.2} ms/query", scan_sparse_ms + scan_dense_ms);
    let p = FusionParams::default();
    let params = SearchParams::default();
    for (name, index) in [("f32", &indexes[0]), ("binary codes", &indexes[1])] {
        for mode in [SearchMode::Sparse, SearchMode::Hybrid, SearchMode::Dense] {
            let t = Instant::now();
            let got: Vec<Vec<(usize, f32)>> = qvec
                .chunks(d)
                .zip(&queries)
                .map(|(qd, qs)| {
                    search_index(index, Some(qd), Some(qs), mode, k, &p, &params).unwrap()
                })
                .collect();
            let lat = ms(t, nq);
            let truth: Vec<Vec<(usize, f32)>> = match mode {
                SearchMode::Sparse => exact_sparse
                    .iter()
                    .map(|l| l[..l.len().min(k)].to_vec())
                    .collect(),
                SearchMode::Dense => exact_dense.iter().map(|l| l[..k].to_vec()).collect(),
                SearchMode::Hybrid => exact_hybrid.clone(),
            };
            let rec: f64 = got
                .iter()
                .zip(&truth)
                .map(|(g, t)| recall(g, t))
                .sum::<f64>()
                / nq as f64;
            println!("{name:>13} {mode:>7}: recall@10 {rec:.4}, {lat:.2} ms/query");
        }
    }
    Ok(())
}
