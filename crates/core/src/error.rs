//! One error type for every workflow. Front ends map it: the CLI prints the
//! chain (`error: context: cause`), the Python bindings raise an exception.
use std::path::{Path, PathBuf};

/// What went wrong in a workflow.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// Bad input from the user (arguments, files, data), with a message that says
    /// what to change.
    #[error("{0}")]
    Input(String),
    /// A setting (a field of a config) that cannot be used as given. `field` is
    /// the config's name for it (`pooling`, `max_len`, `allow_mismatch`, ...):
    /// front ends name it as their users know it (`--max-len`, `max_len=`).
    #[error("{field}: {message}")]
    Setting {
        field: &'static str,
        message: String,
    },
    /// An embedding model where a reranker is needed (`field` names the
    /// setting, `model`).
    #[error("{field}: {model} is an embedding model; it has no classification head (config.json's architectures name no *ForSequenceClassification): rerank with a cross-encoder")]
    NotReranker { field: &'static str, model: String },
    /// A reranker where an embedding model is needed (`field` names the
    /// setting, `model`).
    #[error(
        "{field}: {model} is a reranker (cross-encoder): use bertflow rerank / bertflow.Reranker"
    )]
    IsReranker { field: &'static str, model: String },
    /// A file could not be read or written.
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Encoder(#[from] bertflow_encoder::EncoderError),
    #[error(transparent)]
    Calib(#[from] bertflow_calib::CalibError),
    #[error(transparent)]
    Eval(#[from] bertflow_eval::EvalError),
    #[error(transparent)]
    Data(#[from] bertflow_eval::DataError),
    #[error(transparent)]
    Analysis(#[from] bertflow_analysis::AnalysisError),
    #[cfg(feature = "index")]
    #[error(transparent)]
    Index(#[from] bertflow_index::IndexError),
    /// An output file could not be written (the old one, if any, is intact).
    #[error(transparent)]
    Write(#[from] bertflow_durable::DurableError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Safetensors(#[from] safetensors::SafeTensorError),
    /// What was being done when `source` happened.
    #[error("{context}")]
    Context {
        context: String,
        #[source]
        source: Box<CoreError>,
    },
}

/// `Result` with [`CoreError`].
pub type Result<T, E = CoreError> = std::result::Result<T, E>;

impl CoreError {
    /// An I/O error on `path`; `action` reads "cannot {action} {path}".
    pub fn io<'a>(
        action: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(std::io::Error) -> CoreError + 'a {
        move |source| CoreError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// A [`CoreError::Setting`] error on `field`.
    pub fn setting(field: &'static str, message: impl Into<String>) -> CoreError {
        CoreError::Setting {
            field,
            message: message.into(),
        }
    }

    /// The setting an error is about and what is wrong with it (without the
    /// field's name), for front ends that name the setting their own way
    /// (`--max-len`, `max_len=`): [`CoreError::Setting`],
    /// [`CoreError::NotReranker`], [`CoreError::IsReranker`].
    pub fn setting_parts(&self) -> Option<(&'static str, String)> {
        match self {
            CoreError::Setting { field, message } => Some((field, message.clone())),
            CoreError::NotReranker { field, .. } | CoreError::IsReranker { field, .. } => {
                let full = self.to_string();
                let message = full
                    .strip_prefix(&format!("{field}: "))
                    .unwrap_or(&full)
                    .to_string();
                Some((field, message))
            }
            _ => None,
        }
    }

    /// The innermost error (skipping context layers).
    pub fn root(&self) -> &CoreError {
        match self {
            CoreError::Context { source, .. } => source.root(),
            e => e,
        }
    }

    /// The whole chain in one line: "context: cause: ...".
    pub fn chain(&self) -> String {
        let mut s = self.to_string();
        let mut cur: Option<&dyn std::error::Error> = std::error::Error::source(self);
        while let Some(e) = cur {
            s.push_str(": ");
            s.push_str(&e.to_string());
            cur = e.source();
        }
        s
    }
}

/// Adds what was being done to an error, like anyhow's `Context`.
pub trait Context<T> {
    /// Wraps the error with a fixed message.
    fn context(self, msg: impl Into<String>) -> Result<T>;
    /// Wraps the error with a lazily built message.
    fn with_context<S: Into<String>>(self, f: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: Into<CoreError>> Context<T> for std::result::Result<T, E> {
    fn context(self, msg: impl Into<String>) -> Result<T> {
        self.map_err(|e| CoreError::Context {
            context: msg.into(),
            source: Box::new(e.into()),
        })
    }
    fn with_context<S: Into<String>>(self, f: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| CoreError::Context {
            context: f().into(),
            source: Box::new(e.into()),
        })
    }
}

/// Returns early with a [`CoreError::Input`] built by `format!`.
#[macro_export]
macro_rules! bail {
    ($($t:tt)*) => {
        return Err($crate::CoreError::Input(format!($($t)*)))
    };
}

/// Like `assert!`, but returns a [`CoreError::Input`].
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($t:tt)*) => {
        if !$cond {
            $crate::bail!($($t)*);
        }
    };
}
