//! Embedding inputs that may be text or the model's own token ids (TEI's
//! `inputs`, OpenAI's `input`), how they are embedded, and what is done to
//! the vectors afterwards (a `dimensions` prefix, L2 normalisation).

use serde_json::Value;

use crate::error::ApiError;
pub(crate) use crate::infer::Input as Piece;
use crate::state::{check_count, check_text, kind_of, AppState};

/// What the request log shows of an input.
pub(crate) fn piece_text(piece: &Piece) -> &str {
    match piece {
        Piece::Text(t) | Piece::Pair(t, _) | Piece::Query(t) => t,
        Piece::Ids(_) => "<token ids>",
    }
}

/// `field` as a string, an array of token ids, or an array of strings and
/// arrays of token ids. Empty: 400; over `max_inputs_per_request`: 413; a
/// text over `max_chars_per_input`: 422. (An id list longer than `max_len`
/// is cut or refused after parsing, as the request's truncation says.)
pub(crate) fn parse_pieces(
    value: Value,
    field: &str,
    state: &AppState,
) -> Result<Vec<Piece>, ApiError> {
    let max_chars = state.config.limits.max_chars_per_input;
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
                return Ok(vec![Piece::Ids(ids_of(items, field)?)]);
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
                        Value::Array(ids) => Ok(Piece::Ids(ids_of(ids, &param)?)),
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

/// Token ids: non-negative integers that fit in u32, at least one.
fn ids_of(items: Vec<Value>, param: &str) -> Result<Vec<u32>, ApiError> {
    if items.is_empty() {
        return Err(ApiError::empty(param, format!("{param} is an empty array")));
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
