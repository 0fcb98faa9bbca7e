//! `bertflow serve`: calibrated embeddings, similarity and search over HTTP.
//!
//! The HTTP side (routes, batching, back-pressure, errors, graceful shutdown)
//! and the model backend (`bertflow_server::model`) live in `bertflow-server`;
//! this module parses the options, loads the model, calibrator and index, and
//! starts it.
use crate::args::{open_pipeline, RetrievalArgs, VectorArgs};
use crate::progress;
use anyhow::{Context, Result};
use bertflow_core::io::{read_sentences, EmptyLines};
use bertflow_server::model::{IndexOptions, MappedIndex, ModelBackend};
use bertflow_server::rerank_model::RerankBackend;
use bertflow_server::retrieval_model::{RetrievalBackend, RetrievalServing, WithSparseHead};
use bertflow_server::{ApiKeys, EmbedBackend, Limits, LogFormat, ServerConfig};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

const AFTER_HELP: &str =
    "Endpoints: GET / (a playground page), POST /v1/embeddings (OpenAI shape), GET /v1/models, POST /similarity, \
POST /search (needs --corpus or --index), POST /tokenize, GET /health, GET /info, GET /metrics (Prometheus text format), GET /openapi.json. \
Vectors are not L2-normalised (except on TEI's /embed, which normalises by default). \
With a --calibrator that ends in a quantizer stage (`bertflow fit --quantize`), /v1/embeddings' \
encoding_format int8, uint8, binary or ubinary answers its codes (see docs/serving.md); \
over a quantized --index, /search rescores the best --rescore x top_k codes exactly. \
text-embeddings-inference's routes: POST /embed, /embed_all, /embed_sparse (--pooling splade), /rerank, /predict, /decode, POST / (routed by the body), \
and /similarity and /tokenize given \"inputs\"; its launcher flags --model-id, --hostname, --port, --api-key, \
--max-batch-tokens, --max-client-batch-size and --auto-truncate are accepted (see docs/tei.md).

Concurrent requests are packed into batches of at most --max-batch-size inputs and \
--max-batch-tokens tokens; each of the --workers batch workers runs one batch at a time on one \
core, in forward passes of at most --batch-size sentences. --threads, --cache-dir and --no-cache \
do not apply to serve. The bound address is printed to stderr as \
'bertflow-server listening on http://HOST:PORT'. SIGTERM or Ctrl-C stops accepting connections, \
answers every request already received, and exits 0.";

#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct ServeArgs {
    /// The model, pooling and calibrator; the dimension served is the calibrator's
    /// output dimension when one is given.
    #[command(flatten)]
    pub vectors: VectorArgs,
    /// Sentences to index for POST /search: one per line, or JSONL with a "text" field
    /// (.jsonl/.ndjson or --corpus-jsonl). Empty lines are skipped. They are embedded at
    /// start-up (with the calibrator, if any) before the server answers requests. Without
    /// a corpus, /search answers 404 no_corpus.
    #[arg(long, value_name = "FILE")]
    pub corpus: Option<PathBuf>,
    /// A search index written by `bertflow index build` (memory-mapped: ready at once,
    /// nothing is embedded at start-up). It must have been built with this model, pooling
    /// and calibrator; otherwise serve refuses to start. Exclusive with --corpus.
    #[arg(long, value_name = "FILE", conflicts_with = "corpus")]
    pub index: Option<PathBuf>,
    /// Check every checksum of --index at start-up (reads the whole file: about a second
    /// per 1.5 GB from the page cache). Without it only the footer, the layout and the text
    /// offsets are checked; `bertflow index verify` checks the rest at any time.
    #[arg(long, requires = "index")]
    pub index_verify: bool,
    /// Search --index approximately with its HNSW graph (built by `bertflow index build
    /// --ann` or `bertflow index ann`) instead of scanning every vector; over a quantized
    /// index the graph walks the codes and its best --rescore x top_k are rescored exactly.
    #[arg(long, requires = "index")]
    pub ann: bool,
    /// Candidates explored per approximate query (at least top_k): higher is slower and
    /// finds more of the exact top_k.
    #[arg(long, default_value_t = bertflow_core::index::DEFAULT_EF_SEARCH, value_name = "N", requires = "ann")]
    pub ef_search: usize,
    /// A quantized --index (built with --quantize): candidates rescored exactly per result
    /// asked, the best N x top_k codes (of the scan, or of the graph with --ann), unless a
    /// /search request gives "rescore" [default: as `bertflow index search`, with or
    /// without --ann].
    #[arg(long, value_name = "N", requires = "index")]
    pub rescore: Option<usize>,
    /// A quantized --index of bit codes: the scan keeps N times as many candidates as it
    /// rescores and re-ranks them by the query against the codes' signs (1: no re-ranking),
    /// unless a /search request gives "shortlist" [default: as `bertflow index search`].
    #[arg(long, value_name = "N", requires = "index")]
    pub shortlist: Option<usize>,
    /// Treat the --corpus file as JSONL whatever its extension.
    #[arg(long, requires = "corpus")]
    pub corpus_jsonl: bool,
    /// text-embeddings-inference's name for --model (its command lines start bertflow as
    /// they are): a model directory or a hub id in the local Hugging Face cache.
    #[arg(long, value_name = "MODEL", conflicts_with = "model")]
    pub model_id: Option<String>,
    /// Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface).
    /// --hostname is TEI's name for it.
    #[arg(long, visible_alias = "hostname", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on; 0 lets the operating system choose a free one (the address
    /// actually bound is printed to stderr).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Batch workers: threads that each run one batch at a time through the model on one
    /// core. About one per core is right [default: the cores available to this process].
    #[arg(
        long,
        default_value_t = bertflow_core::bench::cores(),
        hide_default_value = true,
        value_name = "N",
        help_heading = "Server limits"
    )]
    pub workers: usize,
    /// --max-inputs-per-request, --max-batch-size, ... (the server's `Limits`).
    #[command(flatten)]
    pub limits: Limits,
    /// Require 'Authorization: Bearer KEY' on every route except /health (missing or wrong
    /// key: 401 invalid_api_key). Prefer the environment variable or --api-key-file: a key
    /// on the command line is visible to other users of the machine.
    #[arg(
        long,
        env = "BERTFLOW_API_KEY",
        hide_env_values = true,
        value_name = "KEY",
        help_heading = "Security and logs"
    )]
    pub api_key: Option<SecretKey>,
    /// Accept every key in FILE (one per line; blank lines and lines starting with # are
    /// skipped), in addition to --api-key.
    #[arg(long, value_name = "FILE", help_heading = "Security and logs")]
    pub api_key_file: Option<PathBuf>,
    /// Request log lines on stderr (one per request: id, route, status, latency, input
    /// count): text or json.
    #[arg(
        long,
        default_value = "text",
        value_name = "FORMAT",
        help_heading = "Security and logs"
    )]
    pub log_format: LogFormat,
    /// Also write the input texts into the request log lines (off by default: they may be
    /// private).
    #[arg(long, help_heading = "Security and logs")]
    pub log_inputs: bool,
    /// On text-embeddings-inference's routes (/embed, /similarity with "inputs", /rerank,
    /// ...), cut inputs longer than the model's maximum length when a request does not
    /// say "truncate" (as TEI's --auto-truncate); without it such an input is answered
    /// 413. bertflow's own routes always cut.
    #[arg(long, help_heading = "Server limits")]
    pub auto_truncate: bool,
    /// The name the model is served under (TEI's --served-model-name): /info's
    /// served_model_name and the "model" of /v1/embeddings and /v1/models [default: the
    /// model id].
    #[arg(long, value_name = "NAME")]
    pub served_model_name: Option<String>,
    /// The model's prompt (a name in its config_sentence_transformers.json) before every
    /// text a request does not give a prompt_name for (TEI's name) [default: the model's
    /// default_prompt_name, if any].
    #[arg(long, value_name = "NAME", conflicts_with = "default_prompt")]
    pub default_prompt_name: Option<String>,
    /// This text before every text a request does not give a prompt_name for (TEI's name);
    /// an empty one turns the model's default prompt off.
    #[arg(long, value_name = "TEXT")]
    pub default_prompt: Option<String>,
    /// Sparse and per-token outputs (`--pooling splade`, `--outputs`): POST /embed_sparse,
    /// /embed_multi and /rerank by late interaction.
    #[command(flatten)]
    pub retrieval: RetrievalArgs,
}

/// An API key from the command line or the environment; `Debug` never shows it.
#[derive(Clone)]
pub struct SecretKey(String);

impl std::str::FromStr for SecretKey {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(SecretKey(s.to_owned()))
    }
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(redacted)")
    }
}

impl ServeArgs {
    /// The keys from --api-key / BERTFLOW_API_KEY and --api-key-file. Errors name the file
    /// and line, never a key.
    fn api_keys(&self) -> Result<ApiKeys> {
        let mut keys: Vec<String> = self.api_key.iter().map(|k| k.0.clone()).collect();
        if let Some(path) = &self.api_key_file {
            // A key file holds a few keys: 1 MiB is plenty.
            let bytes = bertflow_core::io::read_regular_file(path, 1 << 20, "API key file")
                .with_context(|| format!("cannot read the API key file {}", path.display()))?;
            let text = String::from_utf8(bytes)
                .with_context(|| format!("the API key file {} is not UTF-8", path.display()))?;
            keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_owned),
            );
            if keys.is_empty() {
                anyhow::bail!("the API key file {} holds no key", path.display());
            }
        }
        ApiKeys::new(&keys).context("invalid API key (see --api-key, --api-key-file)")
    }

    fn config(&self, corpus: Option<Vec<String>>, api_keys: ApiKeys) -> ServerConfig {
        ServerConfig {
            limits: Limits {
                workers: self.workers,
                ..self.limits.clone()
            },
            corpus,
            search_index: None,
            api_keys,
            log_inputs: self.log_inputs,
            auto_truncate: self.auto_truncate,
            served_model_name: self.served_model_name.clone(),
        }
    }
}

pub fn run(a: ServeArgs) -> Result<()> {
    // Cheap checks first, so that a bad option fails before the model loads.
    let api_keys = a.api_keys()?;
    a.config(None, ApiKeys::none()).validate().context(
        "invalid server limits (see --workers, --max-queue-inputs, --max-inputs-per-request, ...)",
    )?;
    // The port before the model: a port in use fails now, not after the load.
    let listener = bind(&a.host, a.port)?;
    if a.vectors.model.runtime.threads.is_some() {
        progress::note("note: --threads / BERTFLOW_THREADS does not apply to serve; use --workers");
    }
    // The model runs on the batch workers, one core each, without the cache.
    let mut vectors = a.vectors.clone();
    if let Some(model) = &a.model_id {
        vectors.model.model = model.clone();
    }
    vectors.model.runtime.threads = None;
    vectors.model.no_cache = true;
    vectors.model.prompt = bertflow_core::PromptConfig {
        prompt_name: a.default_prompt_name.clone(),
        prompt: a.default_prompt.clone(),
    };
    let retrieval = a.retrieval.outputs(vectors.pooling.as_ref())?;
    let (backend, corpus, search_index) = if let Some(outputs) = retrieval {
        (retrieval_backend(&a, &vectors, outputs)?, None, None)
    } else if bertflow_core::rerank::is_reranker(&vectors.model.model).unwrap_or(false) {
        (reranker_backend(&a, &vectors)?, None, None)
    } else {
        embedding_backend(&a, vectors)?
    };
    let info = backend.info();
    progress::note(format!(
        "serving {} (pooling {}, {}, dimension {}, max_len {}) with {} batch worker(s)",
        info.model_id,
        info.pooling,
        info.calibrator.as_deref().unwrap_or("no calibrator"),
        info.dimension,
        info.max_len,
        a.workers
    ));
    if a.api_key.is_some() || a.api_key_file.is_some() {
        progress::note("API key required on every route except /health");
    }
    if let Some(c) = &corpus {
        progress::note(format!(
            "indexing {} corpus sentences for /search before answering requests",
            c.len()
        ));
    }
    bertflow_server::init_logging(a.log_format)?;
    let mut config = a.config(corpus, api_keys);
    config.search_index = search_index;
    // Prints "bertflow-server listening on http://ADDR" to stderr once bound, then serves
    // until SIGTERM or Ctrl-C and drains every request already received.
    bertflow_server::run_on(backend, config, listener)
        .with_context(|| format!("bertflow serve on {}:{} failed", a.host, a.port))?;
    progress::note("server stopped");
    Ok(())
}

/// The listener on `host:port`; the error says what to do (the OS error once).
fn bind(host: &str, port: u16) -> Result<std::net::TcpListener> {
    bertflow_server::bind(host, port).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "another program holds port {port}: stop it, choose another --port, or give \
                 --port 0 to let the system pick a free one (printed at start)"
            ),
            std::io::ErrorKind::PermissionDenied => format!(
                "port {port} needs privileges here: choose a port above 1023, or --port 0 for \
                 a free one"
            ),
            std::io::ErrorKind::AddrNotAvailable => format!(
                "{host} is not an address of this machine: --host 127.0.0.1 (this machine \
                 only) or 0.0.0.0 (every interface)"
            ),
            _ => "check --host and --port (--port 0 lets the system pick a free port)".into(),
        };
        anyhow::anyhow!("cannot listen on {host}:{port}: {e}; {hint}")
    })
}

/// The backend of a cross-encoder checkpoint: TEI's `/rerank` and `/predict`
/// (an embedding route answers that the model is a reranker).
fn reranker_backend(a: &ServeArgs, vectors: &VectorArgs) -> Result<Arc<dyn EmbedBackend>> {
    let m = &vectors.model;
    if a.index.is_some() || a.corpus.is_some() {
        anyhow::bail!(
            "--index and --corpus search embeddings; {} is a reranker (cross-encoder)",
            m.model
        );
    }
    let config = bertflow_core::rerank::RerankerConfig {
        model: m.model.clone(),
        runtime: bertflow_core::RuntimeConfig {
            threads: Some(1),
            ..m.runtime.clone()
        },
    };
    let reranker = config.open(progress::handle())?;
    Ok(Arc::new(RerankBackend::new(reranker)))
}

/// The backend of a model served for its retrieval outputs (`--pooling splade`,
/// `--outputs dense,sparse,multi`): /embed_sparse, /embed_multi, late-interaction
/// /rerank, and the dense first-token vector when asked for.
fn retrieval_backend(
    a: &ServeArgs,
    vectors: &VectorArgs,
    outputs: bertflow_core::encoder::head::Outputs,
) -> Result<Arc<dyn EmbedBackend>> {
    if a.index.is_some() || a.corpus.is_some() {
        anyhow::bail!(
            "--index and --corpus search dense pipeline vectors; a model served with \
             --pooling splade or --outputs has no /search"
        );
    }
    if vectors.calibrator.is_some() {
        anyhow::bail!(
            "--calibrator applies to dense pooling outputs only; sparse and per-token outputs \
             are served as the model makes them"
        );
    }
    let r = &a.retrieval;
    let retriever = bertflow_core::retrieval::Retriever::open(&vectors.model, progress::handle())?;
    let serving = RetrievalServing {
        outputs,
        max_active_dims: r.max_active_dims,
        skip_first: r.skip_first,
        query_length: r.query_length,
    };
    Ok(Arc::new(RetrievalBackend::new(retriever, serving)?))
}

type Served = (
    Arc<dyn EmbedBackend>,
    Option<Vec<String>>,
    Option<bertflow_server::SharedIndex>,
);

/// The backend of an embedding model, with the corpus or index to search.
fn embedding_backend(a: &ServeArgs, mut vectors: VectorArgs) -> Result<Served> {
    if let Some(index) = &a.index {
        // The pooling and calibrator the index was built with, unless given.
        bertflow_core::indexing::adopt_index_settings(&mut vectors, index)?;
    }
    let pipeline = open_pipeline(&vectors)?;
    let corpus = match &a.corpus {
        Some(path) => Some(
            read_sentences(path, a.corpus_jsonl, EmptyLines::Skip)
                .context("cannot read the search corpus")?
                .texts,
        ),
        None => None,
    };
    let backend = ModelBackend::new(pipeline, a.vectors.model.runtime.batch_size)?;
    let search_index = match &a.index {
        Some(path) => {
            let started = std::time::Instant::now();
            let options = IndexOptions {
                verify: a.index_verify,
                ann: a.ann,
                ef_search: a.ef_search,
                rescore: a
                    .rescore
                    .unwrap_or(bertflow_core::indexing::DEFAULT_RESCORE),
                ann_rescore: a.rescore,
                shortlist: a
                    .shortlist
                    .unwrap_or(bertflow_core::indexing::DEFAULT_SHORTLIST),
            };
            let mapped =
                MappedIndex::open(path, backend.identity(), options).map_err(anyhow::Error::msg)?;
            for (flag, given) in [("--rescore", a.rescore), ("--shortlist", a.shortlist)] {
                if given.is_some() && mapped.index().quantizer().is_none() {
                    anyhow::bail!(
                        "{flag}: the index {} stores no codes (build it with `bertflow index \
                         build --quantize ...`); it is searched exactly",
                        path.display()
                    );
                }
            }
            for n in &mapped.notes {
                progress::note(format!("note: {n}"));
            }
            progress::note(format!(
                "opened the index {} ({} sentences, {} search) in {:.0} ms",
                path.display(),
                mapped.index().len(),
                bertflow_server::SearchIndex::method(&mapped),
                started.elapsed().as_secs_f64() * 1e3
            ));
            Some(mapped)
        }
        None => None,
    };
    let mut backend: Arc<dyn EmbedBackend> = Arc::new(backend);
    if let Some(index) = search_index
        .as_ref()
        .filter(|m| m.index().sparse_info().is_some())
    {
        backend = with_sparse_head(&vectors, backend, &index.index())?;
    }
    Ok((backend, corpus, search_index.map(MappedIndex::shared)))
}

/// `backend` with the model's sparse head beside it, for `/search`'s sparse
/// and hybrid modes over an index that stores sparse vectors; `backend` as
/// it is (dense search only, said on stderr) when the model has no sparse head.
fn with_sparse_head(
    vectors: &VectorArgs,
    backend: Arc<dyn EmbedBackend>,
    index: &bertflow_core::index::Index,
) -> Result<Arc<dyn EmbedBackend>> {
    let retriever = bertflow_core::retrieval::Retriever::open(&vectors.model, progress::handle())?;
    if !retriever.encoder.has_sparse() {
        progress::note(
            "note: the index stores sparse vectors, but the model has no sparse head to encode \
             queries: /search is dense only",
        );
        return Ok(backend);
    }
    if let Some(note) = bertflow_core::indexing::check_sparse_source(index, &retriever)? {
        progress::note(format!("note: {note}"));
    }
    progress::note(
        "the index stores sparse vectors: /search takes mode sparse and hybrid (the model's \
         sparse head loaded beside the pipeline; /embed_sparse answers too)",
    );
    // Queries keep every weight (a --max-active-dims cut applies to stored vectors).
    Ok(Arc::new(WithSparseHead::new(backend, retriever, None)?))
}
