//! `bertflow encode` of sparse and multi-vector outputs: `--pooling splade`,
//! `--outputs dense,sparse,multi`, `--multi-vector` (core's
//! [`bertflow_core::retrieval`]).
use crate::cmd_encode::EncodeArgs;
use crate::progress;
use anyhow::{bail, Result};
use bertflow_core::encoder::head::{Outputs, RetrievalOptions, Retrieved};
use bertflow_core::io::{read_sentences, write_embeddings, Input};
use bertflow_core::retrieval::{refuse_sparse_pooling, Retriever};
use bertflow_core::sparse_io;
use std::collections::HashMap;
use std::path::Path;

/// How many files an output takes, and where.
fn check_output(path: &Path, o: Outputs) -> Result<()> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let n = [o.dense, o.sparse, o.multi].iter().filter(|&&b| b).count();
    let jsonl = path.as_os_str() == "-" || ext == "jsonl";
    let fits = jsonl
        || match (n, ext) {
            (1, "npz") => o.sparse,
            (1, "npy") => o.dense,
            (1, "safetensors") => o.multi || o.dense,
            (1, _) => false,
            _ => ext.is_empty(),
        };
    if !fits {
        bail!(
            "output {}: sparse vectors go to .npz or .jsonl, per-token vectors to .safetensors \
             or .jsonl, dense ones to .npy, .safetensors or .jsonl; several outputs to a .jsonl \
             or a directory (a path without extension)",
            path.display()
        );
    }
    Ok(())
}

pub fn run(a: EncodeArgs, outputs: Outputs) -> Result<()> {
    check_output(&a.output, outputs)?;
    if let Some(p) = &a.vectors.pooling {
        if a.vectors.calibrator.is_some() || a.quantize.is_some() {
            refuse_sparse_pooling(p)?;
        }
    }
    if a.vectors.calibrator.is_some()
        || a.quantize.is_some()
        || a.weighting.spec != Default::default()
        || a.weighting.freq_file.is_some()
    {
        bail!(
            "--calibrator, --quantize and --weighting apply to dense pooling outputs only; \
             sparse and per-token outputs are written as the model makes them"
        );
    }
    let r = &a.retrieval;
    if a.decode == Some(0) {
        bail!("--decode must be at least 1");
    }
    if a.decode.is_some() && !(outputs.sparse && is_jsonl(&a.output)) {
        bail!("--decode names sparse entries in .jsonl output: write sparse vectors to .jsonl");
    }
    let input = read_sentences(&a.input, a.jsonl, a.empty)?;
    let mut model = a.vectors.model.clone();
    model.prompt = a.prompt.clone();
    let retriever = Retriever::open(&model, progress::handle())?;
    let opts = RetrievalOptions {
        outputs,
        max_active_dims: r.max_active_dims,
        skip_first: r.skip_first,
        query_length: r.query_length,
    };
    let got = retriever.encode(&input.texts, &opts)?;
    let decoded: Option<Vec<Vec<(String, f32)>>> = a.decode.map(|k| {
        got.sparse
            .iter()
            .flatten()
            .map(|v| retriever.decode(v, k))
            .collect()
    });
    let enc = retriever.encoder.encoder();
    let mut meta = HashMap::new();
    meta.insert("model".to_string(), enc.model_id().to_string());
    meta.insert("max_len".to_string(), enc.max_len().to_string());
    meta.insert("skip_first".to_string(), format!("{:?}", r.skip_first));
    if let Some(q) = r.query_length {
        meta.insert("query_length".to_string(), q.to_string());
    }
    write(
        &a.output,
        &got,
        &input,
        decoded.as_deref(),
        &retriever,
        &meta,
    )?;
    let what: Vec<&str> = [
        (outputs.dense, "dense"),
        (outputs.sparse, "sparse"),
        (outputs.multi, "per-token"),
    ]
    .iter()
    .filter(|(b, _)| *b)
    .map(|(_, n)| *n)
    .collect();
    progress::note(format!(
        "wrote the {} vectors of {} texts to {}",
        what.join(", "),
        input.texts.len(),
        a.output.display()
    ));
    Ok(())
}

fn is_jsonl(path: &Path) -> bool {
    path.as_os_str() == "-" || path.extension().is_some_and(|e| e == "jsonl")
}

fn write(
    path: &Path,
    got: &Retrieved,
    input: &Input,
    decoded: Option<&[Vec<(String, f32)>]>,
    r: &Retriever,
    meta: &HashMap<String, String>,
) -> Result<()> {
    if is_jsonl(path) {
        let bytes = sparse_io::retrieved_jsonl_bytes(got, input, decoded)?;
        if path.as_os_str() == "-" {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)?;
            out.flush()?;
        } else {
            bertflow_core::write_file(path, bytes)?;
        }
        return Ok(());
    }
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let dir = ext.is_empty();
    if dir {
        std::fs::create_dir_all(path)?;
    }
    let at = |name: &str| {
        if dir {
            path.join(name)
        } else {
            path.to_path_buf()
        }
    };
    if let Some(d) = &got.dense {
        write_embeddings(&at("dense.npy"), d, input, meta)?;
    }
    if let Some(s) = &got.sparse {
        let bytes = sparse_io::csr_npz_bytes(s, r.encoder.sparse_dim())?;
        bertflow_core::write_file(&at("sparse.npz"), bytes)?;
    }
    if let Some(m) = &got.multi {
        let bytes = sparse_io::multi_safetensors_bytes(m, r.encoder.multi_dim(), meta)?;
        bertflow_core::write_file(&at("multi.safetensors"), bytes)?;
    }
    Ok(())
}
