//! What becomes of an input longer than the model's `max_len` tokens:
//! TEI's `truncate` and `truncation_direction`, shared by the routes of
//! `tei` and `rerank` and applied by `infer` right after tokenizing.

use serde::Deserialize;

/// Where an input over the model's length is cut. bertflow cuts on the
/// right; `Left` is accepted and refused (422) only when an input is cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
pub(crate) enum TruncationDirection {
    #[serde(alias = "left")]
    Left,
    #[default]
    #[serde(alias = "right")]
    Right,
}

/// The truncation options of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Truncation {
    /// Cut an input over `max_len` (else it is refused, 413).
    pub truncate: bool,
    pub direction: TruncationDirection,
}

impl Truncation {
    /// bertflow's own routes: always cut, on the right.
    pub(crate) const ALWAYS: Truncation = Truncation {
        truncate: true,
        direction: TruncationDirection::Right,
    };

    /// A TEI request's options; `truncate` unsaid is the server's
    /// `--auto-truncate`.
    pub(crate) fn of(
        auto_truncate: bool,
        truncate: Option<bool>,
        direction: TruncationDirection,
    ) -> Self {
        Self {
            truncate: truncate.unwrap_or(auto_truncate),
            direction,
        }
    }
}
