use std::path::PathBuf;

/// Everything that can go wrong while loading a model or encoding text.
#[derive(Debug, thiserror::Error)]
pub enum EncoderError {
    #[error("model not found: {what}. {hint}")]
    ModelNotFound { what: String, hint: String },
    #[error("model directory {dir} is incomplete: {missing}")]
    IncompleteModel { dir: PathBuf, missing: String },
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid {path}: {msg}")]
    BadFile { path: PathBuf, msg: String },
    #[error("unsupported model: {0}")]
    Unsupported(String),
    #[error("weights: {0}")]
    Weights(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error(
        "unknown pooling '{0}'; valid: cls, last-token, pooler, last-avg, first-last-avg, emb-last-avg, \
         last2-avg, emb-avg, layers:i,j,..., st, splade (see `bertflow poolings`)"
    )]
    UnknownPooling(String),
    #[error("layer {layer} is out of range: this model has hidden states 0..={max} (0 = embedding output, {max} = last transformer layer)")]
    LayerOutOfRange { layer: usize, max: usize },
    #[error("pooling 'pooler' needs the checkpoint's pooler weights (pooler.dense.*), which this model does not have")]
    NoPooler,
    #[error("max length {0} must be between 2 and the model's position limit {1}")]
    BadMaxLen(usize, usize),
    #[error(
        "input is too long: {given} tokens, and the model takes at most {max} (truncate to cut it)"
    )]
    TooLong { given: String, max: usize },
    #[error("weighting: {0}")]
    Weighting(String),
    #[error("precision: {0}")]
    Precision(String),
    #[error(transparent)]
    Kernel(#[from] bertflow_kernels::KernelError),
}

pub type Result<T, E = EncoderError> = std::result::Result<T, E>;

pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> EncoderError {
    let path = path.into();
    move |source| EncoderError::Io { path, source }
}
