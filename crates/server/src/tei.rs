//! text-embeddings-inference's embedding routes, in TEI's request and
//! response shapes (its OpenAPI document, version 1.9): `POST /embed`,
//! `/embed_all`, `/similarity` and `/tokenize` given `inputs`, `/decode`, and
//! `POST /` routed by the body's shape as `InferenceClient(model=URL)` sends
//! it. Errors in TEI's shape ([`TeiError`]). `/rerank` and `/predict` are in
//! `rerank`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::Ctx;
use crate::error::ApiError;
use crate::index::cosine;
use crate::inputs::{finish_vector, keep_dimensions, parse_pieces, piece_text, Piece};
use crate::prompt::{prompted, prompted_pieces};
use crate::queue::{Output, Task};
use crate::state::{check_count, check_text, embed_inputs, from_object, kind_of, AppState};
use crate::tei_error::{require_embedding, TeiBody, TeiError, TeiResult};
use crate::truncation::{Truncation, TruncationDirection};

// ---------------------------------------------------------------------------
// POST /embed

/// TEI's `EmbedRequest`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct EmbedRequest {
    /// A string, a list of strings, or token ids (`[101, ...]` or `[[101, ...], ...]`).
    #[schema(value_type = Object)]
    inputs: Value,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: TruncationDirection,
    #[serde(default)]
    prompt_name: Option<String>,
    #[serde(default = "yes")]
    normalize: bool,
    #[serde(default)]
    dimensions: Option<usize>,
}

fn yes() -> bool {
    true
}

/// TEI's embeddings: one vector per input, unit length unless `normalize` is false.
#[utoipa::path(
    post,
    path = "/embed",
    request_body = EmbedRequest,
    responses(
        (status = 200, description = "One vector per input ([[f32]])", body = Vec<Vec<f32>>),
        (status = "4XX", description = "TEI's errors: 400 Empty, 413/422 Validation, 424 Backend, 429 Overloaded", body = crate::tei_error::TeiErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn embed(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    TeiBody(body): TeiBody,
) -> Response {
    embed_value(&state, &ctx, body).await.into_response()
}

async fn embed_value(state: &Arc<AppState>, ctx: &Ctx, body: Value) -> TeiResult<Vec<Vec<f32>>> {
    let request: EmbedRequest = from_object(body)?;
    require_embedding(state)?;
    let keep = keep_dimensions(request.dimensions, state.info.dimension)?;
    let truncation = Truncation::of(
        state.config.auto_truncate,
        request.truncate,
        request.truncation_direction,
    );
    let pieces = parse_pieces(request.inputs, "inputs", state)?;
    let texts: Vec<&str> = pieces.iter().map(piece_text).collect();
    ctx.record(&texts, state.config.log_inputs);
    let pieces = prompted_pieces(state, pieces, request.prompt_name.as_deref())?;
    let embedded = embed_inputs(state, "inputs", pieces, truncation).await?;
    Ok(Json(
        embedded
            .into_iter()
            .map(|e| finish_vector(e.vector, keep, request.normalize))
            .collect(),
    ))
}

// ---------------------------------------------------------------------------
// POST /embed_all

/// TEI's `EmbedAllRequest`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct EmbedAllRequest {
    /// A string or a list of strings.
    #[schema(value_type = Object)]
    inputs: Value,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: TruncationDirection,
    #[serde(default)]
    prompt_name: Option<String>,
}

/// The last layer's vector of every token of each input ([[[f32]]]).
#[utoipa::path(
    post,
    path = "/embed_all",
    request_body = EmbedAllRequest,
    responses(
        (status = 200, description = "One tokens x hidden matrix per input", body = Vec<Vec<Vec<f32>>>),
        (status = "4XX", description = "TEI's errors", body = crate::tei_error::TeiErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn embed_all(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    TeiBody(body): TeiBody,
) -> TeiResult<Vec<Vec<Vec<f32>>>> {
    let request: EmbedAllRequest = from_object(body)?;
    let (pieces, truncation) = crate::embed_outputs::inputs(
        &state,
        &ctx,
        request.inputs,
        request.prompt_name.as_deref(),
        request.truncate,
        request.truncation_direction,
    )?;
    let matrices =
        crate::embed_outputs::run_task(&state, Task::EmbedAll, pieces, truncation, |o| match o {
            Output::States(m) => Some(m),
            _ => None,
        })
        .await?;
    Ok(Json(matrices))
}

/// The texts of `pieces`; token ids are refused (422) where only text is taken.
fn texts_only(pieces: Vec<Piece>) -> Result<Vec<String>, TeiError> {
    pieces
        .into_iter()
        .map(|p| match p {
            Piece::Text(t) => Ok(t),
            Piece::Ids(_) | Piece::Pair(..) | Piece::Query(_) => Err(TeiError::unprocessable(
                "this route takes text only, not token ids",
            )),
        })
        .collect()
}

// ---------------------------------------------------------------------------
// POST /similarity with `inputs`

#[derive(Debug, Deserialize)]
struct SimilarityInputs {
    source_sentence: String,
    sentences: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
struct SimilarityParameters {
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: TruncationDirection,
    #[serde(default)]
    prompt_name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct TeiSimilarityRequest {
    inputs: SimilarityInputs,
    #[serde(default)]
    parameters: Option<SimilarityParameters>,
}

/// TEI's sentence similarity: the cosine of `source_sentence` with each of
/// `sentences`, in the calibrated space.
pub(crate) async fn similarity(
    state: &Arc<AppState>,
    ctx: &Ctx,
    body: Value,
) -> TeiResult<Vec<f32>> {
    let request: TeiSimilarityRequest = from_object(body)?;
    require_embedding(state)?;
    let parameters = request.parameters.unwrap_or_default();
    let truncation = Truncation::of(
        state.config.auto_truncate,
        parameters.truncate,
        parameters.truncation_direction,
    );
    let SimilarityInputs {
        source_sentence,
        sentences,
    } = request.inputs;
    if sentences.is_empty() {
        return Err(
            ApiError::empty("inputs.sentences", "inputs.sentences is an empty array").into(),
        );
    }
    check_count(sentences.len().saturating_add(1), &state.config)?;
    let max_chars = state.config.limits.max_chars_per_input;
    check_text(&source_sentence, "inputs.source_sentence", max_chars)?;
    for (k, s) in sentences.iter().enumerate() {
        check_text(s, &format!("inputs.sentences[{k}]"), max_chars)?;
    }
    let texts: Vec<String> = std::iter::once(source_sentence).chain(sentences).collect();
    ctx.record(&texts, state.config.log_inputs);
    let texts = prompted(state, texts, parameters.prompt_name.as_deref())?;
    let pieces = texts.into_iter().map(Piece::Text).collect();
    let embedded = embed_inputs(state, "inputs", pieces, truncation).await?;
    let (source, rest) = embedded
        .split_first()
        .ok_or_else(|| TeiError::backend("no vectors"))?;
    Ok(Json(
        rest.iter()
            .map(|e| cosine(&source.vector, &e.vector) as f32)
            .collect(),
    ))
}

// ---------------------------------------------------------------------------
// POST /tokenize with `inputs`, POST /decode

#[derive(Debug, Deserialize)]
struct TeiTokenizeRequest {
    inputs: Value,
    #[serde(default = "yes")]
    add_special_tokens: bool,
    #[serde(default)]
    prompt_name: Option<String>,
}

/// TEI's `SimpleToken`.
#[derive(Debug, Serialize)]
pub(crate) struct SimpleToken {
    id: u32,
    text: String,
    special: bool,
    start: Option<usize>,
    stop: Option<usize>,
}

/// TEI's tokenisation: one list of tokens per input (a single string gives a
/// list of one).
pub(crate) async fn tokenize(
    state: &Arc<AppState>,
    ctx: &Ctx,
    body: Value,
) -> TeiResult<Vec<Vec<SimpleToken>>> {
    let request: TeiTokenizeRequest = from_object(body)?;
    let texts = texts_only(parse_pieces(request.inputs, "inputs", state)?)?;
    ctx.record(&texts, state.config.log_inputs);
    let texts = prompted(state, texts, request.prompt_name.as_deref())?;
    let backend = Arc::clone(&state.backend);
    let special = request.add_special_tokens;
    let out = state
        .infer
        .blocking(move || -> Result<Vec<Vec<SimpleToken>>, TeiError> {
            texts
                .iter()
                .map(|text| {
                    let spans = backend
                        .token_spans(text, special)
                        .ok_or_else(|| TeiError::backend("this backend cannot show its tokens"))?
                        .map_err(|e| TeiError {
                            status: axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                            kind: crate::tei_error::TeiErrorType::Tokenizer,
                            message: e.message,
                        })?;
                    Ok(spans
                        .into_iter()
                        .map(|s| SimpleToken {
                            id: s.id,
                            text: s.text,
                            special: s.special,
                            start: s.start,
                            stop: s.stop,
                        })
                        .collect())
                })
                .collect()
        })
        .await??;
    Ok(Json(out))
}

/// TEI's `DecodeRequest`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct DecodeRequest {
    /// Token ids, or a list of lists of token ids.
    #[schema(value_type = Object)]
    ids: Value,
    #[serde(default = "yes")]
    skip_special_tokens: bool,
}

/// Token ids back to text: `ids` is one list of ids or a list of lists;
/// answers one string per list.
#[utoipa::path(
    post,
    path = "/decode",
    request_body = DecodeRequest,
    responses(
        (status = 200, description = "One text per list of ids", body = Vec<String>),
        (status = "4XX", description = "TEI's errors", body = crate::tei_error::TeiErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn decode(
    State(state): State<Arc<AppState>>,
    TeiBody(body): TeiBody,
) -> TeiResult<Vec<String>> {
    let request: DecodeRequest = from_object(body)?;
    let lists: Vec<Vec<u32>> = match request.ids {
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_number) => {
            vec![decode_ids(&items, "ids")?]
        }
        Value::Array(items) if !items.is_empty() => {
            check_count(items.len(), &state.config)?;
            items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::Array(ids) => decode_ids(ids, &format!("ids[{i}]")),
                    other => Err(TeiError::unprocessable(format!(
                        "ids[{i}] must be an array of token ids, got {}",
                        kind_of(other)
                    ))),
                })
                .collect::<Result<_, _>>()?
        }
        Value::Array(_) => return Err(ApiError::empty("ids", "ids is an empty array").into()),
        other => {
            return Err(TeiError::unprocessable(format!(
                "ids must be an array of token ids or of arrays of token ids, got {}",
                kind_of(&other)
            )))
        }
    };
    let backend = Arc::clone(&state.backend);
    let skip = request.skip_special_tokens;
    let out = state
        .infer
        .blocking(move || -> Result<Vec<String>, TeiError> {
            lists
                .iter()
                .map(|ids| {
                    backend
                        .decode(ids, skip)
                        .ok_or_else(|| TeiError::backend("this backend cannot decode token ids"))?
                        .map_err(|e| TeiError::unprocessable(e.message))
                })
                .collect()
        })
        .await??;
    Ok(Json(out))
}

fn decode_ids(items: &[Value], param: &str) -> Result<Vec<u32>, TeiError> {
    items
        .iter()
        .enumerate()
        .map(|(k, v)| {
            v.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    TeiError::unprocessable(format!("{param}[{k}] must be a token id, got {v}"))
                })
        })
        .collect()
}

// ---------------------------------------------------------------------------
// POST /: routed by the body's shape

/// `InferenceClient(model=URL)` posts every task to the URL itself: string or
/// list `inputs` embed, `inputs` with `source_sentence` is a similarity,
/// `query` with `texts` a rerank.
#[utoipa::path(
    post,
    path = "/",
    request_body(content = Object, description = "TEI's /embed, /similarity (inputs with source_sentence) or /rerank (query and texts) request"),
    responses(
        (status = 200, description = "The answer of the route the body's shape selects"),
        (status = "4XX", description = "TEI's errors", body = crate::tei_error::TeiErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn root(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    body: Result<TeiBody, TeiError>,
) -> Response {
    let body = match body {
        Ok(TeiBody(body)) => body,
        Err(e) => return e.into_response(),
    };
    match (body.get("inputs"), body.get("query"), body.get("texts")) {
        (Some(Value::String(_) | Value::Array(_)), _, _) => {
            embed_value(&state, &ctx, body).await.into_response()
        }
        (Some(Value::Object(inputs)), _, _) if inputs.contains_key("source_sentence") => {
            similarity(&state, &ctx, body).await.into_response()
        }
        (None, Some(_), Some(_)) => crate::rerank::rerank_value(&state, &ctx, body)
            .await
            .into_response(),
        _ => TeiError::unprocessable(
            "POST / takes {\"inputs\": text or texts} (embed), {\"inputs\": {\"source_sentence\", \
             \"sentences\"}} (similarity) or {\"query\", \"texts\"} (rerank)",
        )
        .into_response(),
    }
}
