//! Errors: [`ApiError`] is what a client sees (one variant per row of the
//! status-code table, one `IntoResponse`), [`ServerError`] what `serve`
//! returns.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answered to a client, in OpenAI's error shape:
/// `{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}`.
///
/// | variant | status | `type` | `code` |
/// |---|---|---|---|
/// | `InvalidJson` | 400 | `invalid_request_error` | `invalid_json` |
/// | `EmptyInput` | 400 | `invalid_request_error` | `empty_input` |
/// | `Unauthorized` | 401 | `invalid_request_error` | `invalid_api_key` (+ `WWW-Authenticate: Bearer`) |
/// | `NoCorpus` | 404 | `not_found_error` | `no_corpus` |
/// | `NotFound` | 404 | `not_found_error` | `not_found` |
/// | `MethodNotAllowed` | 405 | `invalid_request_error` | `method_not_allowed` |
/// | `BodyTooLarge` | 413 | `invalid_request_error` | `body_too_large` |
/// | `TooManyInputs` | 413 | `invalid_request_error` | `too_many_inputs` |
/// | `InvalidField` | 422 | `invalid_request_error` | `invalid_field` |
/// | `InputTooLong` | 422 | `invalid_request_error` | `input_too_long` |
/// | `TooManyTokens` | 413 | `invalid_request_error` | `too_many_tokens` (TEI's routes without `truncate`) |
/// | `RequestOverBudget` | 413 | `invalid_request_error` | `request_too_large` (more tokens than `max_queue_tokens`) |
/// | `Overloaded`, `OverloadedTokens` | 429 | `rate_limit_error` | `overloaded` (+ `Retry-After: 1`) |
/// | `Backend` | 500 | `server_error` | `backend_error` |
/// | `Internal` | 500 | `server_error` | `internal_error` |
/// | `NotSupported` | 501 | `server_error` | `not_supported` |
/// | `BadRequest` | 400 | `invalid_request_error` | `bad_request` (malformed HTTP) |
/// | `RequestTimeout` | 408 | `invalid_request_error` | `request_timeout` |
/// | `UriTooLong` | 414 | `invalid_request_error` | `uri_too_long` |
/// | `HeadersTooLarge` | 431 | `invalid_request_error` | `headers_too_large` |
/// | `Unavailable` | 503 | `server_error` | `index_unavailable` (+ `Retry-After: 1`) |
/// | `ShuttingDown` | 503 | `server_error` | `shutting_down` (+ `Retry-After: 1`) |
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The body is not valid JSON.
    #[error("malformed JSON body: {0}")]
    InvalidJson(String),
    /// An empty string or an empty array where inputs are expected.
    #[error("{message}")]
    EmptyInput {
        /// The offending field.
        param: String,
        /// Explanation.
        message: String,
    },
    /// A missing, malformed or wrong API key. The message never contains
    /// the key presented.
    #[error("{0}")]
    Unauthorized(String),
    /// `/search` was called but the server was started without a corpus.
    #[error(
        "no search corpus is configured on this server; start it with a corpus to use /search"
    )]
    NoCorpus,
    /// No such route.
    #[error("no route for {0}")]
    NotFound(String),
    /// The route exists but not with this method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The body exceeds `max_body_bytes`.
    #[error("request body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// `max_body_bytes`.
        limit: usize,
    },
    /// More inputs in one request than `max_inputs_per_request`.
    #[error("{count} inputs in one request exceed the limit of {limit}")]
    TooManyInputs {
        /// Inputs in the request.
        count: usize,
        /// `max_inputs_per_request`.
        limit: usize,
    },
    /// A field is missing, unknown, of the wrong type or out of range.
    #[error("{message}")]
    InvalidField {
        /// The offending field, when known.
        param: Option<String>,
        /// Explanation.
        message: String,
    },
    /// One input is longer than `max_chars_per_input` characters.
    #[error("{param} has {chars} characters, more than the limit of {limit}")]
    InputTooLong {
        /// The offending field.
        param: String,
        /// Its length in characters.
        chars: usize,
        /// `max_chars_per_input`.
        limit: usize,
    },
    /// An input is longer than the model's `max_len` tokens and the request
    /// did not allow cutting it (TEI's routes without `truncate`).
    #[error("{param} has more than the model's maximum of {max_len} tokens; send \"truncate\": true (or start the server with --auto-truncate)")]
    TooManyTokens {
        /// The offending input.
        param: String,
        /// The model's `max_len`.
        max_len: usize,
    },
    /// The request alone has more tokens than the whole queue may hold: it
    /// could never be admitted (no retry helps).
    #[error("the request has {requested} tokens, more than the server's queue takes at once ({limit}, --max-queue-tokens): send fewer or shorter inputs per request")]
    RequestOverBudget {
        /// Tokens of the request (after truncation; a lower bound before tokenizing).
        requested: usize,
        /// `max_queue_tokens`.
        limit: usize,
    },
    /// The queue cannot take the request's inputs now.
    #[error("server overloaded: the queue holds {queued} of at most {limit} inputs and cannot take {requested} more; retry later")]
    Overloaded {
        /// Inputs waiting when the request arrived.
        queued: usize,
        /// `max_queue_inputs`.
        limit: usize,
        /// Inputs of the rejected request.
        requested: usize,
    },
    /// The queue cannot take the request's tokens now.
    #[error("server overloaded: the queue holds {queued} of at most {limit} tokens and cannot take {requested} more; retry later")]
    OverloadedTokens {
        /// Tokens waiting when the request arrived.
        queued: usize,
        /// `max_queue_tokens`.
        limit: usize,
        /// Tokens of the rejected request (after truncation).
        requested: usize,
    },
    /// The backend failed.
    #[error("embedding backend failed: {0}")]
    Backend(String),
    /// Anything else that is the server's fault.
    #[error("internal error: {0}")]
    Internal(String),
    /// The backend cannot do this (e.g. show its tokens).
    #[error("not supported by this server: {0}")]
    NotSupported(String),
    /// The HTTP layer could not parse the request (bad request line or header).
    #[error("malformed HTTP request: {0}")]
    BadRequest(String),
    /// The request body did not arrive within `body_timeout_ms`.
    #[error("the request body did not arrive within {ms} ms")]
    RequestTimeout {
        /// `body_timeout_ms`.
        ms: u64,
    },
    /// The request target is longer than the HTTP layer accepts.
    #[error("the request URI is too long")]
    UriTooLong,
    /// The request head (headers) is larger than the HTTP layer accepts.
    #[error("the request headers are too large")]
    HeadersTooLarge,
    /// The server is shutting down: it finishes what it admitted and takes
    /// nothing new.
    #[error("the server is shutting down and takes no new work; retry on another instance")]
    ShuttingDown,
    /// The search index cannot be read now (e.g. its file changed under the
    /// server); retried on the next request.
    #[error("the search index is unavailable: {0}")]
    Unavailable(String),
}

impl ApiError {
    /// Shorthand for [`ApiError::InvalidField`].
    pub(crate) fn invalid(param: Option<&str>, message: impl Into<String>) -> Self {
        ApiError::InvalidField {
            param: param.map(str::to_owned),
            message: message.into(),
        }
    }

    /// Shorthand for [`ApiError::EmptyInput`].
    pub(crate) fn empty(param: &str, message: impl Into<String>) -> Self {
        ApiError::EmptyInput {
            param: param.to_owned(),
            message: message.into(),
        }
    }

    /// The single status/type/code table.
    pub fn status_type_code(&self) -> (StatusCode, &'static str, &'static str) {
        use ApiError::*;
        const INVALID: &str = "invalid_request_error";
        match self {
            InvalidJson(_) => (StatusCode::BAD_REQUEST, INVALID, "invalid_json"),
            EmptyInput { .. } => (StatusCode::BAD_REQUEST, INVALID, "empty_input"),
            Unauthorized(_) => (StatusCode::UNAUTHORIZED, INVALID, "invalid_api_key"),
            NoCorpus => (StatusCode::NOT_FOUND, "not_found_error", "no_corpus"),
            NotFound(_) => (StatusCode::NOT_FOUND, "not_found_error", "not_found"),
            MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                INVALID,
                "method_not_allowed",
            ),
            BodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, INVALID, "body_too_large"),
            TooManyInputs { .. } => (StatusCode::PAYLOAD_TOO_LARGE, INVALID, "too_many_inputs"),
            InvalidField { .. } => (StatusCode::UNPROCESSABLE_ENTITY, INVALID, "invalid_field"),
            InputTooLong { .. } => (StatusCode::UNPROCESSABLE_ENTITY, INVALID, "input_too_long"),
            TooManyTokens { .. } => (StatusCode::PAYLOAD_TOO_LARGE, INVALID, "too_many_tokens"),
            RequestOverBudget { .. } => {
                (StatusCode::PAYLOAD_TOO_LARGE, INVALID, "request_too_large")
            }
            Overloaded { .. } | OverloadedTokens { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "overloaded",
            ),
            Backend(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "backend_error",
            ),
            Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "internal_error",
            ),
            NotSupported(_) => (StatusCode::NOT_IMPLEMENTED, "server_error", "not_supported"),
            BadRequest(_) => (StatusCode::BAD_REQUEST, INVALID, "bad_request"),
            RequestTimeout { .. } => (StatusCode::REQUEST_TIMEOUT, INVALID, "request_timeout"),
            UriTooLong => (StatusCode::URI_TOO_LONG, INVALID, "uri_too_long"),
            HeadersTooLarge => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                INVALID,
                "headers_too_large",
            ),
            Unavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "index_unavailable",
            ),
            ShuttingDown => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "shutting_down",
            ),
        }
    }

    fn param(&self) -> Option<&str> {
        match self {
            ApiError::EmptyInput { param, .. }
            | ApiError::InputTooLong { param, .. }
            | ApiError::TooManyTokens { param, .. } => Some(param),
            ApiError::InvalidField { param, .. } => param.as_deref(),
            _ => None,
        }
    }
}

/// Every error answer: `{"error": {...}}`.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

/// OpenAI's error object.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorDetail {
    /// Human-readable explanation.
    message: String,
    /// Error class, e.g. `invalid_request_error`.
    #[serde(rename = "type")]
    kind: &'static str,
    /// The offending request field, when known.
    param: Option<String>,
    /// Machine-readable code, e.g. `invalid_api_key`.
    code: &'static str,
}

impl ApiError {
    fn body(&self) -> ErrorBody {
        let (_, kind, code) = self.status_type_code();
        ErrorBody {
            error: ErrorDetail {
                message: self.to_string(),
                kind,
                param: self.param().map(str::to_owned),
                code,
            },
        }
    }

    /// The whole HTTP/1.1 answer as bytes, with `connection: close`: what the
    /// connection layer writes in place of the HTTP parser's own empty
    /// answers (400, 414, 431).
    pub(crate) fn raw_http_close(&self) -> Vec<u8> {
        let status = self.status_type_code().0;
        let body = serde_json::to_string(&self.body()).unwrap_or_else(|_| "{}".to_owned());
        format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            body.len()
        )
        .into_bytes()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status_type_code().0;
        let mut response = (status, axum::Json(self.body())).into_response();
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Why [`crate::serve`] could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A limit in `ServerConfig` or a value in `BackendInfo` is unusable.
    #[error("invalid server configuration: {0}")]
    Config(String),
    /// Binding or serving failed.
    #[error("server I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// Embedding the search corpus at start-up failed.
    #[error("indexing the search corpus failed: {0}")]
    Corpus(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_maps_classes_to_statuses() {
        let cases = [
            (ApiError::InvalidJson("x".into()), 400),
            (ApiError::empty("input", "x"), 400),
            (ApiError::Unauthorized("x".into()), 401),
            (ApiError::NoCorpus, 404),
            (ApiError::BodyTooLarge { limit: 1 }, 413),
            (
                ApiError::RequestOverBudget {
                    requested: 2,
                    limit: 1,
                },
                413,
            ),
            (ApiError::TooManyInputs { count: 2, limit: 1 }, 413),
            (ApiError::invalid(Some("dimensions"), "x"), 422),
            (
                ApiError::Overloaded {
                    queued: 1,
                    limit: 1,
                    requested: 1,
                },
                429,
            ),
            (ApiError::Backend("x".into()), 500),
            (ApiError::Internal("x".into()), 500),
            (ApiError::NotSupported("x".into()), 501),
        ];
        for (error, status) in cases {
            assert_eq!(error.status_type_code().0.as_u16(), status, "{error:?}");
            assert_eq!(error.into_response().status().as_u16(), status);
        }
    }
}
