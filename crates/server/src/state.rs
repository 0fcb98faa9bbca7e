//! What every handler shares: the server's state, the JSON extractor with
//! errors in the API's shape, input validation and the way texts are
//! embedded (tokenise, queue, wait). Handlers (`api`, `search`, `tools`) and
//! the middleware (`access`) use it; it uses none of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::backend::{BackendInfo, EmbedBackend, Embedded};
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::index::SearchIndex;
use crate::infer::{Infer, Input as Piece};
use crate::metrics::Metrics;
use crate::queue::{Output, Task};
use crate::truncation::Truncation;

pub(crate) struct AppState {
    pub backend: Arc<dyn EmbedBackend>,
    pub info: BackendInfo,
    pub config: ServerConfig,
    pub infer: Infer,
    pub index: Option<Arc<dyn SearchIndex>>,
    pub metrics: Arc<Metrics>,
    pub request_ids: RequestIds,
    /// Unix time the server started (`GET /v1/models`' `created`).
    pub started_unix: u64,
}

impl AppState {
    /// The name the model is served under: `served_model_name`, or the model id.
    pub(crate) fn served_model_name(&self) -> &str {
        self.config
            .served_model_name
            .as_deref()
            .unwrap_or(&self.info.model_id)
    }
}

pub(crate) type AppResult<T> = Result<Json<T>, ApiError>;

/// Monotonic request counter, for ids of requests that bring none.
#[derive(Default)]
pub(crate) struct RequestIds(AtomicU64);

impl RequestIds {
    pub(crate) fn next(&self) -> String {
        format!("req-{:08}", self.0.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

// JSON extraction with errors in the API's shape.

/// Like `axum::Json`, but every rejection is an [`ApiError`]: 413 for a body
/// over the limit, 400 for malformed JSON, 422 for JSON of the wrong shape
/// (missing, unknown or mistyped fields). The Content-Type is not checked.
pub(crate) struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<AppState>> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let JsonObject(value) = JsonObject::from_request(req, state).await?;
        from_object(value).map(ApiJson)
    }
}

/// The body as a JSON object (413 over the limit, 400 malformed, 422 not an
/// object): for routes that look at the body's shape before choosing a
/// request type (TEI's shapes beside bertflow's own).
pub(crate) struct JsonObject(pub Value);

impl FromRequest<Arc<AppState>> for JsonObject {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::BodyTooLarge {
                    limit: state.config.limits.max_body_bytes,
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
        Ok(JsonObject(value))
    }
}

/// A JSON object as a request type; 422 for missing, unknown or mistyped fields.
pub(crate) fn from_object<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError::invalid(None, e.to_string()))
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
    if count > config.limits.max_inputs_per_request {
        return Err(ApiError::TooManyInputs {
            count,
            limit: config.limits.max_inputs_per_request,
        });
    }
    Ok(())
}

/// `input` of `/v1/embeddings`: a string or an array of strings.
pub(crate) fn parse_input(input: Value, config: &ServerConfig) -> Result<Vec<String>, ApiError> {
    let max_chars = config.limits.max_chars_per_input;
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

pub(crate) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Embed texts through the queue (cut at `max_len`, as bertflow's routes do).
pub(crate) async fn embed_texts(
    state: &Arc<AppState>,
    texts: Vec<String>,
) -> Result<Vec<Embedded>, ApiError> {
    let inputs = texts.into_iter().map(Piece::Text).collect();
    embed_inputs(state, "input", inputs, Truncation::ALWAYS).await
}

/// Embed inputs (texts or token ids) through the queue.
pub(crate) async fn embed_inputs(
    state: &Arc<AppState>,
    field: &str,
    inputs: Vec<Piece>,
    truncation: Truncation,
) -> Result<Vec<Embedded>, ApiError> {
    let outputs = state
        .infer
        .run(Task::Embed, field, inputs, truncation)
        .await?;
    outputs
        .into_iter()
        .map(|output| match output {
            Output::Vector(e) => Ok(e),
            _ => Err(ApiError::Internal("the queue answered another task".into())),
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Shapes shared by several endpoints' documentation.

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
