//! Sparse and multi-vector outputs against references
//! (scripts/reference/make_tiny_sparse.py): SPLADE on tiny random
//! `*ForMaskedLM` checkpoints of BERT, DistilBERT, RoBERTa and XLM-R (tied and
//! untied decoders; the BERT one a sentence-transformers SparseEncoder
//! directory) within 1e-5 of transformers, `max_active_dims` and decoding as
//! sentence-transformers; int8 within a looser bound; a tiny BGE-M3-shaped
//! checkpoint's dense, sparse and ColBERT outputs from one pass within 1e-5 of
//! a NumPy reference of the published formulas; per-token vectors without a
//! projection; ColBERT's query padding; the errors.
use crate::common::max_abs_diff;
use crate::common::tiny::{dir, golden};
use bertflow_encoder::head::{Outputs, RetrievalOptions};
use bertflow_encoder::{EncodeOptions, Precision, RetrievalEncoder, SparseVector};
use serde_json::Value;

const SPLADE: [&str; 4] = ["bert", "distilbert", "roberta", "xlm-roberta"];

fn texts(g: &Value) -> Vec<String> {
    g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect()
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn sparse(v: &Value) -> SparseVector {
    SparseVector {
        indices: v["indices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect(),
        values: f64s(&v["values"]).iter().map(|&x| x as f32).collect(),
    }
}

/// The largest difference of `got` and `want` over the dimension `dim`.
fn sparse_diff(got: &SparseVector, want: &SparseVector, dim: usize) -> f64 {
    let dense = |v: &SparseVector| {
        let mut d = vec![0f64; dim];
        for (&i, &x) in v.indices.iter().zip(&v.values) {
            d[i as usize] = x as f64;
        }
        d
    };
    let (a, b) = (dense(got), dense(want));
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

fn opts(outputs: &str) -> RetrievalOptions {
    RetrievalOptions {
        outputs: Outputs::parse(outputs).unwrap(),
        ..Default::default()
    }
}

fn run() -> EncodeOptions {
    EncodeOptions {
        batch_size: 4,
        threads: 2,
    }
}

#[test]
fn splade_equals_transformers_and_sentence_transformers() {
    for name in SPLADE {
        let fixture = format!("{name}-splade");
        let g = golden(&fixture);
        let rx = RetrievalEncoder::load(&dir(&fixture), None, Precision::Fp32).unwrap();
        assert_eq!(rx.sparse_kind(), Some("splade"), "{name}");
        assert_eq!(rx.mlm_class(), g["class"].as_str(), "{name}");
        let dim = g["vocab_size"].as_u64().unwrap() as usize;
        assert_eq!(rx.sparse_dim(), dim);
        let texts = texts(&g);
        let out = rx.encode(&texts, &opts("sparse"), &run()).unwrap();
        let mut k = opts("sparse");
        k.max_active_dims = Some(3);
        let top = rx.encode(&texts, &k, &run()).unwrap();
        for (i, c) in g["cases"].as_array().unwrap().iter().enumerate() {
            let ids: Vec<u32> = rx.tokenize(&texts[i], None).unwrap();
            let want_ids: Vec<u32> = f64s(&c["ids"]).iter().map(|&x| x as u32).collect();
            assert_eq!(ids, want_ids, "{name} case {i}");
            let got = &out.sparse.as_ref().unwrap()[i];
            got.validate(Some(dim)).unwrap();
            let d = sparse_diff(got, &sparse(&c["sparse"]), dim);
            assert!(d < 1e-5, "{name} case {i}: {d}");
            let got = &top.sparse.as_ref().unwrap()[i];
            assert_eq!(got.nnz(), 3, "{name} case {i}");
            let d = sparse_diff(got, &sparse(&c["top3"]), dim);
            assert!(d < 1e-5, "{name} case {i} top 3: {d}");
            let named: Vec<String> = out.sparse.as_ref().unwrap()[i]
                .top(3)
                .iter()
                .map(|&(id, _)| rx.token(id))
                .collect();
            let want: Vec<&str> = c["decode3"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p[0].as_str().unwrap())
                .collect();
            assert_eq!(named, want, "{name} case {i}");
        }
    }
}

#[test]
fn splade_at_int8_stays_close() {
    for name in ["bert", "xlm-roberta"] {
        let fixture = format!("{name}-splade");
        let g = golden(&fixture);
        let dim = g["vocab_size"].as_u64().unwrap() as usize;
        let rx = RetrievalEncoder::load(&dir(&fixture), None, Precision::Int8).unwrap();
        let out = rx.encode(&texts(&g), &opts("sparse"), &run()).unwrap();
        for (i, c) in g["cases"].as_array().unwrap().iter().enumerate() {
            let want = sparse(&c["sparse"]);
            let d = sparse_diff(&out.sparse.as_ref().unwrap()[i], &want, dim);
            let scale = want.values.iter().fold(0f32, |m, &x| m.max(x)) as f64;
            eprintln!("int8 {name} case {i}: largest difference {d:.4} of {scale:.4}");
            assert!(d < 0.05 * scale, "{name} case {i}: {d} of {scale}");
        }
    }
}

#[test]
fn bge_m3_gives_dense_sparse_and_colbert_from_one_pass() {
    let g = golden("bge-m3");
    let rx = RetrievalEncoder::load(&dir("bge-m3"), None, Precision::Fp32).unwrap();
    assert_eq!(rx.sparse_kind(), Some("bge-m3"));
    assert!(rx.has_projection());
    let texts = texts(&g);
    let out = rx
        .encode(&texts, &opts("dense,sparse,multi"), &run())
        .unwrap();
    let dim = g["vocab_size"].as_u64().unwrap() as usize;
    for (i, c) in g["cases"].as_array().unwrap().iter().enumerate() {
        let dense = out.dense.as_ref().unwrap().row(i).to_vec();
        assert!(max_abs_diff(&dense, &f64s(&c["dense"])) < 1e-5, "case {i}");
        let sp = &out.sparse.as_ref().unwrap()[i];
        let want = sparse(&c["sparse"]);
        assert_eq!(sp.indices, want.indices, "case {i}");
        assert!(sparse_diff(sp, &want, dim) < 1e-5, "case {i}");
        let m = &out.multi.as_ref().unwrap()[i];
        let want: Vec<Vec<f64>> = c["colbert"].as_array().unwrap().iter().map(f64s).collect();
        assert_eq!(m.nrows(), want.len(), "case {i}");
        assert_eq!(m.nrows() + 1, out.tokens[i]);
        for (r, w) in m.rows().into_iter().zip(&want) {
            assert!(max_abs_diff(&r.to_vec(), w) < 1e-5, "case {i}");
        }
    }
    // The query padded with <mask> to 12 tokens, every position attended.
    let q = &g["query"];
    let mut o = opts("multi");
    o.query_length = Some(q["length"].as_u64().unwrap() as usize);
    let qt = q["text"].as_str().unwrap();
    let ids: Vec<u32> = f64s(&q["ids"]).iter().map(|&x| x as u32).collect();
    assert_eq!(rx.tokenize(qt, o.query_length).unwrap(), ids);
    let out = rx.encode(&[qt], &o, &run()).unwrap();
    let m = &out.multi.unwrap()[0];
    let want: Vec<Vec<f64>> = q["colbert"].as_array().unwrap().iter().map(f64s).collect();
    assert_eq!(m.nrows(), want.len());
    for (r, w) in m.rows().into_iter().zip(&want) {
        assert!(max_abs_diff(&r.to_vec(), w) < 1e-5);
    }
}

/// tiny-bge-m3 without its `.pt` heads: a plain XLM-R.
fn plain_copy() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::copy(format!("{}/{f}", dir("bge-m3")), tmp.path().join(f)).unwrap();
    }
    tmp
}

#[test]
fn a_model_without_heads_gives_normalised_token_vectors_and_no_sparse() {
    let g = golden("bge-m3");
    let tmp = plain_copy();
    let rx = RetrievalEncoder::load(tmp.path().to_str().unwrap(), None, Precision::Fp32).unwrap();
    assert!(!rx.has_sparse() && !rx.has_projection());
    let texts = texts(&g);
    let out = rx.encode(&texts, &opts("multi"), &run()).unwrap();
    let mut skip = opts("multi");
    skip.skip_first = Some(true);
    let skipped = rx.encode(&texts, &skip, &run()).unwrap();
    for (i, c) in g["cases"].as_array().unwrap().iter().enumerate() {
        let want: Vec<Vec<f64>> = c["plain"].as_array().unwrap().iter().map(f64s).collect();
        let m = &out.multi.as_ref().unwrap()[i];
        assert_eq!(m.nrows(), want.len());
        for (r, w) in m.rows().into_iter().zip(&want) {
            assert!(max_abs_diff(&r.to_vec(), w) < 1e-5, "case {i}");
        }
        let s = &skipped.multi.as_ref().unwrap()[i];
        assert_eq!(s.nrows() + 1, want.len());
        assert!(max_abs_diff(&s.row(0).to_vec(), &want[1]) < 1e-5);
    }
    let e = rx
        .encode(&texts, &opts("sparse"), &run())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no sparse head"), "{e}");
}

#[test]
fn bad_options_and_heads_are_errors() {
    let rx = RetrievalEncoder::load(&dir("bert-splade"), None, Precision::Fp32).unwrap();
    let mut o = opts("sparse");
    o.max_active_dims = Some(0);
    assert!(rx.encode(&["a"], &o, &run()).is_err());
    assert!(rx.tokenize("a", Some(1)).is_err());
    assert!(rx.tokenize("a", Some(1000)).is_err());
    assert!(Outputs::parse("dense,bogus").is_err());
    assert!(Outputs::parse("").is_err());
    // A sparse_linear.pt of the wrong shape names the file.
    let tmp = plain_copy();
    std::fs::copy(
        format!("{}/colbert_linear.pt", dir("bge-m3")),
        tmp.path().join("sparse_linear.pt"),
    )
    .unwrap();
    let e = RetrievalEncoder::load(tmp.path().to_str().unwrap(), None, Precision::Fp32)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("sparse_linear.pt") && e.contains("shape"), "{e}");
}
