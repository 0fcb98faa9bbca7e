//! Prompts on every route: the texts of a request with the prompt of its
//! `prompt_name` (or the server's default prompt, `serve
//! --default-prompt-name`/`--default-prompt`) before each, by
//! bertflow-core's one rule ([`crate::EmbedBackend::prompted`], which the
//! model backend answers with `bertflow_core::Pipeline::prompt_texts`).
//! Routes call these right after parsing their texts, before anything is
//! tokenised or queued.
use crate::error::ApiError;
use crate::inputs::Piece;
use crate::state::AppState;

/// `texts` with the prompt of `prompt_name` (`None`: the default prompt)
/// before each; an unknown name is a 422 naming the model's prompts.
pub(crate) fn prompted(
    state: &AppState,
    texts: Vec<String>,
    prompt_name: Option<&str>,
) -> Result<Vec<String>, ApiError> {
    state
        .backend
        .prompted(texts, prompt_name)
        .map_err(|message| ApiError::invalid(Some("prompt_name"), message))
}

/// [`prompted`] for inputs that may be token ids: ids are used as they are,
/// so a `prompt_name` with token ids is a 422 (the default prompt is not
/// added to them).
pub(crate) fn prompted_pieces(
    state: &AppState,
    pieces: Vec<Piece>,
    prompt_name: Option<&str>,
) -> Result<Vec<Piece>, ApiError> {
    if prompt_name.is_some() && pieces.iter().any(|p| matches!(p, Piece::Ids(_))) {
        return Err(ApiError::invalid(
            Some("prompt_name"),
            "prompt_name applies to text inputs, not to token ids (send the prompt's tokens \
             in the ids instead)",
        ));
    }
    let (texts, at): (Vec<String>, Vec<usize>) = pieces
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match p {
            Piece::Text(t) => Some((t.clone(), i)),
            Piece::Ids(_) | Piece::Pair(..) | Piece::Query(_) => None,
        })
        .unzip();
    let mut pieces = pieces;
    for (text, i) in prompted(state, texts, prompt_name)?.into_iter().zip(at) {
        pieces[i] = Piece::Text(text);
    }
    Ok(pieces)
}
