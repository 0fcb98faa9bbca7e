//! # bertflow-server
//!
//! An HTTP server for calibrated BERT sentence embeddings. The HTTP layer does
//! not depend on the model code: the caller hands an [`EmbedBackend`] to
//! [`serve`], [`serve_addr`] or [`run`]. With the feature `model`, the module
//! `model` provides the real one (`ModelBackend`: the BERT encoder, a pooling
//! and a calibrator) and a memory-mapped `bertflow index` file as a
//! [`SearchIndex`] (`MappedIndex`, exact or HNSW).
//!
//! ## Endpoints
//!
//! Every error comes back in OpenAI's shape,
//! `{"error": {"message": "...", "type": "...", "param": ..., "code": "..."}}`,
//! with the status from the table in [`ApiError`]. Request bodies are parsed as
//! JSON whatever their Content-Type; unknown fields are refused (422) so that
//! a typo such as `"topk"` is not silently ignored.
//!
//! ### `POST /v1/embeddings` (OpenAI embeddings shape)
//!
//! ```text
//! curl -s http://127.0.0.1:8080/v1/embeddings -H 'Content-Type: application/json' \
//!   -d '{"input": ["A man is playing a guitar.", "A woman is slicing onions."]}'
//! ```
//!
//! Request fields: `input` (a string or an array of strings; required),
//! `model` (optional, echoed back; defaults to the backend's model id),
//! `encoding_format` (`"float"`, the default, or `"base64"`: the
//! little-endian f32 bytes of the vector, base64 with padding, as the OpenAI
//! clients decode it; or the codes `"int8"`, `"uint8"`, `"binary"`,
//! `"ubinary"`, see below), `dimensions`
//! (optional, `1..=dimension`: the vector is cut to its first `dimensions`
//! components, a plain prefix that is *not* re-normalised), `user` (accepted
//! and ignored). bertflow vectors are **not** L2-normalised: calibrated spaces
//! are compared by cosine, so normalise on the client if you need unit
//! vectors. Response: `{"object": "list", "data": [{"object": "embedding",
//! "index": 0, "embedding": [...]}, ...], "model": "...", "usage":
//! {"prompt_tokens": N, "total_tokens": N}, "truncated": [indices]}`, where
//! `usage` counts the tokens the model saw (after truncation) and the
//! bertflow extension `truncated` lists the inputs cut at the model's
//! `max_len`.
//!
//! **Codes.** When the backend's calibrator file ends in a quantizer stage
//! ([`EmbedBackend::quantizer`], fitted on the corpus by `bertflow fit
//! --quantize`), `encoding_format` `int8`/`uint8` (an int8 or uint8 stage) and
//! `binary`/`ubinary` (a sign-bit stage) answer its codes of the calibrated
//! vectors: per input a JSON array of integers, the bytes `bertflow encode
//! --calibrator` writes (int8 values for `int8` and `binary`, 0..255 for
//! `uint8` and `ubinary`; packed bits MSB-first); the family's other name is
//! the same codes with each byte XOR 0x80. With the extension
//! `"code_encoding": "base64"` each is the base64 of the raw code bytes
//! instead (`base64` itself stays f32). Core's rules
//! (`bertflow_core::quantize::check_stage_request`) answer 422: no stage
//! (nothing is fitted on the fly: the message names the `bertflow fit ...
//! --quantize` to run), the other family, a `dimensions` cut that changes
//! the quantizer's width (the cut comes after the rotation, before the
//! quantizer), `normalize` before int8/uint8 ranges. An unknown
//! `encoding_format` is a 422 listing the accepted values.
//!
//! ### `POST /similarity`
//!
//! ```text
//! curl -s http://127.0.0.1:8080/similarity -H 'Content-Type: application/json' \
//!   -d '{"source": "A man is playing a guitar.", "targets": ["A man plays guitar.", "A cat sleeps."]}'
//! ```
//!
//! Either `{"pairs": [[a, b], ...]}` or `{"source": a, "targets": [b, ...]}`;
//! answers `{"scores": [...]}`, the cosine of each pair (computed in f64; 0
//! when a vector is zero). Each text counts as one input against
//! `max_inputs_per_request` (two per pair).
//!
//! ### `POST /search`
//!
//! ```text
//! curl -s http://127.0.0.1:8080/search -H 'Content-Type: application/json' \
//!   -d '{"query": "someone plays an instrument", "top_k": 3}'
//! ```
//!
//! Cosine search over the corpus given in [`ServerConfig::corpus`] (embedded
//! at start-up through the backend, searched exactly), or over the
//! [`SearchIndex`] given in [`ServerConfig::search_index`] (e.g. a
//! memory-mapped `bertflow index` file, exact or HNSW; `GET /info` names the
//! method). Over a quantized index the codes are scanned and the best
//! `rescore x top_k` rescored exactly: `rescore` is the server's
//! (`serve --rescore`, `model::IndexOptions::rescore`) or the request's
//! `"rescore"` (422 where the index has no codes, searches its HNSW graph, or
//! refuses the depth). Bit codes: the scan keeps `shortlist` times as many,
//! re-ranked by the query against the codes' signs first (`serve
//! --shortlist`, the request's `"shortlist"`, checked the same way).
//! `{"query": q, "top_k": k}` answers `{"results": [{"index": i, "text":
//! "...", "score": s}, ...]}`, best first (ties: lower index first);
//! `{"queries": [q, ...]}` answers `{"results": [[...], ...]}`, one list per
//! query. `top_k` defaults to 10, must be in `1..=max_top_k`, and is capped at
//! the corpus size. Without a corpus the answer is **404** with code
//! `no_corpus`: the request is well-formed, but this server has no index to
//! search, as it has no route to one (422 would tell the client to fix its
//! request, which cannot help).
//!
//! ### `GET /`
//!
//! A playground page (self-contained HTML compiled into the binary): type
//! sentences to see their pairwise cosines, and a query to see the search
//! hits. Served without an API key: it holds no data, and its own requests
//! carry the key typed into it.
//!
//! ### `GET /health`
//!
//! ```text
//! curl -s http://127.0.0.1:8080/health
//! ```
//!
//! `{"status": "ok"}` while the server accepts requests.
//!
//! ### `GET /info`
//!
//! ```text
//! curl -s http://127.0.0.1:8080/info
//! ```
//!
//! Model id, pooling, calibrator, dimension, max_len, `normalized` (always
//! false), every limit, `corpus_size` (null without a corpus),
//! `search_method` (for a quantized index its codes and rescore depth),
//! `quantizer` (the calibrator's quantizer stage, null without one),
//! `encoding_formats` (what `/v1/embeddings` answers here) and the current
//! `load` (queued inputs and requests, busy workers, batches run).
//!
//! ## Batching, back-pressure, shutdown
//!
//! Every route that runs the model enters one queue: each input is tokenized
//! once ([`EmbedBackend::encode`], on the tokenization workers), admitted by
//! tokens, and run in token batches ([`EmbedBackend::embed`],
//! [`EmbedBackend::embed_all`], [`EmbedBackend::predict`]) of inputs of
//! similar length, up to [`Limits::max_batch_tokens`] and
//! [`Limits::max_batch_size`]; larger requests are split across batches
//! and reassembled in order. The queue holds at most
//! [`Limits::max_queue_inputs`] waiting inputs and
//! [`Limits::max_queue_tokens`] waiting tokens; a request that does not
//! fit is answered 429 at once (with `Retry-After: 1`). A request whose
//! client goes away leaves the queue. On shutdown the server stops accepting
//! connections and admitting work (503), answers every request already
//! admitted (queued ones included), drops connections whose request is still
//! arriving after [`Limits::shutdown_timeout_ms`], stops its workers (waiting
//! for a running batch only until that timeout) and returns.
//!
//! ## Connections
//!
//! At most [`Limits::max_connections`] connections are open at once (more wait
//! in the listen backlog); a request head must arrive within
//! [`Limits::header_timeout_ms`], its body within [`Limits::body_timeout_ms`]
//! (else 408), and an idle kept-alive connection is closed after
//! [`Limits::idle_timeout_ms`]. A declared `Content-Length` over
//! [`Limits::max_body_bytes`] is answered 413 before the body is read (so
//! `Expect: 100-continue` gets 413). Errors of the HTTP layer itself (400,
//! 414, 431) are JSON in the same error shape.

mod access;
mod api;
mod auth;
mod backend;
mod codes;
mod config;
mod conn;
mod embed_outputs;
mod error;
mod index;
mod infer;
mod inputs;
mod logging;
#[cfg(feature = "model")]
mod mapped;
mod metrics;
#[cfg(feature = "model")]
pub mod model;
mod openapi;
mod prompt;
mod queue;
mod rerank;
#[cfg(feature = "model")]
pub mod rerank_model;
#[cfg(feature = "model")]
pub mod retrieval_model;
mod routes;
mod search;
mod state;
mod tei;
mod tei_error;
mod tools;
mod truncation;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

pub use auth::ApiKeys;
pub use backend::{
    BackendError, BackendInfo, EmbedBackend, Embedded, Encoding, ModelKind, SparseEmbedded,
    TokenSpan, Tokenized,
};
pub use config::{Limits, ServerConfig};
pub use error::{ApiError, ServerError};
pub use index::{Hit, ModeQuery, ScanDepth, SearchIndex, SharedIndex};
pub use logging::{init_logging, LogFormat};
pub use metrics::Load;
pub use openapi::openapi_document;

use index::CorpusIndex;
use queue::{Queue, QueueLimits};
use state::AppState;

/// Serve on `listener` until `shutdown` completes, then stop accepting,
/// finish every request already received and return.
///
/// Before accepting anything, validates `config` and the backend's
/// [`BackendInfo`], and embeds [`ServerConfig::corpus`] (if any) through the
/// backend; connections arriving meanwhile wait in the listener's backlog.
pub async fn serve(
    backend: Arc<dyn EmbedBackend>,
    config: ServerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let state = start(backend, config).await?;
    let limits = conn::ConnLimits::from_limits(&state.config.limits);
    // On the signal: admit nothing more (503), then let the connection
    // layer finish what was admitted within the shutdown timeout.
    let signalled = Arc::new(std::sync::Mutex::new(None));
    let stopping = Arc::clone(&state);
    let when = Arc::clone(&signalled);
    let shutdown = async move {
        shutdown.await;
        *when.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
        stopping.infer.stop_admitting();
    };
    conn::serve_connections(listener, guarded_router(&state, true), limits, shutdown).await;

    // Every connection is closed, so no one waits for an answer: the queue
    // is empty (a dropped request leaves it). Stop the workers and wait for
    // the batch they may be running, until the shutdown timeout has passed.
    let since = signalled
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or_else(std::time::Instant::now);
    let left = limits
        .shutdown
        .saturating_sub(since.elapsed())
        .max(std::time::Duration::from_millis(100));
    let stopping = Arc::clone(&state);
    let joined = tokio::task::spawn_blocking(move || stopping.infer.shutdown());
    if let Ok(joined) = tokio::time::timeout(left, joined).await {
        joined.map_err(|e| ServerError::Io(std::io::Error::other(e)))?;
    } else {
        tracing::warn!(target: "bertflow_server", "shutdown timeout: a worker is still running a batch; leaving it");
    }
    Ok(())
}

/// The server without a listener: its router, to drive requests through
/// in-process (`tower::ServiceExt::oneshot`), e.g. in tests and fuzzing.
/// The queue's workers run until [`App::shutdown`] (or the process ends).
pub struct App {
    state: Arc<AppState>,
}

impl App {
    /// Checks `config` and the backend and embeds the corpus, as [`serve`]
    /// does before accepting connections.
    pub async fn new(
        backend: Arc<dyn EmbedBackend>,
        config: ServerConfig,
    ) -> Result<Self, ServerError> {
        Ok(App {
            state: start(backend, config).await?,
        })
    }

    /// Every route, as [`serve`] serves them.
    pub fn router(&self) -> axum::Router {
        guarded_router(&self.state, false)
    }

    /// Stops the queue's workers (requests still queued are answered first).
    pub fn shutdown(&self) {
        self.state.infer.shutdown();
    }
}

/// Every route behind the body guard (limit, `Expect: 100-continue`, and
/// with `timeout` the body timeout).
fn guarded_router(state: &Arc<AppState>, timeout: bool) -> axum::Router {
    let limits = conn::BodyLimits {
        max_body_bytes: state.config.limits.max_body_bytes,
        timeout_ms: timeout.then_some(state.config.limits.body_timeout_ms),
    };
    routes::router(Arc::clone(state)).layer(axum::middleware::from_fn_with_state(
        limits,
        conn::body_guard,
    ))
}

/// Validates, embeds the corpus and starts the queue: the state `serve` serves.
async fn start(
    backend: Arc<dyn EmbedBackend>,
    mut config: ServerConfig,
) -> Result<Arc<AppState>, ServerError> {
    config.validate()?;
    let info = backend.info();
    if info.dimension == 0 || info.max_len == 0 {
        return Err(ServerError::Config(format!(
            "the backend reports dimension {} and max_len {}; both must be at least 1",
            info.dimension, info.max_len
        )));
    }

    let index: Option<Arc<dyn SearchIndex>> =
        match (config.corpus.take(), config.search_index.take()) {
            (Some(corpus), _) => {
                let backend = Arc::clone(&backend);
                let dimension = info.dimension;
                let (tokens, size) = (config.limits.max_batch_tokens, config.limits.max_batch_size);
                let built = tokio::task::spawn_blocking(move || {
                    CorpusIndex::build(backend.as_ref(), corpus, dimension, tokens, size)
                })
                .await
                .map_err(|e| ServerError::Corpus(format!("indexing task failed: {e}")))??;
                Some(Arc::new(built))
            }
            (None, Some(shared)) => {
                if shared.0.dimension() != info.dimension {
                    return Err(ServerError::Config(format!(
                        "the search index holds vectors of dimension {} but the backend makes {}",
                        shared.0.dimension(),
                        info.dimension
                    )));
                }
                Some(shared.0)
            }
            (None, None) => None,
        };

    let metrics = Arc::new(metrics::Metrics::new()?);
    metrics.corpus_size.set(
        index
            .as_ref()
            .map_or(0, |i| i64::try_from(i.len()).unwrap_or(i64::MAX)),
    );
    let queue = Queue::start(
        Arc::clone(&backend),
        info.dimension,
        info.labels.len(),
        QueueLimits {
            max_batch_tokens: config.limits.max_batch_tokens,
            max_batch_size: config.limits.max_batch_size,
            max_queue_inputs: config.limits.max_queue_inputs,
            max_queue_tokens: config.limits.max_queue_tokens,
        },
        config.limits.workers,
        Arc::clone(&metrics),
    )?;
    let infer = infer::Infer::new(
        queue,
        Arc::clone(&backend),
        config.limits.tokenizers(),
        info.max_len,
        Arc::clone(&metrics),
    );
    Ok(Arc::new(AppState {
        backend,
        info,
        config,
        infer,
        index,
        metrics,
        request_ids: state::RequestIds::default(),
        started_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    }))
}

/// Bind `host:port` and [`serve`] until SIGTERM or Ctrl-C (see
/// [`shutdown_signal`]). Prints the bound address to stderr.
pub async fn serve_addr(
    backend: Arc<dyn EmbedBackend>,
    config: ServerConfig,
    host: &str,
    port: u16,
) -> Result<(), ServerError> {
    let listener = TcpListener::bind((host, port)).await?;
    eprintln!(
        "bertflow-server listening on http://{}",
        listener.local_addr()?
    );
    serve(backend, config, listener, shutdown_signal()).await
}

/// Blocking convenience for synchronous callers such as the CLI: build a
/// multi-threaded tokio runtime and run [`serve_addr`] on it.
pub fn run(
    backend: Arc<dyn EmbedBackend>,
    config: ServerConfig,
    host: &str,
    port: u16,
) -> Result<(), ServerError> {
    run_on(backend, config, bind(host, port)?)
}

/// Binds `host:port` for [`run_on`]. A caller binds before loading its
/// model, so that a port in use fails at once, not after a long start.
pub fn bind(host: &str, port: u16) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind((host, port))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// [`run`] on a listener from [`bind`]: prints the bound address to stderr,
/// then serves until SIGTERM or Ctrl-C.
pub fn run_on(
    backend: Arc<dyn EmbedBackend>,
    config: ServerConfig,
    listener: std::net::TcpListener,
) -> Result<(), ServerError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("bertflow-http")
        .build()?;
    let result = runtime.block_on(async move {
        let listener = TcpListener::from_std(listener)?;
        eprintln!(
            "bertflow-server listening on http://{}",
            listener.local_addr()?
        );
        serve(backend, config, listener, shutdown_signal()).await
    });
    // Tokenization still running for a client that is gone must not keep
    // the process: dropping the runtime would wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    result
}

/// Completes on Ctrl-C (SIGINT) or, on Unix, SIGTERM. A signal whose handler
/// cannot be installed is ignored (it can then never fire).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
