//! The retrieval outputs besides the dense vector, through the one queue:
//!
//! - `POST /embed_sparse`: text-embeddings-inference's route and shapes
//!   (`EmbedSparseRequest` in, `[[{"index", "value"}]]` out, one list per
//!   input, ids ascending); 424 `Backend` when the model has no sparse head,
//!   as TEI answers a model served without `--pooling splade`.
//! - `POST /embed_multi`: per-token (ColBERT) vectors, one `tokens x dim`
//!   matrix per input, unit rows, in the shape of TEI's `/embed_all`
//!   (`[[[f32]]]`): TEI has no multi-vector route, and `/embed_all`'s shape
//!   is the one its clients already parse (infinity's alternative nests the
//!   matrices in OpenAI's `data` objects, which no OpenAI client can type).
//!   `"is_query": true` pads each text with the mask token to the model's
//!   query length (ColBERT's query augmentation), as `/rerank` does.
//!
//! `/rerank` by late interaction (MaxSim) is in `rerank`.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::access::Ctx;
use crate::inputs::{parse_pieces, piece_text, Piece};
use crate::prompt::prompted_pieces;
use crate::queue::{Output, Task};
use crate::state::{from_object, AppState};
use crate::tei_error::{require_embedding, TeiBody, TeiError, TeiResult};
use crate::truncation::{Truncation, TruncationDirection};

/// TEI's `EmbedSparseRequest`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct EmbedSparseRequest {
    /// A string, a list of strings, or token ids (`[101, ...]` or `[[101, ...], ...]`).
    #[schema(value_type = Object)]
    inputs: Value,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: TruncationDirection,
    #[serde(default)]
    prompt_name: Option<String>,
}

/// TEI's `SparseValue`: one vocabulary id and its weight.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct SparseValue {
    index: usize,
    value: f32,
}

/// The request of `POST /embed_multi` (bertflow's own route: unknown fields
/// are refused, unlike TEI's routes, which ignore them as TEI does).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EmbedMultiRequest {
    /// A string, a list of strings, or token ids.
    #[schema(value_type = Object)]
    inputs: Value,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: TruncationDirection,
    #[serde(default)]
    prompt_name: Option<String>,
    /// Texts are queries: padded with the mask token to the model's query length.
    #[serde(default)]
    is_query: bool,
}

/// The parsed, prompted inputs and truncation of a TEI request (`inputs`,
/// `prompt_name`, `truncate`, `truncation_direction`) to an embedding model.
pub(crate) fn inputs(
    state: &AppState,
    ctx: &Ctx,
    inputs: Value,
    prompt_name: Option<&str>,
    truncate: Option<bool>,
    direction: TruncationDirection,
) -> Result<(Vec<Piece>, Truncation), TeiError> {
    require_embedding(state)?;
    let truncation = Truncation::of(state.config.auto_truncate, truncate, direction);
    let pieces = parse_pieces(inputs, "inputs", state)?;
    let texts: Vec<&str> = pieces.iter().map(piece_text).collect();
    ctx.record(&texts, state.config.log_inputs);
    Ok((prompted_pieces(state, pieces, prompt_name)?, truncation))
}

/// Each input's sparse vector, ids ascending (TEI's `/embed_sparse`).
#[utoipa::path(
    post,
    path = "/embed_sparse",
    request_body = EmbedSparseRequest,
    responses(
        (status = 200, description = "One list of {index, value} per input", body = Vec<Vec<SparseValue>>),
        (status = "4XX", description = "TEI's errors; 424 when the model has no sparse head", body = crate::tei_error::TeiErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn embed_sparse(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    TeiBody(body): TeiBody,
) -> TeiResult<Vec<Vec<SparseValue>>> {
    let request: EmbedSparseRequest = from_object(body)?;
    let (pieces, truncation) = inputs(
        &state,
        &ctx,
        request.inputs,
        request.prompt_name.as_deref(),
        request.truncate,
        request.truncation_direction,
    )?;
    let lists = run_task(
        &state,
        Task::EmbedSparse,
        pieces,
        truncation,
        |output| match output {
            Output::Sparse(v) => Some(
                v.indices
                    .into_iter()
                    .zip(v.values)
                    .map(|(index, value)| SparseValue {
                        index: index as usize,
                        value,
                    })
                    .collect(),
            ),
            _ => None,
        },
    )
    .await?;
    Ok(Json(lists))
}

/// Each input's per-token vectors: one `tokens x dim` matrix per input.
#[utoipa::path(
    post,
    path = "/embed_multi",
    request_body = EmbedMultiRequest,
    responses(
        (status = 200, description = "One tokens x dim matrix of unit rows per input", body = Vec<Vec<Vec<f32>>>),
        (status = "4XX", description = "TEI's errors; 424 when the model gives no per-token vectors", body = crate::tei_error::TeiErrorBody),
    ),
    security((), ("api_key" = []))
)]
pub(crate) async fn embed_multi(
    State(state): State<Arc<AppState>>,
    Extension(ctx): Extension<Ctx>,
    TeiBody(body): TeiBody,
) -> TeiResult<Vec<Vec<Vec<f32>>>> {
    let request: EmbedMultiRequest = from_object(body)?;
    let (pieces, truncation) = inputs(
        &state,
        &ctx,
        request.inputs,
        request.prompt_name.as_deref(),
        request.truncate,
        request.truncation_direction,
    )?;
    let pieces = if request.is_query {
        pieces
            .into_iter()
            .map(|p| match p {
                Piece::Text(t) => Piece::Query(t),
                other => other,
            })
            .collect()
    } else {
        pieces
    };
    Ok(Json(multi_vectors(&state, pieces, truncation).await?))
}

/// Per-token vectors of `pieces` through the queue.
pub(crate) async fn multi_vectors(
    state: &AppState,
    pieces: Vec<Piece>,
    truncation: Truncation,
) -> Result<Vec<Vec<Vec<f32>>>, TeiError> {
    run_task(
        state,
        Task::EmbedMulti,
        pieces,
        truncation,
        |output| match output {
            Output::Multi(m) => Some(m),
            _ => None,
        },
    )
    .await
}

/// `task`'s answers for `pieces` through the queue, each taken out of its
/// [`Output`] by `pick` (`None`: the queue answered another task, a bug).
pub(crate) async fn run_task<T>(
    state: &AppState,
    task: Task,
    pieces: Vec<Piece>,
    truncation: Truncation,
    pick: impl Fn(Output) -> Option<T>,
) -> Result<Vec<T>, TeiError> {
    let outputs = state.infer.run(task, "inputs", pieces, truncation).await?;
    outputs
        .into_iter()
        .map(|output| {
            pick(output).ok_or_else(|| TeiError::backend("the queue answered another task"))
        })
        .collect()
}

/// ColBERT's MaxSim of a query's token vectors against a document's
/// (bertflow-core's [`bertflow_core::retrieval::maxsim`]).
pub(crate) fn maxsim(query: &[Vec<f32>], doc: &[Vec<f32>]) -> Result<f32, TeiError> {
    let matrix = |rows: &[Vec<f32>]| {
        let width = rows.first().map_or(0, Vec::len);
        ndarray::Array2::from_shape_vec((rows.len(), width), rows.concat())
            .map_err(|e| TeiError::backend(format!("per-token vectors of unequal widths: {e}")))
    };
    bertflow_core::retrieval::maxsim(matrix(query)?.view(), matrix(doc)?.view())
        .map_err(|e| TeiError::backend(e.to_string()))
}
