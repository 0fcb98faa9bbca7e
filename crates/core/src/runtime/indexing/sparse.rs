//! Sparse vectors in the index: where they come from (the model's sparse
//! head, `index build|add --with-sparse`; or a `.jsonl` / CSR `.npz` file,
//! `--sparse FILE`), the index builds that store them, and the check that
//! queries are made as the stored vectors were. The search modes are in
//! `modes`.
use crate::error::{CoreError, Result};
use crate::runtime::pipeline::Pipeline;
use crate::runtime::retrieval::{Retriever, SparseVector};
use bertflow_index::{Index, IndexWriter, SparseInfo, SparseRef};
use std::path::Path;

fn as_ref(v: &SparseVector) -> SparseRef<'_> {
    (&v.indices, &v.values)
}

/// Where the sparse vectors of an index come from.
pub enum SparseInput<'a> {
    /// The model's sparse head (SPLADE of a `*ForMaskedLM` checkpoint,
    /// BGE-M3's `sparse_linear.pt`), keeping the `max_active_dims` largest.
    Model {
        retriever: &'a Retriever,
        max_active_dims: Option<usize>,
    },
    /// Made elsewhere (`bertflow encode`'s `.jsonl` or CSR `.npz`): one per
    /// sentence, in order.
    Given {
        vectors: Vec<SparseVector>,
        dimension: usize,
        source: String,
    },
}

/// What an index records of sparse vectors made by `retriever`'s head.
pub fn model_sparse_info(retriever: &Retriever) -> Result<SparseInfo> {
    let kind = retriever.encoder.sparse_kind().ok_or_else(|| {
        CoreError::setting(
            "with-sparse",
            format!(
                "{} has no sparse head: sparse vectors need a *ForMaskedLM checkpoint (SPLADE) \
                 or BGE-M3's sparse_linear.pt (or give them made elsewhere: --sparse FILE)",
                retriever.encoder.encoder().model_id()
            ),
        )
    })?;
    let enc = retriever.encoder.encoder();
    Ok(SparseInfo {
        source: format!(
            "{kind} {}",
            crate::runtime::calibration::model_identity(enc)
        ),
        dimension: retriever.encoder.sparse_dim() as u64,
    })
}

impl SparseInput<'_> {
    /// What the index records.
    pub fn info(&self) -> Result<SparseInfo> {
        match self {
            SparseInput::Model { retriever, .. } => model_sparse_info(retriever),
            SparseInput::Given {
                dimension, source, ..
            } => Ok(SparseInfo {
                source: source.clone(),
                dimension: *dimension as u64,
            }),
        }
    }

    /// The sparse vectors of sentences `from..from + texts.len()`.
    pub fn rows(&self, from: usize, texts: &[String]) -> Result<Vec<SparseVector>> {
        match self {
            SparseInput::Model {
                retriever,
                max_active_dims,
            } => retriever.encode_sparse(texts, *max_active_dims),
            SparseInput::Given { vectors, .. } => vectors
                .get(from..from + texts.len())
                .map(<[SparseVector]>::to_vec)
                .ok_or_else(|| {
                    CoreError::Input(format!(
                        "{} sparse vectors for more sentences: one per sentence",
                        vectors.len()
                    ))
                }),
        }
    }

    /// Error unless a given list holds one vector per sentence of `n`.
    pub fn check_count(&self, n: usize) -> Result<()> {
        match self {
            SparseInput::Given {
                vectors, source, ..
            } if vectors.len() != n => Err(CoreError::Input(format!(
                "{source} holds {} sparse vectors for {n} sentences: one per sentence",
                vectors.len()
            ))),
            _ => Ok(()),
        }
    }
}

/// Write `flat` (dense rows of `texts`) and their sparse vectors.
pub fn add_with_sparse(
    writer: &mut IndexWriter,
    flat: &[f32],
    texts: &[String],
    sparse: &[SparseVector],
) -> Result<()> {
    let refs: Vec<SparseRef> = sparse.iter().map(as_ref).collect();
    Ok(writer.add_sparse(flat, texts, &refs)?)
}

/// The sparse vectors of a `.jsonl` (`"indices"` and `"values"` a line, as
/// `bertflow encode` writes them) or a CSR `.npz`, and the vocabulary size (the
/// `.npz`'s shape; for `.jsonl`, `dimension` or, without it, the largest id + 1).
pub fn read_sparse_file(
    path: &Path,
    dimension: Option<usize>,
) -> Result<(Vec<SparseVector>, usize)> {
    let bytes = crate::runtime::regular::read_regular_file(path, 16 << 30, "sparse vectors file")?;
    let bad = |why: String| CoreError::Input(format!("{}: {why}", path.display()));
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let (vectors, dim) = match ext {
        "npz" => crate::runtime::sparse_io::read_csr_npz(&bytes).map_err(|e| bad(e.to_string()))?,
        "jsonl" | "ndjson" => {
            let mut out = Vec::new();
            let text = std::str::from_utf8(&bytes).map_err(|_| bad("not UTF-8".into()))?;
            for (n, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                #[derive(serde::Deserialize)]
                struct Row {
                    indices: Vec<u32>,
                    values: Vec<f32>,
                }
                let row: Row = serde_json::from_str(line).map_err(|e| {
                    bad(format!(
                        "line {}: {e} (each line needs \"indices\" and \"values\")",
                        n + 1
                    ))
                })?;
                let v = SparseVector {
                    indices: row.indices,
                    values: row.values,
                };
                v.validate(None)
                    .map_err(|e| bad(format!("line {}: {e}", n + 1)))?;
                out.push(v);
            }
            let seen = out
                .iter()
                .filter_map(|v| v.indices.last())
                .max()
                .map_or(1, |&m| m as usize + 1);
            (out, dimension.unwrap_or(seen))
        }
        _ => {
            return Err(bad(
                "sparse vectors are read from .jsonl or a CSR .npz".into()
            ))
        }
    };
    if let Some(d) = dimension {
        if let Some(v) = vectors.iter().find(|v| v.validate(Some(d)).is_err()) {
            return Err(bad(format!(
                "a token id {} is outside the model's vocabulary of {d}",
                v.indices.last().copied().unwrap_or(0)
            )));
        }
    }
    Ok((vectors, dim))
}

/// Embed `texts` into `writer` (an index with sparse vectors), `chunk`
/// sentences a segment: the dense vectors through `pipeline` (pooling,
/// weights, calibrator), the sparse ones from `sparse`; `from` is the
/// number of the first (for given vectors). Returns the sentences written.
pub fn embed_into_sparse_index(
    pipeline: &Pipeline,
    texts: &[String],
    from: usize,
    chunk: usize,
    writer: &mut IndexWriter,
    sparse: &SparseInput,
) -> Result<usize> {
    let embedder = pipeline.embedder();
    let bar = embedder.progress.bar(
        texts.len() as u64,
        "embedding the corpus (dense and sparse)",
        "sentences",
    );
    let mut done = 0;
    for part in texts.chunks(chunk.max(1)) {
        let prompted = pipeline.prompt_texts(part.to_vec(), None)?;
        let raw = pipeline.embed_batch(&prompted, &embedder.opts)?.vectors;
        let vectors = pipeline.calibrate(raw)?.as_standard_layout().to_owned();
        let flat = vectors
            .as_slice()
            .ok_or_else(|| CoreError::Input("the embeddings are not contiguous".into()))?;
        let rows = sparse.rows(from + done, part)?;
        add_with_sparse(writer, flat, part, &rows)?;
        done += part.len();
        bar.set_position(done as u64);
    }
    bar.finish();
    Ok(done)
}

/// `index build --with-sparse` / `--sparse FILE` over a corpus: a new index
/// at `path` with a sparse vector beside each dense one, quantized as
/// `quantize` says (fitted on the first chunk). Returns the sentences written.
pub fn build_sparse_index(
    pipeline: &Pipeline,
    texts: &[String],
    chunk: usize,
    path: &Path,
    quantize: super::QuantizeWith,
    sparse: &SparseInput,
) -> Result<u64> {
    sparse.check_count(texts.len())?;
    let identity = pipeline.identity()?;
    let first = texts.len().min(chunk.max(1));
    let head = pipeline
        .calibrate(
            pipeline
                .embed_batch(
                    &pipeline.prompt_texts(texts[..first].to_vec(), None)?,
                    &pipeline.embedder().opts,
                )?
                .vectors,
        )?
        .as_standard_layout()
        .to_owned();
    let q = quantize.quantization(head.view(), "the first chunk")?;
    let mut writer = IndexWriter::create_sparse(path, identity, q, sparse.info()?)?;
    let flat = head
        .as_slice()
        .ok_or_else(|| CoreError::Input("the embeddings are not contiguous".into()))?;
    add_with_sparse(
        &mut writer,
        flat,
        &texts[..first],
        &sparse.rows(0, &texts[..first])?,
    )?;
    embed_into_sparse_index(pipeline, &texts[first..], first, chunk, &mut writer, sparse)?;
    Ok(writer.finish()?)
}

/// `index build --vectors FILE` with sparse vectors: the dense rows of
/// `vectors` (checked as [`super::build_index_from_vectors`] checks them:
/// settings declared, one sentence per row, dimension) and a sparse vector
/// per row from `sparse`, `chunk` rows per segment, quantized as `quantize`
/// says (fitted on an even sample). Returns the sentences written.
#[allow(clippy::too_many_arguments)]
pub fn build_sparse_index_from_vectors(
    pipeline: &Pipeline,
    vectors: &Path,
    texts: Option<&[String]>,
    columns: (&str, &str),
    chunk: usize,
    path: &Path,
    quantize: super::QuantizeWith,
    sparse: &SparseInput,
) -> Result<u64> {
    super::check_vectors_file(pipeline, vectors)?;
    let identity = pipeline.identity()?;
    let mut rows = super::open_rows(vectors, columns.0, columns.1)?;
    let mut input = super::VectorsInput {
        rows: &mut *rows,
        texts,
        what: vectors.display().to_string(),
    };
    input.check(identity.dimension)?;
    let n = input.rows.rows();
    sparse.check_count(n)?;
    let q = match quantize {
        super::QuantizeWith::Nothing => None,
        _ => {
            let m = n.min(super::QUANTIZER_FIT_ROWS);
            let picked: Vec<usize> = (0..m).map(|i| i * n / m).collect();
            let sample = input.rows.sample(&picked)?;
            let what = format!("an even sample of {}", input.what);
            quantize.quantization(sample.view(), &what)?
        }
    };
    let mut writer = IndexWriter::create_sparse(path, identity, q, sparse.info()?)?;
    write_vectors_sparse(
        &mut input,
        chunk,
        &mut writer,
        sparse,
        &*pipeline.embedder().progress,
    )?;
    Ok(writer.finish()?)
}

/// Write every row of `input` and its sparse vector from `sparse` to
/// `writer` (an index with sparse vectors), `chunk` rows a segment (`index
/// add --vectors` to such an index). Returns the rows written.
pub fn write_vectors_sparse(
    input: &mut super::VectorsInput,
    chunk: usize,
    writer: &mut IndexWriter,
    sparse: &SparseInput,
    progress: &dyn crate::runtime::progress::Progress,
) -> Result<usize> {
    input.check(writer.identity().dimension)?;
    let n = input.rows.rows();
    sparse.check_count(n)?;
    let bar = progress.bar(
        n as u64,
        "writing the vectors (dense and sparse)",
        "vectors",
    );
    let mut done = 0;
    while let Some((part, own_texts)) = input.rows.next_rows(chunk.max(1))? {
        let count = part.nrows();
        let part = part.as_standard_layout();
        let flat = part
            .as_slice()
            .ok_or_else(|| CoreError::Input("the vectors are not contiguous".into()))?;
        let texts: Vec<String> = match (input.texts, own_texts) {
            (Some(t), None) => t
                .get(done..done + count)
                .ok_or_else(|| {
                    CoreError::Input(format!("{}: more rows than sentences", input.what))
                })?
                .to_vec(),
            (None, Some(t)) => t,
            _ => {
                return Err(CoreError::Input(format!(
                    "{}: give the sentences either with the file or beside it, once",
                    input.what
                )))
            }
        };
        let rows = sparse.rows(done, &texts)?;
        add_with_sparse(writer, flat, &texts, &rows)?;
        done += count;
        bar.set_position(done as u64);
    }
    bar.finish();
    Ok(done)
}

/// The sparse source an index records for sparse vectors read from `path`.
pub fn file_sparse_source(path: &Path) -> String {
    format!(
        "file {}",
        path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned()
        )
    )
}

/// Error unless queries made by `retriever`'s sparse head match the sparse
/// vectors of `index` (same head of the same model); vectors read from a file
/// (`--sparse FILE`) are taken on trust: `Some(note)` says so.
pub fn check_sparse_source(index: &Index, retriever: &Retriever) -> Result<Option<String>> {
    let Some(stored) = index.sparse_info() else {
        return Ok(None);
    };
    let ours = model_sparse_info(retriever)?;
    if stored.source.starts_with("file ") {
        return Ok(Some(format!(
            "the index's sparse vectors came from {}: queries are made by {} (they must be of the same model)",
            &stored.source[5..],
            ours.source
        )));
    }
    if stored.source != ours.source || stored.dimension != ours.dimension {
        return Err(CoreError::Input(format!(
            "the index's sparse vectors were made by {} (dimension {}), the queries' would be made by {} (dimension {}): search with the model that built the index",
            stored.source, stored.dimension, ours.source, ours.dimension
        )));
    }
    Ok(None)
}
