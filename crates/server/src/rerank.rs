//! text-embeddings-inference's classifier routes over
//! [`EmbedBackend::predict`](crate::backend::EmbedBackend::predict):
//! `POST /rerank` (a one-label cross-encoder: `sigmoid(logit)` of each
//! (query, text) pair, best first) and `POST /predict` (each input's labels
//! with their softmax probability, or the sigmoid for a one-label head, best
//! first). With `raw_scores` both answer the logits. Errors in TEI's shape.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::Ctx;
use crate::backend::ModelKind;
use crate::embed_outputs::{maxsim, multi_vectors};
use crate::error::ApiError;
use crate::infer::Input;
use crate::queue::{Output, Task};
use crate::state::{check_count, check_text, from_object, kind_of, AppState};
use crate::tei_error::{TeiBody, TeiError};
use crate::truncation::{Truncation, TruncationDirection};

type Pair = (String, Option<String>);

/// TEI's `RerankRequest`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct RerankRequest {
    query: String,
    texts: Vec<String>,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: TruncationDirection,
    #[serde(default)]
    raw_scores: bool,
    #[serde(default)]
    return_text: bool,
}

/// TEI's `Rank`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Rank {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    score: f32,
}

/// sigmoid(logit) of each (query, text) pair (the logit with `raw_scores`), best first.
#[utoipa::path(
    post,
    path = "/rerank",
    request_body = RerankRequest,
    responses(
        (status = 200, description = "Ranks, best first", body = Vec<Rank>),
        (status = "4XX", description = "TEI's errors; 424 when the model is not a reranker", body = crate::tei_error::TeiErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn rerank(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    TeiBody(body): TeiBody,
) -> Response {
    rerank_value(&state, &ctx, body).await.into_response()
}

pub(crate) async fn rerank_value(
    state: &Arc<AppState>,
    ctx: &Ctx,
    body: Value,
) -> Result<Json<Vec<Rank>>, TeiError> {
    let request: RerankRequest = from_object(body)?;
    if request.texts.is_empty() {
        return Err(ApiError::empty("texts", "`texts` cannot be empty").into());
    }
    check_count(request.texts.len(), &state.config)?;
    let max_chars = state.config.limits.max_chars_per_input;
    check_text(&request.query, "query", max_chars)?;
    for (k, t) in request.texts.iter().enumerate() {
        check_text(t, &format!("texts[{k}]"), max_chars)?;
    }
    let all: Vec<&str> = std::iter::once(request.query.as_str())
        .chain(request.texts.iter().map(String::as_str))
        .collect();
    ctx.record(&all, state.config.log_inputs);
    let truncation = Truncation::of(
        state.config.auto_truncate,
        request.truncate,
        request.truncation_direction,
    );
    if state.backend.late_interaction() {
        return late_interaction(state, request, truncation).await;
    }
    if state.info.kind != ModelKind::Reranker || state.info.labels.len() != 1 {
        return Err(TeiError::backend(match state.info.kind {
            ModelKind::Embedding => "model is not a re-ranker model: this server serves an embedding model; use /embed".to_owned(),
            ModelKind::Reranker => format!(
                "model is not a re-ranker model: its classifier has {} labels, a reranker has one; use /predict",
                state.info.labels.len()
            ),
        }));
    }
    let pairs: Vec<Pair> = request
        .texts
        .iter()
        .map(|t| (request.query.clone(), Some(t.clone())))
        .collect();
    let logits = run_predict(state, pairs, truncation).await?;
    let mut ranks = logits
        .into_iter()
        .enumerate()
        .map(|(index, row)| {
            let logit = row[0];
            Rank {
                index,
                text: request.return_text.then(|| request.texts[index].clone()),
                score: if request.raw_scores {
                    logit
                } else {
                    sigmoid(logit)
                },
            }
        })
        .collect::<Vec<_>>();
    // Best first; ties keep input order.
    ranks.sort_by(|a, b| b.score.total_cmp(&a.score));
    Ok(Json(ranks))
}

/// TEI's `PredictRequest`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct PredictRequest {
    /// A string, a pair `[a, b]`, or a batch of `[a]` and `[a, b]`.
    #[schema(value_type = Object)]
    inputs: Value,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: TruncationDirection,
    #[serde(default)]
    raw_scores: bool,
}

/// TEI's `Prediction`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Prediction {
    score: f32,
    label: String,
}

/// One input's predictions, or a batch's.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum PredictResponse {
    Single(Vec<Prediction>),
    Batch(Vec<Vec<Prediction>>),
}

/// Each input's labels with their probability (softmax; sigmoid for one label), best first.
#[utoipa::path(
    post,
    path = "/predict",
    request_body = PredictRequest,
    responses(
        (status = 200, description = "Predictions, best first", body = PredictResponse),
        (status = "4XX", description = "TEI's errors; 424 when the model is not a classifier", body = crate::tei_error::TeiErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn predict(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    TeiBody(body): TeiBody,
) -> Result<Json<PredictResponse>, TeiError> {
    let request: PredictRequest = from_object(body)?;
    let (inputs, batch) = parse_predict_inputs(request.inputs)?;
    check_count(inputs.len(), &state.config)?;
    if state.info.kind != ModelKind::Reranker {
        return Err(TeiError::backend(
            "model is not a classifier: this server serves an embedding model; use /embed",
        ));
    }
    let max_chars = state.config.limits.max_chars_per_input;
    for (k, (a, b)) in inputs.iter().enumerate() {
        check_text(a, &format!("inputs[{k}][0]"), max_chars)?;
        if let Some(b) = b {
            check_text(b, &format!("inputs[{k}][1]"), max_chars)?;
        }
    }
    let all: Vec<&str> = inputs
        .iter()
        .flat_map(|(a, b)| std::iter::once(a.as_str()).chain(b.as_deref()))
        .collect();
    ctx.record(&all, state.config.log_inputs);
    let truncation = Truncation::of(
        state.config.auto_truncate,
        request.truncate,
        request.truncation_direction,
    );
    let logits = run_predict(&state, inputs, truncation).await?;
    let labels = &state.info.labels;
    let mut out: Vec<Vec<Prediction>> = logits
        .into_iter()
        .map(|row| {
            let scores = if request.raw_scores {
                row
            } else if row.len() == 1 {
                vec![sigmoid(row[0])]
            } else {
                softmax(&row)
            };
            let mut predictions: Vec<Prediction> = scores
                .into_iter()
                .zip(labels)
                .map(|(score, label)| Prediction {
                    score,
                    label: label.clone(),
                })
                .collect();
            predictions.sort_by(|a, b| b.score.total_cmp(&a.score));
            predictions
        })
        .collect();
    Ok(Json(if batch {
        PredictResponse::Batch(out)
    } else {
        PredictResponse::Single(out.pop().unwrap_or_default())
    }))
}

/// TEI's `PredictInput`: a string, a pair `[a, b]`, or a batch of `[a]` and
/// `[a, b]`. Returns the inputs and whether it was a batch.
fn parse_predict_inputs(value: Value) -> Result<(Vec<Pair>, bool), TeiError> {
    let string = |v: &Value, param: &str| -> Result<String, TeiError> {
        v.as_str().map(str::to_owned).ok_or_else(|| {
            TeiError::unprocessable(format!("{param} must be a string, got {}", kind_of(v)))
        })
    };
    let sequence = |items: &[Value], param: &str| -> Result<Pair, TeiError> {
        match items {
            [a] => Ok((string(a, &format!("{param}[0]"))?, None)),
            [a, b] => Ok((
                string(a, &format!("{param}[0]"))?,
                Some(string(b, &format!("{param}[1]"))?),
            )),
            _ => Err(TeiError::unprocessable(format!(
                "{param} must be one string or a pair of strings, got {} items",
                items.len()
            ))),
        }
    };
    match value {
        Value::String(text) => Ok((vec![(text, None)], false)),
        Value::Array(items) if items.is_empty() => {
            Err(ApiError::empty("inputs", "inputs is an empty array").into())
        }
        Value::Array(items) if items[0].is_string() => {
            Ok((vec![sequence(&items, "inputs")?], false))
        }
        Value::Array(items) => {
            let batch = items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::Array(seq) => sequence(seq, &format!("inputs[{i}]")),
                    other => Err(TeiError::unprocessable(format!(
                        "inputs[{i}] must be [text] or [text, text_pair], got {}",
                        kind_of(other)
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((batch, true))
        }
        other => Err(TeiError::unprocessable(format!(
            "inputs must be a string, a pair of strings or a batch of them, got {}",
            kind_of(&other)
        ))),
    }
}

/// `/rerank` served by a multi-vector (ColBERT) model: MaxSim of the query's
/// token vectors (padded to the model's query length) against each text's,
/// best first; the raw sum is the score (it has no logit to squash, so
/// `raw_scores` changes nothing).
async fn late_interaction(
    state: &Arc<AppState>,
    request: RerankRequest,
    truncation: Truncation,
) -> Result<Json<Vec<Rank>>, TeiError> {
    let inputs = std::iter::once(Input::Query(request.query.clone()))
        .chain(request.texts.iter().cloned().map(Input::Text))
        .collect();
    let mut matrices = multi_vectors(state, inputs, truncation).await?.into_iter();
    let query = matrices.next().unwrap_or_default();
    let mut ranks = matrices
        .enumerate()
        .map(|(index, doc)| {
            Ok(Rank {
                index,
                text: request.return_text.then(|| request.texts[index].clone()),
                score: maxsim(&query, &doc)?,
            })
        })
        .collect::<Result<Vec<_>, TeiError>>()?;
    ranks.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    Ok(Json(ranks))
}

/// Run the classifier through the queue: one logit row per input, each as
/// long as the labels. Inputs over `max_len` are refused (413) unless
/// truncated, and refused (422) when they ask to cut on the left, right
/// after tokenizing.
async fn run_predict(
    state: &Arc<AppState>,
    inputs: Vec<Pair>,
    truncation: Truncation,
) -> Result<Vec<Vec<f32>>, TeiError> {
    let inputs = inputs
        .into_iter()
        .map(|(a, b)| match b {
            Some(b) => Input::Pair(a, b),
            None => Input::Text(a),
        })
        .collect();
    crate::embed_outputs::run_task(state, Task::Predict, inputs, truncation, |o| match o {
        Output::Logits(row) => Some(row),
        _ => None,
    })
    .await
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Softmax in f64 (the largest logit subtracted first).
fn softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f64> = row.iter().map(|&x| f64::from(x - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.into_iter().map(|e| (e / sum) as f32).collect()
}
