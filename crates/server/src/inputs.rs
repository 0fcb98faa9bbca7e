//! Embedding inputs that may be text or the model's own token ids (TEI's
//! `inputs`, OpenAI's `input`), how they are embedded, and what is done to
//! the vectors afterwards (a `dimensions` prefix, L2 normalisation).

use std::sync::Arc;

use serde_json::Value;

use crate::backend::Embedded;
use crate::error::ApiError;
use crate::state::{check_count, check_text, embed_texts, kind_of, AppState};

/// One input: a text, or token ids used as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Text(String),
    Ids(Vec<u32>),
}

impl Piece {
    pub(crate) fn as_text(&self) -> &str {
        match self {
            Piece::Text(t) => t,
            Piece::Ids(_) => "<token ids>",
        }
    }
}

/// `field` as a string, an array of token ids, or an array of strings and
/// arrays of token ids. Empty: 400; over `max_inputs_per_request`: 413; a
/// text too long or an id list longer than `max_len`: 422.
pub(crate) fn parse_pieces(
    value: Value,
    field: &str,
    state: &AppState,
) -> Result<Vec<Piece>, ApiError> {
    let max_chars = state.config.limits.max_chars_per_input;
    let max_len = state.info.max_len;
    match value {
        Value::String(text) => {
            check_text(&text, field, max_chars)?;
            Ok(vec![Piece::Text(text)])
        }
        Value::Array(items) => {
            if items.is_empty() {
                return Err(ApiError::empty(field, format!("{field} is an empty array")));
            }
            if items.iter().all(Value::is_number) {
                return Ok(vec![Piece::Ids(ids_of(items, field, max_len)?)]);
            }
            check_count(items.len(), &state.config)?;
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| {
                    let param = format!("{field}[{i}]");
                    match item {
                        Value::String(text) => {
                            check_text(&text, &param, max_chars)?;
                            Ok(Piece::Text(text))
                        }
                        Value::Array(ids) => Ok(Piece::Ids(ids_of(ids, &param, max_len)?)),
                        other => Err(ApiError::invalid(
                            Some(&param),
                            format!(
                                "{param} must be a string or an array of token ids, got {}",
                                kind_of(&other)
                            ),
                        )),
                    }
                })
                .collect()
        }
        other => Err(ApiError::invalid(
            Some(field),
            format!(
                "{field} must be a string, an array of strings or token ids, got {}",
                kind_of(&other)
            ),
        )),
    }
}

/// Token ids: non-negative integers that fit in u32, 1 to `max_len` of them.
fn ids_of(items: Vec<Value>, param: &str, max_len: usize) -> Result<Vec<u32>, ApiError> {
    if items.is_empty() {
        return Err(ApiError::empty(param, format!("{param} is an empty array")));
    }
    if items.len() > max_len {
        return Err(ApiError::invalid(
            Some(param),
            format!(
                "{param} has {} token ids, more than the model's maximum of {max_len}",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(k, v)| {
            v.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    ApiError::invalid(
                        Some(param),
                        format!("{param}[{k}] must be a token id (an integer from 0 to 4294967295), got {v}"),
                    )
                })
        })
        .collect()
}

/// Embed pieces in order: texts through the batcher, token ids through the
/// backend's `embed_ids` (501 where it has none).
pub(crate) async fn embed_pieces(
    state: &Arc<AppState>,
    pieces: Vec<Piece>,
) -> Result<Vec<Embedded>, ApiError> {
    let n = pieces.len();
    let mut texts = Vec::new();
    let mut ids = Vec::new();
    let mut slots = Vec::with_capacity(n);
    for piece in pieces {
        match piece {
            Piece::Text(t) => {
                slots.push((true, texts.len()));
                texts.push(t);
            }
            Piece::Ids(v) => {
                slots.push((false, ids.len()));
                ids.push(v);
            }
        }
    }
    let from_ids = if ids.is_empty() {
        Vec::new()
    } else {
        let backend = Arc::clone(&state.backend);
        let count = ids.len();
        let out = tokio::task::spawn_blocking(move || backend.embed_ids(&ids))
            .await
            .map_err(|e| ApiError::Internal(format!("embedding token ids failed: {e}")))?
            .ok_or_else(|| {
                ApiError::NotSupported("this model takes text only, not token ids".into())
            })?
            .map_err(|e| ApiError::Backend(e.message))?;
        if out.len() != count || out.iter().any(|e| e.vector.len() != state.info.dimension) {
            return Err(ApiError::Backend(format!(
                "the backend returned {} vectors for {count} token-id inputs, or vectors of the wrong length",
                out.len()
            )));
        }
        out
    };
    let from_texts = if texts.is_empty() {
        Vec::new()
    } else {
        embed_texts(state, texts).await?
    };
    let mut from_texts = from_texts.into_iter().map(Some).collect::<Vec<_>>();
    let mut from_ids = from_ids.into_iter().map(Some).collect::<Vec<_>>();
    slots
        .into_iter()
        .map(|(text, k)| {
            let slot = if text {
                from_texts.get_mut(k)
            } else {
                from_ids.get_mut(k)
            };
            slot.and_then(Option::take)
                .ok_or_else(|| ApiError::Internal("an input lost its vector".into()))
        })
        .collect()
}

/// The first `dimensions` components, scaled to unit length when
/// `normalize` (core's normalisation: a zero vector stays zero).
pub(crate) fn finish_vector(mut vector: Vec<f32>, keep: usize, normalize: bool) -> Vec<f32> {
    vector.truncate(keep);
    if normalize {
        let n = vector.len();
        if let Ok(mut m) = ndarray::Array2::from_shape_vec((1, n), vector.clone()) {
            bertflow_core::Pipeline::normalize(&mut m);
            vector = m.into_raw_vec_and_offset().0;
        }
    }
    vector
}

/// `dimensions` checked against the model's: `1..=dimension` (422 otherwise).
pub(crate) fn keep_dimensions(
    requested: Option<usize>,
    dimension: usize,
) -> Result<usize, ApiError> {
    match requested {
        None => Ok(dimension),
        Some(d) if (1..=dimension).contains(&d) => Ok(d),
        Some(d) => Err(ApiError::invalid(
            Some("dimensions"),
            format!("dimensions must be between 1 and {dimension}, got {d}"),
        )),
    }
}
