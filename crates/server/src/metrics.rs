//! Prometheus metrics, one registry per server (so that several servers in one
//! process, as in the tests, do not share counters), rendered by `GET /metrics`
//! in the Prometheus text exposition format.

use prometheus::{
    Encoder as _, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    Opts, Registry, TextEncoder,
};

use crate::error::ServerError;
use serde::Serialize;

/// A snapshot of the queue, reported by `GET /info` under `load`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Load {
    /// Inputs queued and not yet taken by a worker.
    pub queued_inputs: usize,
    /// Their tokens (what `max_queue_tokens` bounds).
    pub queued_tokens: usize,
    /// Requests with at least one input not yet taken by a worker.
    pub queued_requests: usize,
    /// Inputs of admitted requests still being tokenized (they count
    /// against `max_queue_inputs`).
    pub tokenizing_inputs: usize,
    /// Workers currently running a batch.
    pub busy_workers: usize,
    /// Batches run since start-up.
    pub batches: u64,
}

/// Latency buckets in seconds: 1 ms to 30 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Inputs per batch.
const SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
/// Tokens per batch.
const TOKEN_BUCKETS: &[f64] = &[
    16.0, 64.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0,
];

/// Every metric the server exports. Names start with `bertflow_`.
pub(crate) struct Metrics {
    registry: Registry,
    /// `bertflow_requests_total{route, status}`.
    pub requests: IntCounterVec,
    /// `bertflow_request_duration_seconds{route}`.
    pub latency: HistogramVec,
    /// `bertflow_inputs_total{route}`: texts received (embedded, tokenised, queried).
    pub inputs: IntCounterVec,
    /// `bertflow_inputs_truncated_total`: inputs cut at the model's max_len.
    pub truncated: IntCounter,
    /// `bertflow_batch_size`: inputs per backend call.
    pub batch_size: Histogram,
    /// `bertflow_batch_tokens`: tokens (clamped to max_len) per backend call.
    pub batch_tokens: Histogram,
    /// `bertflow_batch_padding_tokens_total`: tokens a padded forward pass
    /// would add to the batches run (longest input x inputs, less their sum).
    pub padding: IntCounter,
    /// `bertflow_batch_tokens_total`: tokens of the batches run.
    pub tokens: IntCounter,
    /// `bertflow_requests_cancelled_total`: requests whose client went away
    /// while they were queued (their inputs left the queue unrun).
    pub cancelled: IntCounter,
    /// `bertflow_search_duration_seconds`: the index lookup of one query (after embedding).
    pub search: Histogram,
    /// `bertflow_queue_inputs`: inputs waiting for a worker (set at each scrape).
    queue_inputs: IntGauge,
    /// `bertflow_queue_requests`: requests waiting for a worker (set at each scrape).
    queue_requests: IntGauge,
    /// `bertflow_queue_tokens`: tokens waiting for a worker (set at each scrape).
    queue_tokens: IntGauge,
    /// `bertflow_tokenizing_inputs`: inputs being tokenized (set at each scrape).
    tokenizing: IntGauge,
    /// `bertflow_busy_workers`: workers running a batch (set at each scrape).
    busy_workers: IntGauge,
    /// `bertflow_corpus_size`: sentences in the search index (0 without one).
    pub corpus_size: IntGauge,
}

fn metric_error(e: prometheus::Error) -> ServerError {
    ServerError::Config(format!("cannot register metrics: {e}"))
}

impl Metrics {
    pub(crate) fn new() -> Result<Self, ServerError> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "bertflow_requests_total",
                "HTTP requests answered, by route and status code",
            ),
            &["route", "status"],
        )
        .map_err(metric_error)?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "bertflow_request_duration_seconds",
                "Time from receiving a request to answering it, by route",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["route"],
        )
        .map_err(metric_error)?;
        let inputs = IntCounterVec::new(
            Opts::new(
                "bertflow_inputs_total",
                "Input texts received in accepted requests, by route",
            ),
            &["route"],
        )
        .map_err(metric_error)?;
        let truncated = IntCounter::new(
            "bertflow_inputs_truncated_total",
            "Inputs cut at the model's maximum length",
        )
        .map_err(metric_error)?;
        let batch_size = Histogram::with_opts(
            HistogramOpts::new("bertflow_batch_size", "Inputs per backend embed call")
                .buckets(SIZE_BUCKETS.to_vec()),
        )
        .map_err(metric_error)?;
        let batch_tokens = Histogram::with_opts(
            HistogramOpts::new(
                "bertflow_batch_tokens",
                "Tokens (capped at max_len per input) per backend embed call",
            )
            .buckets(TOKEN_BUCKETS.to_vec()),
        )
        .map_err(metric_error)?;
        let padding = IntCounter::new(
            "bertflow_batch_padding_tokens_total",
            "Padding a padded forward pass would add to the batches run (longest input times inputs, less their tokens)",
        )
        .map_err(metric_error)?;
        let tokens = IntCounter::new(
            "bertflow_batch_tokens_total",
            "Tokens of the batches run (padding_tokens_total / tokens_total is the padding waste)",
        )
        .map_err(metric_error)?;
        let cancelled = IntCounter::new(
            "bertflow_requests_cancelled_total",
            "Requests whose client went away while they were queued",
        )
        .map_err(metric_error)?;
        let queue_tokens = IntGauge::new(
            "bertflow_queue_tokens",
            "Tokens queued and not yet taken by a worker",
        )
        .map_err(metric_error)?;
        let tokenizing = IntGauge::new(
            "bertflow_tokenizing_inputs",
            "Inputs of admitted requests being tokenized",
        )
        .map_err(metric_error)?;
        let search = Histogram::with_opts(
            HistogramOpts::new(
                "bertflow_search_duration_seconds",
                "Index lookup time of one /search query, embedding excluded",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
        )
        .map_err(metric_error)?;
        let queue_inputs = IntGauge::new(
            "bertflow_queue_inputs",
            "Inputs queued and not yet taken by a worker",
        )
        .map_err(metric_error)?;
        let queue_requests = IntGauge::new(
            "bertflow_queue_requests",
            "Requests with inputs not yet taken by a worker",
        )
        .map_err(metric_error)?;
        let busy_workers = IntGauge::new("bertflow_busy_workers", "Workers running a batch")
            .map_err(metric_error)?;
        let corpus_size = IntGauge::new(
            "bertflow_corpus_size",
            "Sentences in the search index (0 without one)",
        )
        .map_err(metric_error)?;
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(requests.clone()),
            Box::new(latency.clone()),
            Box::new(inputs.clone()),
            Box::new(truncated.clone()),
            Box::new(batch_size.clone()),
            Box::new(batch_tokens.clone()),
            Box::new(search.clone()),
            Box::new(padding.clone()),
            Box::new(tokens.clone()),
            Box::new(cancelled.clone()),
            Box::new(queue_tokens.clone()),
            Box::new(tokenizing.clone()),
            Box::new(queue_inputs.clone()),
            Box::new(queue_requests.clone()),
            Box::new(busy_workers.clone()),
            Box::new(corpus_size.clone()),
        ];
        for collector in collectors {
            registry.register(collector).map_err(metric_error)?;
        }
        Ok(Self {
            registry,
            requests,
            latency,
            inputs,
            truncated,
            batch_size,
            batch_tokens,
            search,
            padding,
            tokens,
            cancelled,
            queue_inputs,
            queue_requests,
            queue_tokens,
            tokenizing,
            busy_workers,
            corpus_size,
        })
    }

    /// Record one batch handed to the backend.
    pub(crate) fn observe_batch(&self, size: usize, tokens: usize, padding: usize) {
        self.batch_size.observe(size as f64);
        self.batch_tokens.observe(tokens as f64);
        self.tokens.inc_by(tokens as u64);
        self.padding.inc_by(padding as u64);
    }

    /// The text exposition of every metric, with the queue gauges taken from `load`.
    pub(crate) fn render(&self, load: Load) -> Result<String, String> {
        self.queue_inputs.set(gauge(load.queued_inputs));
        self.queue_requests.set(gauge(load.queued_requests));
        self.queue_tokens.set(gauge(load.queued_tokens));
        self.tokenizing.set(gauge(load.tokenizing_inputs));
        self.busy_workers.set(gauge(load.busy_workers));
        let mut buffer = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buffer)
            .map_err(|e| e.to_string())?;
        String::from_utf8(buffer).map_err(|e| e.to_string())
    }
}

fn gauge(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The content type of the Prometheus text format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
