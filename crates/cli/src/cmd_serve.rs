//! `bertflow serve`: calibrated embeddings, similarity and search over HTTP.
//!
//! The HTTP side (routes, batching, back-pressure, errors, graceful shutdown)
//! lives in `bertflow-server`; this module plugs the BERT encoder, the pooling
//! and an optional calibrator into it as an [`EmbedBackend`].
use crate::args::{parse_pooling, ModelArgs};
use crate::progress;
use anyhow::{Context, Result};
use bertflow_calib::Calibrator;
use bertflow_core::io::{read_sentences, EmptyLines};
use bertflow_core::LoadedCalibrator;
use bertflow_encoder::{EncodeOptions, Encoder, PoolSource, Pooling};
use bertflow_server::{BackendError, BackendInfo, EmbedBackend, Embedded, ServerConfig};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

const AFTER_HELP: &str =
    "Endpoints: POST /v1/embeddings (OpenAI shape), POST /similarity, POST /search \
(needs --corpus), GET /health, GET /info. Vectors are not L2-normalised.

Concurrent requests are packed into batches of at most --max-batch-size inputs and \
--max-batch-tokens tokens; each of the --workers batch workers runs one batch at a time on one \
core, in forward passes of at most --batch-size sentences. --threads, --cache-dir and --no-cache \
do not apply to serve. The bound address is printed to stderr as \
'bertflow-server listening on http://HOST:PORT'. SIGTERM or Ctrl-C stops accepting connections, \
answers every request already received, and exits 0.";

#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pooling; see `bertflow poolings`.
    #[arg(long, short = 'p', default_value = "last-avg", value_parser = parse_pooling)]
    pub pooling: Pooling,
    /// Apply a fitted calibrator (a .safetensors file written by `bertflow fit`) to every
    /// vector served; the dimension becomes the calibrator's output dimension. It must have
    /// been fitted on this model and pooling (see --allow-mismatch).
    #[arg(long, value_name = "FILE")]
    pub calibrator: Option<PathBuf>,
    /// Allow a calibrator fitted on another model or pooling (never another dimension).
    #[arg(long)]
    pub allow_mismatch: bool,
    /// Sentences to index for POST /search: one per line, or JSONL with a "text" field
    /// (.jsonl/.ndjson or --corpus-jsonl). Empty lines are skipped. They are embedded at
    /// start-up (with the calibrator, if any) before the server answers requests. Without
    /// a corpus, /search answers 404 no_corpus.
    #[arg(long, value_name = "FILE")]
    pub corpus: Option<PathBuf>,
    /// Treat the --corpus file as JSONL whatever its extension.
    #[arg(long, requires = "corpus")]
    pub corpus_jsonl: bool,
    /// Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on; 0 lets the operating system choose a free one (the address
    /// actually bound is printed to stderr).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Batch workers: threads that each run one batch at a time through the model on one
    /// core. About one per core is right.
    #[arg(
        long,
        default_value_t = 2,
        value_name = "N",
        help_heading = "Server limits"
    )]
    pub workers: usize,
    /// Most inputs in one request (the `input` array, both texts of every /similarity
    /// pair, /search `queries`). More: 413 too_many_inputs.
    #[arg(long, default_value_t = ServerConfig::default().max_inputs_per_request, value_name = "N", help_heading = "Server limits")]
    pub max_inputs_per_request: usize,
    /// Most characters in one input text. More: 422 input_too_long. (Inputs longer than
    /// --max-len tokens are not refused but truncated, and reported in `truncated`.)
    #[arg(long, default_value_t = ServerConfig::default().max_chars_per_input, value_name = "N", help_heading = "Server limits")]
    pub max_chars_per_input: usize,
    /// Most bytes in a request body. More: 413 body_too_large.
    #[arg(long, default_value_t = ServerConfig::default().max_body_bytes, value_name = "BYTES", help_heading = "Server limits")]
    pub max_body_bytes: usize,
    /// Most inputs waiting for a worker, over all requests. A request whose inputs do not
    /// fit is answered 429 overloaded at once (with Retry-After: 1). Must be at least
    /// --max-inputs-per-request.
    #[arg(long, default_value_t = ServerConfig::default().max_queue_inputs, value_name = "N", help_heading = "Server limits")]
    pub max_queue_inputs: usize,
    /// Token budget of one batch: the sum over its inputs of their token counts (capped at
    /// --max-len). A single longer input still runs, alone.
    #[arg(long, default_value_t = ServerConfig::default().max_batch_tokens, value_name = "TOKENS", help_heading = "Server limits")]
    pub max_batch_tokens: usize,
    /// Most inputs in one batch.
    #[arg(long, default_value_t = ServerConfig::default().max_batch_size, value_name = "N", help_heading = "Server limits")]
    pub max_batch_size: usize,
    /// Largest `top_k` accepted by /search. More: 422 invalid_field.
    #[arg(long, default_value_t = ServerConfig::default().max_top_k, value_name = "N", help_heading = "Server limits")]
    pub max_top_k: usize,
}

/// The BERT encoder with one pooling and an optional calibrator, as the
/// server's model.
struct ModelBackend {
    encoder: Encoder,
    source: PoolSource,
    calibrator: Option<LoadedCalibrator>,
    opts: EncodeOptions,
    info: BackendInfo,
}

impl ModelBackend {
    fn new(
        encoder: Encoder,
        pooling: &Pooling,
        calibrator: Option<LoadedCalibrator>,
        batch_size: usize,
    ) -> Result<Self> {
        let source = encoder
            .source(pooling)
            .with_context(|| format!("pooling {pooling} does not apply to this model"))?;
        let info = BackendInfo {
            model_id: encoder.model_id().to_string(),
            pooling: pooling.to_string(),
            calibrator: calibrator.as_ref().map(LoadedCalibrator::describe),
            dimension: calibrator
                .as_ref()
                .map_or(encoder.dim(), |c| c.fitted.output_dim()),
            max_len: encoder.max_len(),
        };
        // One core per call: parallelism comes from the server's batch workers.
        let opts = EncodeOptions {
            batch_size: batch_size.max(1),
            threads: 1,
        };
        Ok(Self {
            encoder,
            source,
            calibrator,
            opts,
            info,
        })
    }
}

impl EmbedBackend for ModelBackend {
    fn info(&self) -> BackendInfo {
        self.info.clone()
    }

    fn tokenize_len(&self, text: &str) -> usize {
        // A text the tokenizer refuses costs a full sequence; `embed` then reports the error.
        self.encoder
            .tokenizer()
            .encode(text)
            .map_or(self.encoder.max_len(), |ids| ids.len())
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Embedded>, BackendError> {
        let out = self
            .encoder
            .encode(
                texts,
                std::slice::from_ref(&self.source),
                &self.opts,
                &|_| {},
            )
            .map_err(|e| BackendError::new(format!("encoding failed: {e}")))?;
        let raw = out
            .embeddings
            .into_iter()
            .next()
            .ok_or_else(|| BackendError::new("the encoder returned no embeddings"))?;
        let vectors = match &self.calibrator {
            Some(c) => c
                .apply(raw.view())
                .map_err(|e| BackendError::new(format!("calibrator failed: {e:#}")))?,
            None => raw,
        };
        if vectors.nrows() != texts.len()
            || out.tokens.len() != texts.len()
            || out.truncated.len() != texts.len()
        {
            return Err(BackendError::new(format!(
                "the encoder returned {} rows for {} inputs",
                vectors.nrows(),
                texts.len()
            )));
        }
        Ok(vectors
            .outer_iter()
            .zip(out.tokens.iter().zip(&out.truncated))
            .map(|(row, (&tokens, &truncated))| Embedded {
                vector: row.to_vec(),
                tokens,
                truncated,
            })
            .collect())
    }
}

impl ServeArgs {
    fn config(&self, corpus: Option<Vec<String>>) -> ServerConfig {
        ServerConfig {
            max_inputs_per_request: self.max_inputs_per_request,
            max_chars_per_input: self.max_chars_per_input,
            max_body_bytes: self.max_body_bytes,
            max_queue_inputs: self.max_queue_inputs,
            max_batch_tokens: self.max_batch_tokens,
            max_batch_size: self.max_batch_size,
            workers: self.workers,
            max_top_k: self.max_top_k,
            corpus,
        }
    }
}

pub fn run(a: ServeArgs) -> Result<()> {
    // Cheap checks first, so that a bad option fails before the model loads.
    a.config(None).validate().context(
        "invalid server limits (see --workers, --max-queue-inputs, --max-inputs-per-request, ...)",
    )?;
    if a.model.threads.is_some() {
        progress::note("note: --threads / BERTFLOW_THREADS does not apply to serve; use --workers");
    }
    let calibrator = a
        .calibrator
        .as_deref()
        .map(|p| LoadedCalibrator::open(p, a.allow_mismatch))
        .transpose()?;
    let corpus = match &a.corpus {
        Some(path) => Some(
            read_sentences(path, a.corpus_jsonl, EmptyLines::Skip)
                .context("cannot read the search corpus")?
                .texts,
        ),
        None => None,
    };
    let encoder = Encoder::load(&a.model.model, a.model.max_len)
        .with_context(|| format!("cannot load model '{}'", a.model.model))?;
    if let Some(c) = &calibrator {
        c.check(&encoder, &a.pooling, &*progress::handle())?;
    }
    let backend = ModelBackend::new(encoder, &a.pooling, calibrator, a.model.batch_size)?;
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
    if let Some(c) = &corpus {
        progress::note(format!(
            "indexing {} corpus sentences for /search before answering requests",
            c.len()
        ));
    }
    let config = a.config(corpus);
    // Prints "bertflow-server listening on http://ADDR" to stderr once bound, then serves
    // until SIGTERM or Ctrl-C and drains every request already received.
    bertflow_server::run(Arc::new(backend), config, &a.host, a.port)
        .with_context(|| format!("bertflow serve on {}:{} failed", a.host, a.port))?;
    progress::note("server stopped");
    Ok(())
}
