//! Errors on text-embeddings-inference's routes, in TEI's shape
//! `{"error": "...", "error_type": "..."}` with TEI's status codes:
//!
//! | bertflow's [`ApiError`] | status | `error_type` |
//! |---|---|---|
//! | `EmptyInput` | 400 | `Empty` |
//! | `InvalidJson` | 400 | `Validation` |
//! | `BodyTooLarge`, `TooManyInputs`, `InputTooLong`, `RequestOverBudget`, an input over `max_len` without `truncate` | 413 | `Validation` |
//! | `InvalidField` (a field missing, unknown value, `prompt_name`, `dimensions`, ...) | 422 | `Validation` |
//! | `Overloaded`, `OverloadedTokens` | 429 | `Overloaded` (+ `Retry-After: 1`) |
//! | `Backend`, `NotSupported` (e.g. an embedding model asked to rerank) | 424 | `Backend` |
//! | `Internal` and the rest | 500 | `Backend` |
//!
//! 401 (API key), 404 and 405 are answered before a TEI handler runs and keep
//! bertflow's shape.

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::backend::ModelKind;
use crate::error::ApiError;
use crate::state::{AppState, JsonObject};

/// The body as a JSON object, refused in TEI's shape (413, 400, 422).
pub(crate) struct TeiBody(pub serde_json::Value);

impl FromRequest<Arc<AppState>> for TeiBody {
    type Rejection = TeiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, TeiError> {
        let JsonObject(value) = JsonObject::from_request(req, state).await?;
        Ok(TeiBody(value))
    }
}

/// TEI's error classes (`ErrorType` in its OpenAPI document; its
/// `Unhealthy` is never answered: `/health` keeps bertflow's shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) enum TeiErrorType {
    Backend,
    Overloaded,
    Validation,
    Tokenizer,
    Empty,
}

/// An error answered on a TEI route.
#[derive(Debug)]
pub(crate) struct TeiError {
    pub status: StatusCode,
    pub kind: TeiErrorType,
    pub message: String,
}

/// TEI's `ErrorResponse`.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct TeiErrorBody {
    error: String,
    error_type: TeiErrorType,
}

impl TeiError {
    /// 422 `Validation`: a well-formed request this server cannot follow.
    pub(crate) fn unprocessable(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            kind: TeiErrorType::Validation,
            message: message.into(),
        }
    }

    /// 424 `Backend`: the model cannot do this (TEI's "model is not a
    /// re-ranker model") or failed.
    pub(crate) fn backend(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::FAILED_DEPENDENCY,
            kind: TeiErrorType::Backend,
            message: message.into(),
        }
    }
}

impl From<ApiError> for TeiError {
    fn from(error: ApiError) -> Self {
        use ApiError::*;
        let (status, kind) = match &error {
            EmptyInput { .. } => (StatusCode::BAD_REQUEST, TeiErrorType::Empty),
            InvalidJson(_) | BadRequest(_) => (StatusCode::BAD_REQUEST, TeiErrorType::Validation),
            BodyTooLarge { .. }
            | TooManyInputs { .. }
            | InputTooLong { .. }
            | RequestOverBudget { .. }
            | TooManyTokens { .. } => (StatusCode::PAYLOAD_TOO_LARGE, TeiErrorType::Validation),
            InvalidField { .. } => (StatusCode::UNPROCESSABLE_ENTITY, TeiErrorType::Validation),
            Overloaded { .. } | OverloadedTokens { .. } => {
                (StatusCode::TOO_MANY_REQUESTS, TeiErrorType::Overloaded)
            }
            Backend(_) | NotSupported(_) => (StatusCode::FAILED_DEPENDENCY, TeiErrorType::Backend),
            _ => {
                let (status, _, _) = error.status_type_code();
                (status, TeiErrorType::Backend)
            }
        };
        TeiError {
            status,
            kind,
            message: error.to_string(),
        }
    }
}

impl IntoResponse for TeiError {
    fn into_response(self) -> Response {
        let body = TeiErrorBody {
            error: self.message,
            error_type: self.kind,
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS
            || self.status == StatusCode::SERVICE_UNAVAILABLE
        {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// A TEI route's answer: JSON, or an error in TEI's shape.
pub(crate) type TeiResult<T> = Result<Json<T>, TeiError>;

/// 424 unless the model embeds (TEI's answer to a reranker asked to embed).
pub(crate) fn require_embedding(state: &AppState) -> Result<(), TeiError> {
    match state.info.kind {
        ModelKind::Embedding => Ok(()),
        ModelKind::Reranker => Err(TeiError::backend(
            "model is not an embedding model: this server serves a reranker; use /rerank or /predict",
        )),
    }
}
