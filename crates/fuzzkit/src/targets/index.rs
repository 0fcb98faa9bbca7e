//! Index files: `Index::open` (with and without verification) and every
//! accessor (text, vector, search, ids, verify), `repair` (what `bertflow
//! index verify --repair` runs) and `IndexWriter::append` (what `index add`
//! runs) on the fuzzed file. Generic over the layout: bytes in, must not panic.
//!
//! Mode byte (the first): bit 0 recomputes the footer's CRC-32 in the
//! trailer (format version 2 layout: the last 20 bytes are the footer's
//! length, its CRC-32 and the magic; a no-op for bytes not shaped so), so
//! that mutations of the footer's JSON get past the checksum; bit 1 also
//! repairs the file and reopens it; bit 2 also appends a sentence to it.

use std::path::Path;

use bertflow_index::{repair, CodeKind, Identity, Index, IndexWriter, Quantization, SearchParams};

/// Largest dimension searched with a query (a query is built per input).
const MAX_QUERY_DIM: usize = 4096;
/// Sentences read per index (first ones, last ones).
const MAX_TEXTS: usize = 32;

fn identity(dimension: usize) -> Identity {
    Identity {
        model: "fuzz-model@0123456789abcdef".into(),
        pooling: "mean".into(),
        calibrator: None,
        dimension,
        precision: "fp32".into(),
    }
}

/// A quantizer of each kind for seeds (format version 3).
fn quantizer(kind: CodeKind, dimension: usize) -> Quantization {
    let (scale, rotation) = match kind {
        CodeKind::Int8 => (Some(0.01), None),
        CodeKind::Binary => (None, None),
        CodeKind::Ubinary => {
            let mut r = vec![0.0; dimension * dimension];
            (0..dimension).for_each(|i| r[i * dimension + dimension - 1 - i] = 1.0);
            (None, Some(r))
        }
    };
    Quantization::new(kind.name(), kind, dimension, scale, rotation, "fuzz seed")
        .expect("a seed quantizer")
}

fn build(path: &Path, dimension: usize, batches: &[usize]) -> Vec<u8> {
    build_with(path, dimension, batches, None)
}

fn build_with(
    path: &Path,
    dimension: usize,
    batches: &[usize],
    codes: Option<CodeKind>,
) -> Vec<u8> {
    let _ = std::fs::remove_file(path);
    let mut first = 0;
    for (k, &n) in batches.iter().enumerate() {
        let mut w = if k == 0 {
            match codes {
                Some(kind) => IndexWriter::create_quantized(
                    path,
                    identity(dimension),
                    quantizer(kind, dimension),
                ),
                None => IndexWriter::create(path, identity(dimension)),
            }
            .expect("creating a seed index")
        } else {
            IndexWriter::append(path, &identity(dimension)).expect("appending to a seed index")
        };
        let v = super::matrix(n, dimension, (first + 1) as u64);
        let texts: Vec<String> = (first..first + n)
            .map(|i| match i % 4 {
                0 => format!("sentence {i}"),
                1 => String::new(),
                2 => format!("caf\u{e9} {i} \u{1f600}"),
                _ => "x".repeat(i),
            })
            .collect();
        w.add(v.as_slice().expect("contiguous"), &texts)
            .expect("adding to a seed index");
        w.finish().expect("finishing a seed index");
        first += n;
    }
    std::fs::read(path).expect("reading a seed index")
}

/// Small indexes: one segment, two segments (an `index add`), an empty one,
/// and quantized ones (int8, binary, ubinary with a rotation; format version 3).
pub fn seeds() -> Vec<Vec<u8>> {
    let path = super::scratch("seed.idx");
    let files = [
        build(&path, 4, &[5]),
        build(&path, 3, &[3, 2]),
        build(&path, 2, &[0]),
        build_with(&path, 4, &[5, 2], Some(CodeKind::Int8)),
        build_with(&path, 9, &[3], Some(CodeKind::Binary)),
        build_with(&path, 3, &[2, 2], Some(CodeKind::Ubinary)),
    ];
    let mut out = Vec::new();
    for (k, f) in files.iter().enumerate() {
        for mode in [0u8, 1, 2 + k as u8 % 2 * 4] {
            let mut bytes = vec![mode];
            bytes.extend(f);
            out.push(bytes);
        }
    }
    out
}

/// Rewrites the CRC-32 in the trailer to match the footer it points at.
fn fix_footer_crc(buf: &mut [u8]) {
    const TRAILER: usize = 20;
    if buf.len() < TRAILER + 8 {
        return;
    }
    let body = buf.len() - TRAILER;
    let len = u64::from_le_bytes(buf[body..body + 8].try_into().expect("8 bytes"));
    let Ok(len) = usize::try_from(len) else {
        return;
    };
    if len > body {
        return;
    }
    let crc = crc32fast::hash(&buf[body - len..body]);
    buf[body + 8..body + 12].copy_from_slice(&crc.to_le_bytes());
}

fn exercise(index: &Index) {
    let n = index.len();
    let _ = (
        index.is_empty(),
        index.segments(),
        index.end(),
        index.recovered(),
    );
    let _ = (
        index.content_id(),
        index.identity().clone(),
        index.quantizer().cloned(),
    );
    for s in 0..=index.segments() + 1 {
        let _ = index.prefix_id(s);
    }
    let picks = (0..MAX_TEXTS.min(n)).chain(n.saturating_sub(MAX_TEXTS)..n + 2);
    for i in picks {
        let _ = index.text(i);
        if let Some(v) = index.vector(i) {
            assert_eq!(v.len(), index.identity().dimension);
        }
    }
    let _ = index.iter_vectors().take(MAX_TEXTS).count();
    let d = index.identity().dimension;
    if d <= MAX_QUERY_DIM {
        let q = super::probe(1, d);
        let q = q.as_slice().expect("contiguous");
        for k in [0, 1, 3, n + 1] {
            if let Ok(hits) = index.search(q, k) {
                assert!(hits.len() <= k.min(n));
                assert!(hits.iter().all(|&(i, _)| i < n));
            }
            for (rescore, shortlist) in [(0, 1), (1, 1), (3, 1), (1, 0), (2, 4)] {
                let params = SearchParams {
                    rescore,
                    shortlist,
                    threads: 2,
                };
                if let Ok(hits) = index.search_with(q, k, &params) {
                    assert!(hits.len() <= k.min(n));
                    assert!(hits.iter().all(|&(i, _)| i < n));
                }
            }
        }
    }
    let _ = index.search(&[1.0], 1);
    let _ = index.verify();
}

/// Opens `data` (after the mode byte) as an index and uses it.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut buf = rest.to_vec();
    if mode & 1 == 1 {
        fix_footer_crc(&mut buf);
    }
    let path = super::scratch_file("in.idx", &buf);
    // The map must not outlive a change to the file (repair cuts it).
    let identity = Index::open(&path, false).ok().map(|index| {
        exercise(&index);
        index.identity().clone()
    });
    if let Ok(index) = Index::open(&path, true) {
        exercise(&index);
    }
    if mode & 2 == 2 && repair(&path, None).is_ok() {
        let index = Index::open(&path, true).expect("a repaired index opens");
        exercise(&index);
    }
    let Some(identity) = identity.filter(|id| mode & 4 == 4 && id.dimension <= MAX_QUERY_DIM)
    else {
        return;
    };
    if let Ok(mut w) = IndexWriter::append(&path, &identity) {
        let v = super::probe(1, identity.dimension);
        let added = w
            .add(v.as_slice().expect("contiguous"), &["added".to_string()])
            .and_then(|()| w.finish());
        if added.is_ok() {
            let index = Index::open(&path, true).expect("an appended index opens");
            exercise(&index);
        }
    }
}
