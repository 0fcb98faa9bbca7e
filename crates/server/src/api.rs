//! HTTP layer: request/response shapes, the JSON extractor, handlers, router.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{Method, Uri};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::{Ctx, RequestIds};
use crate::backend::{BackendInfo, EmbedBackend, Embedded};
use crate::batcher::{Batcher, Load};
use crate::config::{Limits, ServerConfig};
use crate::error::ApiError;
use crate::index::{cosine, SearchIndex};
use crate::metrics::Metrics;

pub(crate) struct AppState {
    pub backend: Arc<dyn EmbedBackend>,
    pub info: BackendInfo,
    pub config: ServerConfig,
    pub batcher: Batcher,
    pub index: Option<Arc<dyn SearchIndex>>,
    pub metrics: Arc<Metrics>,
    pub request_ids: RequestIds,
}

pub(crate) type AppResult<T> = Result<Json<T>, ApiError>;

pub(crate) fn router(state: Arc<AppState>) -> Router {
    let body_limit = state.config.max_body_bytes;
    Router::new()
        .route("/v1/embeddings", post(embeddings))
        .route("/similarity", post(similarity))
        .route("/search", post(crate::search::search))
        .route("/", get(crate::tools::playground))
        .route("/health", get(health))
        .route("/info", get(info))
        .route("/tokenize", post(crate::tools::tokenize))
        .route("/metrics", get(crate::tools::metrics))
        .route("/openapi.json", get(crate::openapi::openapi_json))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            crate::access::middleware,
        ))
        .with_state(state)
}

// ---------------------------------------------------------------------------
// JSON extraction with errors in the API's shape.

/// Like `axum::Json`, but every rejection is an [`ApiError`]: 413 for a body
/// over the limit, 400 for malformed JSON, 422 for JSON of the wrong shape
/// (missing, unknown or mistyped fields). The Content-Type is not checked.
pub(crate) struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<AppState>> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::BodyTooLarge {
                    limit: state.config.max_body_bytes,
                }
            } else {
                ApiError::InvalidJson(rejection.body_text())
            }
        })?;
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
        if !value.is_object() {
            return Err(ApiError::invalid(
                None,
                "the request body must be a JSON object",
            ));
        }
        serde_json::from_value(value)
            .map(ApiJson)
            .map_err(|e| ApiError::invalid(None, e.to_string()))
    }
}

// ---------------------------------------------------------------------------
// Input validation shared by the endpoints.

/// Check one text: non-empty (400) and not too long (422).
pub(crate) fn check_text(text: &str, param: &str, max_chars: usize) -> Result<(), ApiError> {
    if text.is_empty() {
        return Err(ApiError::empty(
            param,
            format!("{param} is an empty string"),
        ));
    }
    let chars = text.chars().count();
    if chars > max_chars {
        return Err(ApiError::InputTooLong {
            param: param.to_owned(),
            chars,
            limit: max_chars,
        });
    }
    Ok(())
}

pub(crate) fn check_count(count: usize, config: &ServerConfig) -> Result<(), ApiError> {
    if count > config.max_inputs_per_request {
        return Err(ApiError::TooManyInputs {
            count,
            limit: config.max_inputs_per_request,
        });
    }
    Ok(())
}

/// `input` of `/v1/embeddings`: a string or an array of strings.
pub(crate) fn parse_input(input: Value, config: &ServerConfig) -> Result<Vec<String>, ApiError> {
    let max_chars = config.max_chars_per_input;
    match input {
        Value::String(text) => {
            check_text(&text, "input", max_chars)?;
            Ok(vec![text])
        }
        Value::Array(items) => {
            if items.is_empty() {
                return Err(ApiError::empty("input", "input is an empty array"));
            }
            check_count(items.len(), config)?;
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(text) => {
                        check_text(&text, &format!("input[{i}]"), max_chars)?;
                        Ok(text)
                    }
                    other => Err(ApiError::invalid(
                        Some(&format!("input[{i}]")),
                        format!(
                            "input[{i}] must be a string, got {} (token-id input is not supported)",
                            kind_of(&other)
                        ),
                    )),
                })
                .collect()
        }
        other => Err(ApiError::invalid(
            Some("input"),
            format!(
                "input must be a string or an array of strings, got {}",
                kind_of(&other)
            ),
        )),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Tokenise (on the blocking pool), queue, and wait for the embeddings.
pub(crate) async fn embed_texts(
    state: &Arc<AppState>,
    texts: Vec<String>,
) -> Result<Vec<Embedded>, ApiError> {
    // Refuse cheaply before tokenising when the queue is already full; the
    // authoritative check is in `submit`.
    state.batcher.check_room(texts.len())?;
    let backend = Arc::clone(&state.backend);
    let max_len = state.info.max_len;
    let (texts, costs) = tokio::task::spawn_blocking(move || {
        let costs: Vec<usize> = texts
            .iter()
            .map(|t| backend.tokenize_len(t).min(max_len))
            .collect();
        (texts, costs)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("tokenisation failed: {e}")))?;
    let receiver = state.batcher.submit(texts, costs)?;
    let embedded = receiver
        .await
        .map_err(|_| ApiError::Internal("the embedding worker dropped the request".into()))??;
    let truncated = embedded.iter().filter(|e| e.truncated).count();
    state.metrics.truncated.inc_by(truncated as u64);
    Ok(embedded)
}

// ---------------------------------------------------------------------------
// POST /v1/embeddings

/// A string or an array of strings (documentation only: `input` is parsed by
/// hand for precise errors).
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(crate) enum Input {
    /// One text.
    One(String),
    /// Several texts.
    Many(Vec<String>),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum EncodingFormat {
    #[default]
    Float,
    Base64,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EmbeddingsRequest {
    /// A string or an array of strings.
    #[schema(value_type = Input)]
    input: Value,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    encoding_format: Option<EncodingFormat>,
    #[serde(default)]
    dimensions: Option<usize>,
    /// Accepted for OpenAI compatibility and ignored.
    #[serde(default)]
    #[allow(dead_code)]
    user: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct EmbeddingsResponse {
    object: &'static str,
    data: Vec<EmbeddingData>,
    model: String,
    usage: Usage,
    /// bertflow extension: indices of the inputs cut at the model's max_len.
    truncated: Vec<usize>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct EmbeddingData {
    object: &'static str,
    index: usize,
    embedding: EmbeddingValue,
}

/// The vector: floats, or base64 of the little-endian f32 bytes.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum EmbeddingValue {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

/// OpenAI-compatible embeddings of one or more texts.
#[utoipa::path(
    post,
    path = "/v1/embeddings",
    request_body = EmbeddingsRequest,
    responses(
        (status = 200, description = "One vector per input, in input order", body = EmbeddingsResponse),
        (status = "4XX", description = "Invalid request, missing API key or overloaded", body = crate::error::ErrorBody),
        (status = "5XX", description = "Backend failure", body = crate::error::ErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn embeddings(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    ApiJson(request): ApiJson<EmbeddingsRequest>,
) -> AppResult<EmbeddingsResponse> {
    let dimension = state.info.dimension;
    let keep = match request.dimensions {
        None => dimension,
        Some(d) if (1..=dimension).contains(&d) => d,
        Some(d) => {
            return Err(ApiError::invalid(
                Some("dimensions"),
                format!("dimensions must be between 1 and {dimension}, got {d}"),
            ))
        }
    };
    let texts = parse_input(request.input, &state.config)?;
    ctx.record(&texts, state.config.log_inputs);
    let format = request.encoding_format.unwrap_or_default();
    let embedded = embed_texts(&state, texts).await?;

    let prompt_tokens = embedded.iter().map(|e| e.tokens).sum();
    let truncated = embedded
        .iter()
        .enumerate()
        .filter(|(_, e)| e.truncated)
        .map(|(i, _)| i)
        .collect();
    let data = embedded
        .into_iter()
        .enumerate()
        .map(|(index, e)| {
            let mut vector = e.vector;
            vector.truncate(keep);
            let embedding = match format {
                EncodingFormat::Float => EmbeddingValue::Float(vector),
                EncodingFormat::Base64 => {
                    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                    EmbeddingValue::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
                }
            };
            EmbeddingData {
                object: "embedding",
                index,
                embedding,
            }
        })
        .collect();
    Ok(Json(EmbeddingsResponse {
        object: "list",
        data,
        model: request.model.unwrap_or_else(|| state.info.model_id.clone()),
        usage: Usage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        },
        truncated,
    }))
}

// ---------------------------------------------------------------------------
// POST /similarity

/// Either `pairs`, or `source` with `targets`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SimilarityRequest {
    /// Pairs of texts `[a, b]`.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Vec<String>>>)]
    pairs: Option<Vec<(String, String)>>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    targets: Option<Vec<String>>,
}

/// Texts to embed (each with the field it came from) and, per score, the
/// indices of its two texts.
type ScoringPlan = (Vec<(String, String)>, Vec<(usize, usize)>);

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct SimilarityResponse {
    scores: Vec<f64>,
}

/// Cosine similarity of text pairs in the calibrated space.
#[utoipa::path(
    post,
    path = "/similarity",
    request_body = SimilarityRequest,
    responses(
        (status = 200, description = "One cosine per pair", body = SimilarityResponse),
        (status = "4XX", description = "Invalid request, missing API key or overloaded", body = crate::error::ErrorBody),
        (status = "5XX", description = "Backend failure", body = crate::error::ErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn similarity(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    ApiJson(request): ApiJson<SimilarityRequest>,
) -> AppResult<SimilarityResponse> {
    // Flatten to a list of texts plus, for each score, the two text indices.
    let (texts, pairs): ScoringPlan = match (request.pairs, request.source, request.targets) {
        (Some(pairs), None, None) => {
            if pairs.is_empty() {
                return Err(ApiError::empty("pairs", "pairs is an empty array"));
            }
            check_count(pairs.len().saturating_mul(2), &state.config)?;
            let n = pairs.len();
            let texts = pairs
                .into_iter()
                .enumerate()
                .flat_map(|(k, (a, b))| {
                    [(a, format!("pairs[{k}][0]")), (b, format!("pairs[{k}][1]"))]
                })
                .collect();
            (texts, (0..n).map(|i| (2 * i, 2 * i + 1)).collect())
        }
        (None, Some(source), Some(targets)) => {
            if targets.is_empty() {
                return Err(ApiError::empty("targets", "targets is an empty array"));
            }
            check_count(targets.len().saturating_add(1), &state.config)?;
            let n = targets.len();
            let texts = std::iter::once((source, "source".to_owned()))
                .chain(
                    targets
                        .into_iter()
                        .enumerate()
                        .map(|(k, t)| (t, format!("targets[{k}]"))),
                )
                .collect();
            (texts, (1..=n).map(|i| (0, i)).collect())
        }
        _ => {
            return Err(ApiError::invalid(
                None,
                "give either \"pairs\" or both \"source\" and \"targets\"",
            ))
        }
    };
    let all: Vec<&str> = texts.iter().map(|(t, _)| t.as_str()).collect();
    ctx.record(&all, state.config.log_inputs);
    drop(all);
    // Validate, and embed each distinct text once.
    let mut unique: Vec<String> = Vec::new();
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut slot = Vec::with_capacity(texts.len());
    for (text, param) in texts {
        check_text(&text, &param, state.config.max_chars_per_input)?;
        let next = unique.len();
        let at = *seen.entry(text.clone()).or_insert(next);
        if at == next {
            unique.push(text);
        }
        slot.push(at);
    }
    let embedded = embed_texts(&state, unique).await?;
    let scores = pairs
        .into_iter()
        .map(|(a, b)| cosine(&embedded[slot[a]].vector, &embedded[slot[b]].vector))
        .collect();
    Ok(Json(SimilarityResponse { scores }))
}

// ---------------------------------------------------------------------------
// GET /health, GET /info, fallbacks

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct HealthResponse {
    /// Always `ok`.
    status: &'static str,
}

/// Liveness; the one route that needs no API key.
#[utoipa::path(
    get,
    path = "/health",
    responses((status = 200, description = "The server accepts requests", body = HealthResponse))
)]
pub(crate) async fn health() -> Json<HealthResponse> {
    Json(HealthResponse { status: "ok" })
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct InfoResponse {
    model: String,
    pooling: String,
    calibrator: Option<String>,
    dimension: usize,
    max_len: usize,
    /// Always false: vectors are returned as the calibrator produces them.
    normalized: bool,
    limits: Limits,
    corpus_size: Option<usize>,
    /// How /search searches (`exact`, or the approximate method), null without a corpus.
    search_method: Option<String>,
    load: Load,
}

/// Model, limits, corpus size and current load.
#[utoipa::path(
    get,
    path = "/info",
    responses(
        (status = 200, description = "Server description", body = InfoResponse),
        (status = 401, description = "Missing or wrong API key", body = crate::error::ErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn info(State(state): State<Arc<AppState>>) -> Json<InfoResponse> {
    let info = &state.info;
    Json(InfoResponse {
        model: info.model_id.clone(),
        pooling: info.pooling.clone(),
        calibrator: info.calibrator.clone(),
        dimension: info.dimension,
        max_len: info.max_len,
        normalized: false,
        limits: state.config.limits(),
        corpus_size: state.index.as_ref().map(|i| i.len()),
        search_method: state.index.as_ref().map(|i| i.method()),
        load: state.batcher.load(),
    })
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("{method} {}", uri.path()))
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
