//! The operator and developer routes: `POST /tokenize`, `GET /metrics`, and the
//! playground page `GET /`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::Ctx;
use crate::error::ApiError;
use crate::state::{from_object, parse_input, AppState, JsonObject};

// ---------------------------------------------------------------------------
// POST /tokenize

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenizeRequest {
    /// A string or an array of strings.
    #[schema(value_type = crate::state::Input)]
    input: Value,
}

/// One input as the model sees it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct TokenizedInput {
    /// Position of the input in the request.
    index: usize,
    /// Token ids, special tokens included, after truncation at `max_len`.
    ids: Vec<u32>,
    /// The token string of each id.
    tokens: Vec<String>,
    /// Whether the input was cut at the model's maximum length.
    truncated: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct TokenizeResponse {
    /// One entry per input, in input order.
    data: Vec<TokenizedInput>,
    /// The model whose tokenizer was used.
    model: String,
    /// The model's maximum sequence length, special tokens included.
    max_len: usize,
}

/// Token ids and strings of each input, as the model's tokenizer sees them.
#[utoipa::path(
    post,
    path = "/tokenize",
    request_body = TokenizeRequest,
    responses(
        (status = 200, description = "The tokens of each input", body = TokenizeResponse),
        (status = "4XX", description = "Invalid request", body = crate::error::ErrorBody),
        (status = 501, description = "The backend cannot show its tokens", body = crate::error::ErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn tokenize(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    JsonObject(body): JsonObject,
) -> Response {
    // TEI's shape names its field `inputs`; bertflow's `input`.
    if body.get("inputs").is_some() {
        return crate::tei::tokenize(&state, &ctx, body)
            .await
            .into_response();
    }
    match from_object(body) {
        Ok(request) => tokenize_input(state, ctx, request).await.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn tokenize_input(
    state: Arc<AppState>,
    ctx: Ctx,
    request: TokenizeRequest,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let texts = parse_input(request.input, &state.config)?;
    ctx.record(&texts, state.config.log_inputs);
    let texts = crate::prompt::prompted(&state, texts, None)?;
    let backend = Arc::clone(&state.backend);
    let data = state
        .infer
        .blocking(move || -> Result<Vec<TokenizedInput>, ApiError> {
            texts
                .iter()
                .enumerate()
                .map(|(index, text)| {
                    let tokenized = backend
                        .tokenize(text)
                        .ok_or_else(|| {
                            ApiError::NotSupported("this backend cannot show its tokens".into())
                        })?
                        .map_err(|e| ApiError::Backend(e.message))?;
                    if tokenized.ids.len() != tokenized.tokens.len() {
                        return Err(ApiError::Backend(format!(
                            "the backend returned {} ids but {} token strings",
                            tokenized.ids.len(),
                            tokenized.tokens.len()
                        )));
                    }
                    Ok(TokenizedInput {
                        index,
                        ids: tokenized.ids,
                        tokens: tokenized.tokens,
                        truncated: tokenized.truncated,
                    })
                })
                .collect()
        })
        .await??;
    let truncated = data.iter().filter(|d| d.truncated).count();
    state.metrics.truncated.inc_by(truncated as u64);
    Ok(Json(TokenizeResponse {
        data,
        model: state.info.model_id.clone(),
        max_len: state.info.max_len,
    }))
}

// ---------------------------------------------------------------------------
// GET /metrics

/// Prometheus metrics in the text exposition format (version 0.0.4).
#[utoipa::path(
    get,
    path = "/metrics",
    responses(
        (status = 200, description = "Every metric, Prometheus text format", body = String, content_type = "text/plain; version=0.0.4"),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn metrics(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let text = state
        .metrics
        .render(state.infer.load())
        .map_err(|e| ApiError::Internal(format!("cannot render metrics: {e}")))?;
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    Ok(response)
}

// ---------------------------------------------------------------------------
// GET /: the playground

/// The playground page: one self-contained HTML file (no external assets),
/// compiled into the binary.
const PLAYGROUND: &str = include_str!("playground.html");

/// A page to type sentences and see their calibrated similarities and search
/// results; served without an API key (it holds no data; its requests carry
/// the key typed into it).
#[utoipa::path(
    get,
    path = "/",
    responses((status = 200, description = "The playground page", content_type = "text/html"))
)]
pub(crate) async fn playground() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        PLAYGROUND,
    )
        .into_response()
}
