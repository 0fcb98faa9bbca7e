//! Every default that a front end shows, and the environment variables behind
//! them, resolved here once: the CLI's clap attributes, the server, the Python
//! signatures (`bertflow.defaults()`) and the Spark job all ask this module
//! instead of restating a value.
//!
//! Paths in defaults (the model, the STS data) are found from where the user
//! is *and* from where bertflow is installed: the working directory first,
//! then every folder above the running binary and above the installed Python
//! package ([`add_anchor`]), so `bertflow` and `import bertflow` work from any
//! directory of a checkout set up by `scripts/setup.sh`.
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The model used when none is given (a sentence-transformers directory).
pub const MODEL_DIR: &str = "models/all-MiniLM-L6-v2";
/// Environment variable naming the model.
pub const ENV_MODEL: &str = "BERTFLOW_MODEL";
/// Environment variable giving the number of worker threads.
pub const ENV_THREADS: &str = "BERTFLOW_THREADS";
/// Environment variable giving the precision of the linear products.
pub const ENV_PRECISION: &str = "BERTFLOW_PRECISION";
/// Environment variable naming the STS data folder.
pub const ENV_DATA: &str = bertflow_eval::DATA_ENV;
/// The pooling used when none is asked for and nothing else decides (see
/// `pipeline::resolve_pooling`).
pub const POOLING: bertflow_encoder::Pooling = bertflow_encoder::Pooling::LastAvg;
/// Sentences per forward pass.
pub const BATCH_SIZE: usize = 32;
/// Whether a reranker cuts a query and text longer than its token limit
/// (`bertflow rerank`, `bertflow.Reranker`); without, they are an error.
pub const RERANK_TRUNCATE: bool = true;
/// Whether a reranker's scores are its raw logits rather than their sigmoid.
pub const RERANK_RAW_SCORES: bool = false;
/// The seed of every sample drawn from a fit corpus (`--sample`, Spark's
/// `sample_size`) when the calibrator has no seed of its own.
pub const SAMPLE_SEED: u64 = 42;

static ANCHORS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Adds a place bertflow is installed at (the Python package's folder), above
/// which default paths are looked for.
pub fn add_anchor(dir: impl Into<PathBuf>) {
    let mut a = ANCHORS.lock().unwrap_or_else(|p| p.into_inner());
    let dir = dir.into();
    if !a.contains(&dir) {
        a.push(dir);
    }
}

/// `rel` as given when it exists from the working directory; else the first
/// `ANCESTOR/rel` that exists above the running executable or an anchor; else
/// `rel` as given (so that the error names the path the user would expect).
pub fn locate(rel: &str) -> PathBuf {
    let p = Path::new(rel);
    if p.exists() || p.is_absolute() {
        return p.to_path_buf();
    }
    let mut starts: Vec<PathBuf> = std::env::current_exe().ok().into_iter().collect();
    starts.extend(
        ANCHORS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned(),
    );
    for start in starts {
        for dir in start.ancestors().skip(1) {
            let candidate = dir.join(rel);
            if candidate.exists() {
                return candidate;
            }
        }
    }
    p.to_path_buf()
}

/// A non-empty environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The model: `$BERTFLOW_MODEL`, else [`MODEL_DIR`] found by [`locate`].
pub fn model() -> String {
    env(ENV_MODEL).unwrap_or_else(|| locate(MODEL_DIR).to_string_lossy().into_owned())
}

/// The folder the default model lives in.
pub const MODELS_DIR: &str = "models";

/// `e` with, for a model that is not found, what the models folder holds
/// (found as the default model is) and, only when the default model itself
/// is missing, how to get it.
pub fn explain_missing_model(e: bertflow_encoder::EncoderError) -> bertflow_encoder::EncoderError {
    let bertflow_encoder::EncoderError::ModelNotFound { what, hint } = e else {
        return e;
    };
    let dir = locate(MODELS_DIR);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|d| d.path().is_dir())
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut hint = hint;
    if !names.is_empty() {
        let listed: Vec<String> = names.iter().map(|n| format!("{MODELS_DIR}/{n}")).collect();
        hint.push_str(&format!(" {} holds: {}.", dir.display(), listed.join(", ")));
    }
    if !locate(MODEL_DIR).join("config.json").is_file() {
        hint.push_str(&format!(
            " The default model {MODEL_DIR} is missing: run scripts/setup.sh, which unpacks it."
        ));
    }
    bertflow_encoder::EncoderError::ModelNotFound { what, hint }
}

/// The precision when none is given: `$BERTFLOW_PRECISION`, else fp32; an
/// error names the setting when the variable is not a precision.
pub fn precision() -> crate::Result<bertflow_encoder::Precision> {
    match env(ENV_PRECISION) {
        None => Ok(bertflow_encoder::Precision::default()),
        Some(v) => v.trim().parse().map_err(|_| {
            crate::CoreError::setting(
                "precision",
                format!(
                    "${ENV_PRECISION} is {v:?}; valid: {}",
                    bertflow_encoder::Precision::NAMES.join(", ")
                ),
            )
        }),
    }
}

/// Worker threads: `given`, else `$BERTFLOW_THREADS`, else `None` (every
/// core); an error names the setting when it is not a whole number >= 1.
pub fn threads(given: Option<usize>) -> crate::Result<Option<usize>> {
    let (n, from) = match given {
        Some(n) => (n, "given"),
        None => match env(ENV_THREADS) {
            None => return Ok(None),
            Some(v) => (
                v.trim().parse::<usize>().map_err(|_| {
                    crate::CoreError::setting(
                        "threads",
                        format!("${ENV_THREADS} is {v:?}, not a whole number"),
                    )
                })?,
                ENV_THREADS,
            ),
        },
    };
    if n == 0 {
        return Err(crate::CoreError::setting(
            "threads",
            format!("must be at least 1, got 0 ({from})"),
        ));
    }
    Ok(Some(n))
}

/// The STS data folder: `given`, else `$BERTFLOW_DATA`, else
/// `../shared/data/sts` found by [`locate`].
pub fn data_dir(given: Option<&Path>) -> PathBuf {
    match given {
        Some(p) => p.to_path_buf(),
        None => match env(ENV_DATA) {
            Some(v) => PathBuf::from(v),
            None => locate(bertflow_eval::DEFAULT_DATA_DIR),
        },
    }
}

/// The defaults as data (for the Python signatures and `bertflow.defaults()`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Defaults {
    pub model: String,
    /// The default model's folder, relative ([`MODEL_DIR`]; `model` is where
    /// it was found).
    pub model_dir: &'static str,
    pub pooling: String,
    pub precision: String,
    pub weighting: String,
    pub batch_size: usize,
    pub sample_seed: u64,
    pub data: PathBuf,
    pub env: Vec<&'static str>,
}

/// Every default, resolved now.
pub fn defaults() -> Defaults {
    Defaults {
        model: model(),
        model_dir: MODEL_DIR,
        pooling: POOLING.to_string(),
        precision: precision().unwrap_or_default().to_string(),
        weighting: crate::runtime::weighting::Weighting::default().label(),
        batch_size: BATCH_SIZE,
        sample_seed: SAMPLE_SEED,
        data: data_dir(None),
        env: vec![
            ENV_MODEL,
            ENV_THREADS,
            ENV_DATA,
            "BERTFLOW_CACHE",
            ENV_PRECISION,
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_finds_a_path_above_an_anchor() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(dir.path().join("a/models/x")).unwrap();
        assert_eq!(
            locate("models/x-not-here"),
            PathBuf::from("models/x-not-here")
        );
        add_anchor(&deep);
        assert_eq!(locate("models/x"), dir.path().join("a/models/x"));
    }

    #[test]
    fn zero_threads_is_an_error_naming_the_setting() {
        let e = threads(Some(0)).unwrap_err();
        assert!(
            matches!(
                e,
                crate::CoreError::Setting {
                    field: "threads",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(threads(Some(3)).unwrap(), Some(3));
    }
}
