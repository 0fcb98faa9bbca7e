//! The sparse side of `bertflow index`: `build|add --with-sparse` (the model's
//! SPLADE or BGE-M3 sparse output) or `--sparse FILE` (vectors `bertflow
//! encode` wrote), and `search --mode dense|sparse|hybrid` with its fusion.
//! The work is in `bertflow_core::indexing` (modes and sparse).
use crate::progress;
use anyhow::{bail, Result};
use bertflow_core::index::{Index, IndexWriter};
use bertflow_core::indexing::{
    build_sparse_index, build_sparse_index_from_vectors, check_sparse_source,
    embed_into_sparse_index, file_sparse_source, read_sparse_file, write_vectors_sparse, Fusion,
    FusionParams, SearchMode, SparseInput, VectorsInput, DEFAULT_ALPHA, DEFAULT_RRF_K,
};
use bertflow_core::retrieval::Retriever;
use bertflow_core::Pipeline;
use clap::Args;
use std::path::{Path, PathBuf};

/// Sparse vectors beside the dense ones (`index build`, `index add`).
#[derive(Args, Debug, Clone, Default)]
pub struct SparseArgs {
    /// Also store each sentence's sparse vector, made by the model's sparse head (SPLADE of a
    /// *ForMaskedLM checkpoint, or BGE-M3's sparse_linear.pt), for `index search --mode
    /// sparse|hybrid`. The dense vectors are the pooling's, as without it (a second pass).
    #[arg(long, conflicts_with = "sparse")]
    pub with_sparse: bool,
    /// Also store sparse vectors made elsewhere: the .jsonl ("indices", "values" a line) or
    /// CSR .npz `bertflow encode --pooling splade` writes, one per sentence, in order.
    #[arg(long, value_name = "FILE")]
    pub sparse: Option<PathBuf>,
    /// With --with-sparse: keep the K largest weights of each sparse vector.
    #[arg(long, value_name = "K", requires = "with_sparse")]
    pub max_active_dims: Option<usize>,
}

impl SparseArgs {
    /// Whether sparse vectors were asked for.
    pub fn asked(&self) -> bool {
        self.with_sparse || self.sparse.is_some()
    }
}

/// How `index search` ranks.
#[derive(Args, Debug, Clone)]
pub struct ModeArgs {
    /// How to rank: dense (cosine of the dense vectors), sparse (dot product of the sparse
    /// vectors, exact, over the postings of the query's tokens) or hybrid (both, fused;
    /// sparse and hybrid need an index built with --with-sparse or --sparse).
    #[arg(long, default_value = "dense", value_name = "MODE", value_parser = parse_mode)]
    pub mode: SearchMode,
    /// Hybrid: how the two lists are fused: rrf (reciprocal rank: sum of 1 / (k + rank)) or
    /// weighted (alpha x cosine + (1 - alpha) x sparse score / the query's best sparse score).
    #[arg(long, default_value = "rrf", value_name = "FUSION", value_parser = parse_fusion)]
    pub fusion: Fusion,
    /// Hybrid, rrf: the rank constant k.
    #[arg(long, default_value_t = DEFAULT_RRF_K, value_name = "K")]
    pub rrf_k: f64,
    /// Hybrid, weighted: the dense cosine's weight, in [0, 1].
    #[arg(long, default_value_t = DEFAULT_ALPHA, value_name = "A")]
    pub alpha: f32,
    /// Hybrid: candidates taken from each list before fusion [default: max(10 x k, 100)].
    #[arg(long, value_name = "N")]
    pub depth: Option<usize>,
}

fn parse_mode(s: &str) -> Result<SearchMode, String> {
    s.parse()
        .map_err(|e: bertflow_core::CoreError| e.to_string())
}

fn parse_fusion(s: &str) -> Result<Fusion, String> {
    s.parse()
        .map_err(|e: bertflow_core::CoreError| e.to_string())
}

impl ModeArgs {
    /// The fusion parameters, checked.
    pub fn params(&self) -> Result<FusionParams> {
        let p = FusionParams {
            fusion: self.fusion,
            rrf_k: self.rrf_k,
            alpha: self.alpha,
            depth: self.depth,
        };
        p.check()?;
        Ok(p)
    }
}

/// The model with its sparse head (loaded a second time beside the pipeline).
pub fn retriever(cfg: &bertflow_core::EmbedderConfig) -> Result<Retriever> {
    Ok(Retriever::open(cfg, progress::handle())?)
}

/// The sparse vectors of a file, over the vocabulary of `pipeline`'s model
/// (a CSR `.npz` records its own, whose ids must be in the model's).
fn given(path: &Path, pipeline: &Pipeline) -> Result<SparseInput<'static>> {
    let vocabulary = pipeline.encoder().config().vocab_size;
    let (vectors, dimension) = read_sparse_file(path, Some(vocabulary))?;
    Ok(SparseInput::Given {
        vectors,
        dimension,
        source: file_sparse_source(path),
    })
}

/// What the sparse side reads of `index build|add`'s settings (given by
/// `cmd_index`, which this module does not import).
pub struct Settings<'a> {
    pub sparse: &'a SparseArgs,
    pub model: &'a bertflow_core::EmbedderConfig,
    pub vector_file: Option<&'a Path>,
    /// Parquet `--vectors`: the text and vector columns.
    pub columns: (&'a str, &'a str),
    pub chunk: usize,
}

/// `index build` with sparse vectors into `output`: from the corpus or `--vectors`.
pub fn build(
    s: &Settings,
    output: &Path,
    pipeline: &Pipeline,
    quantize: bertflow_core::indexing::QuantizeWith,
    texts: impl FnOnce() -> Result<(Option<Vec<String>>, bool)>,
) -> Result<u64> {
    let model = if s.sparse.with_sparse {
        Some(retriever(s.model)?)
    } else {
        None
    };
    let input = match (&model, &s.sparse.sparse) {
        (Some(r), _) => SparseInput::Model {
            retriever: r,
            max_active_dims: s.sparse.max_active_dims,
        },
        (None, Some(path)) => given(path, pipeline)?,
        (None, None) => bail!("give --with-sparse or --sparse FILE"),
    };
    let (texts, from_vectors) = texts()?;
    Ok(match (s.vector_file, from_vectors) {
        (Some(vectors), true) => build_sparse_index_from_vectors(
            pipeline,
            vectors,
            texts.as_deref(),
            s.columns,
            s.chunk,
            output,
            quantize,
            &input,
        )?,
        _ => {
            let texts = texts.unwrap_or_default();
            build_sparse_index(pipeline, &texts, s.chunk, output, quantize, &input)?
        }
    })
}

/// `index add` to `writer`: with the sparse vectors the index stores (the
/// model's head unless --sparse gives them), or none for an index without.
pub fn add(
    s: &Settings,
    pipeline: &Pipeline,
    writer: &mut IndexWriter,
    corpus: impl FnOnce() -> Result<Vec<String>>,
    vector_texts: impl FnOnce(&Path) -> Result<Option<Vec<String>>>,
) -> Result<usize> {
    let Some(info) = writer.sparse().cloned() else {
        bail!(
            "the index stores no sparse vectors: drop --with-sparse / --sparse, or build a new \
             index with them"
        );
    };
    let model = match &s.sparse.sparse {
        Some(_) => None,
        None => Some(retriever(s.model)?),
    };
    let input = match (&model, &s.sparse.sparse) {
        (Some(r), _) => {
            let ours = bertflow_core::indexing::model_sparse_info(r)?;
            if ours != info {
                bail!(
                    "the index's sparse vectors were made by {} (dimension {}), this model's by {} \
                     (dimension {}): give the new ones with --sparse FILE, or add with that model",
                    info.source,
                    info.dimension,
                    ours.source,
                    ours.dimension
                );
            }
            SparseInput::Model {
                retriever: r,
                max_active_dims: s.sparse.max_active_dims,
            }
        }
        (None, Some(path)) => {
            let (vectors, _) = read_sparse_file(path, Some(info.dimension as usize))?;
            SparseInput::Given {
                vectors,
                dimension: info.dimension as usize,
                source: file_sparse_source(path),
            }
        }
        (None, None) => unreachable!("a model or a file"),
    };
    match s.vector_file {
        Some(vectors) => {
            bertflow_core::indexing::check_vectors_file(pipeline, vectors)?;
            let texts = vector_texts(vectors)?;
            let mut rows = bertflow_core::indexing::open_rows(vectors, s.columns.0, s.columns.1)?;
            let mut input_rows = VectorsInput {
                rows: &mut *rows,
                texts: texts.as_deref(),
                what: vectors.display().to_string(),
            };
            Ok(write_vectors_sparse(
                &mut input_rows,
                s.chunk,
                writer,
                &input,
                &*progress::handle(),
            )?)
        }
        None => {
            let texts = corpus()?;
            input.check_count(texts.len())?;
            Ok(embed_into_sparse_index(
                pipeline, &texts, 0, s.chunk, writer, &input,
            )?)
        }
    }
}

/// The sparse queries of `texts` for `index` (`None` for a dense search),
/// after checking the model's sparse head made the stored vectors.
pub fn sparse_queries(
    mode: SearchMode,
    index: &Index,
    model: &bertflow_core::EmbedderConfig,
    texts: &[String],
) -> Result<Option<Vec<bertflow_core::retrieval::SparseVector>>> {
    if !mode.needs_sparse() {
        return Ok(None);
    }
    if index.sparse_info().is_none() {
        // The index's error, which says how to add them.
        index.search_sparse((&[], &[]), 0)?;
    }
    let r = retriever(model)?;
    if let Some(note) = check_sparse_source(index, &r)? {
        progress::note(note);
    }
    Ok(Some(r.encode_sparse(texts, None)?))
}
