//! Quantized indexes and graphs over their codes, for the graph tests
//! (`ann_codes.rs`, `ann_links.rs`).

use bertflow_index::format::normalise_into;
use bertflow_index::{dot, Ann, AnnParams, CodeKind, Index, IndexWriter, Quantization};

use super::identity;

/// The dimension of the vectors.
pub const D: usize = 64;

/// The rows of the exact top `k` of `q`.
pub fn exact_ids(index: &Index, q: &[f32], k: usize) -> Vec<usize> {
    index
        .search_exact(q, k)
        .unwrap()
        .iter()
        .map(|r| r.0)
        .collect()
}

/// Clustered vectors (splitmix64): `n` rows around 20 random centres.
pub fn clustered(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut rng = bertflow_numeric::rng::SplitMix64::new(seed);
    let mut next = move || 2.0 * rng.next_f64() as f32 - 1.0;
    let centres: Vec<f32> = (0..20 * d).map(|_| next()).collect();
    let mut out = Vec::with_capacity(n * d);
    for i in 0..n {
        let c = &centres[(i % 20) * d..(i % 20 + 1) * d];
        out.extend(c.iter().map(|&x| x + 0.6 * next()));
    }
    out
}

pub fn binary() -> Quantization {
    Quantization::new("binary", CodeKind::Binary, D, None, None, "test").unwrap()
}

pub fn int8() -> Quantization {
    Quantization::new("int8", CodeKind::Int8, D, Some(1.0 / 127.0), None, "test").unwrap()
}

/// A new quantized index of the rows `v`.
pub fn write(path: &std::path::Path, q: &Quantization, v: &[f32]) {
    let mut w = IndexWriter::create_quantized(path, identity(D), q.clone()).unwrap();
    let texts: Vec<String> = (0..v.len() / D).map(|i| format!("s{i}")).collect();
    w.add(v, &texts).unwrap();
    w.finish().unwrap();
}

/// `v` appended to the index (a new segment), its rows numbered from `from`.
pub fn append(path: &std::path::Path, v: &[f32], from: usize) {
    let mut w = IndexWriter::append(path, &identity(D)).unwrap();
    let texts: Vec<String> = (from..from + v.len() / D)
        .map(|i| format!("s{i}"))
        .collect();
    w.add(v, &texts).unwrap();
    w.finish().unwrap();
}

/// The graph parameters of the tests.
pub const PARAMS: AnnParams = AnnParams {
    m: 16,
    ef_construction: 100,
};

/// Recall@k of the graph against exact search over `queries`; every score
/// returned is asserted to be the exact cosine.
pub fn recall(
    index: &Index,
    ann: &Ann,
    queries: &[f32],
    k: usize,
    ef: usize,
    rescore: usize,
) -> f64 {
    let mut found = 0usize;
    for q in queries.chunks_exact(D) {
        let exact = exact_ids(index, q, k);
        let approx = ann.search_rescored(q, k, ef, rescore).unwrap();
        assert_eq!(approx.len(), k);
        let mut unit = Vec::new();
        normalise_into(q, &mut unit);
        for w in approx.windows(2) {
            assert!(w[0].1 >= w[1].1, "best first");
        }
        for &(i, s) in &approx {
            assert_eq!(s, dot(index.vector(i).unwrap(), &unit), "row {i}");
        }
        found += approx.iter().filter(|(i, _)| exact.contains(i)).count();
    }
    found as f64 / (queries.len() / D * k) as f64
}
