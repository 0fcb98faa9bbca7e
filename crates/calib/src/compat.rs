//! Whether a saved calibrator applies to a set of embeddings: its recorded
//! dimension, model, pooling and prompt against theirs.
use crate::error::{CalibError, Result};
use crate::CalibratorMeta;

/// Checks that a saved calibrator can be applied to embeddings from `model`
/// with `pooling` and dimension `dim`, made without a prompt (see
/// [`check_compatible_prompted`]). A dimension mismatch is always an
/// error; a model or pooling mismatch is an error unless `allow_mismatch`,
/// in which case the tolerated mismatches are returned (for a warning).
pub fn check_compatible(
    meta: &CalibratorMeta,
    model: &str,
    pooling: &str,
    dim: usize,
    allow_mismatch: bool,
) -> Result<Vec<String>> {
    check_compatible_prompted(meta, model, pooling, None, dim, allow_mismatch)
}

/// [`check_compatible`] for embeddings made with `prompt` prepended to every
/// sentence (`None` or empty: no prompt): a prompt other than the file's
/// ([`CalibratorMeta::prompt`]; files without one were fitted without a
/// prompt) is a mismatch like another pooling.
pub fn check_compatible_prompted(
    meta: &CalibratorMeta,
    model: &str,
    pooling: &str,
    prompt: Option<&str>,
    dim: usize,
    allow_mismatch: bool,
) -> Result<Vec<String>> {
    if meta.input_dim != dim {
        return Err(CalibError::Incompatible(format!(
            "the calibrator was fitted on {}-dimensional embeddings, these have {dim}",
            meta.input_dim
        )));
    }
    let mut mismatches = Vec::new();
    if meta.model != model {
        mismatches.push(format!(
            "the calibrator was fitted on embeddings of model {:?}, not {model:?}",
            meta.model
        ));
    }
    if meta.pooling != pooling {
        mismatches.push(format!(
            "the calibrator was fitted with pooling {:?}, not {pooling:?}",
            meta.pooling
        ));
    }
    let theirs = prompt.filter(|p| !p.is_empty());
    let ours = meta.prompt.as_deref().filter(|p| !p.is_empty());
    if theirs != ours {
        let say = |p: Option<&str>| p.map_or("no prompt".to_string(), |p| format!("prompt {p:?}"));
        mismatches.push(format!(
            "the calibrator was fitted on sentences with {}, these have {}",
            say(ours),
            say(theirs)
        ));
    }
    if !mismatches.is_empty() && !allow_mismatch {
        return Err(CalibError::Incompatible(format!(
            "{} (allow the mismatch to use it anyway)",
            mismatches.join("; ")
        )));
    }
    Ok(mismatches)
}
