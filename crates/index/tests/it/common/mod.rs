//! Test data shared by the index tests: an identity, deterministic vectors
//! (some rows zero) and texts (some empty, some multi-byte), and a builder.
#![allow(dead_code)]

pub mod codes;

use bertflow_index::{Identity, IndexWriter};

pub fn identity(dimension: usize) -> Identity {
    Identity {
        model: "all-MiniLM-L6-v2@abc123".into(),
        pooling: "last-avg".into(),
        calibrator: Some("whiten(k=32) sha256:00ff".into()),
        dimension,
        precision: "fp32".into(),
    }
}

/// Deterministic pseudo-random vectors (splitmix64), some rows zero.
pub fn vectors(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut h = seed;
    let mut next = move || {
        h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    (0..n * d)
        .map(|i| if (i / d) % 17 == 5 { 0.0 } else { next() * 3.0 })
        .collect()
}

pub fn texts(n: usize, from: usize) -> Vec<String> {
    (from..from + n)
        .map(|i| match i % 4 {
            0 => format!("sentence {i}"),
            1 => format!("phrase n°{i} – naïve café"),
            2 => String::new(),
            _ => format!("東京 {i} 🎉"),
        })
        .collect()
}

pub fn build(path: &std::path::Path, d: usize, chunks: &[(usize, u64)]) -> (Vec<f32>, Vec<String>) {
    let mut writer = IndexWriter::create(path, identity(d)).unwrap();
    let (mut all_v, mut all_t) = (Vec::new(), Vec::new());
    for &(n, seed) in chunks {
        let v = vectors(n, d, seed);
        let t = texts(n, all_t.len());
        writer.add(&v, &t).unwrap();
        all_v.extend(v);
        all_t.extend(t);
    }
    assert_eq!(writer.finish().unwrap(), all_t.len() as u64);
    (all_v, all_t)
}
