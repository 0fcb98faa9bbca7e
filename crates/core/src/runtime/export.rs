//! `bertflow export`: a calibrated model as a sentence-transformers directory,
//! loadable by `SentenceTransformer(dir)` with no bertflow installed.
//!
//! The directory holds the transformer's files (copied), `1_Pooling` (mean or
//! CLS of the last layer), `2_Dense` when a calibrator is given (its closed
//! form `z = x W + b` as a `Dense` module with the identity activation:
//! weight `W^T`, bias `b = -mean W`), `3_Normalize` when asked, and
//! `modules.json`, `sentence_bert_config.json` (the truncation bertflow uses)
//! and `config_sentence_transformers.json`. The whole directory is written
//! beside the target and renamed into place, so it appears complete or not
//! at all.
//!
//! What sentence-transformers' own modules cannot express (the flow, blended
//! soft whitening, multi-layer poolings) goes into a module of bertflow's own,
//! `bertflow.st.Calibrator` (`2_Bertflow`: `config.json` and the calibrator
//! file), which sentence-transformers loads when bertflow is installed. For a
//! multi-layer pooling the transformer's `config.json` gains
//! `output_hidden_states: true` and that module pools from the hidden states.
//! Token weighting and the `pooler` pooling are refused with an error.

use std::path::{Path, PathBuf};

use bertflow_calib::Calibrator;
use bertflow_encoder::{Encoder, PoolSource, Pooling};
use serde_json::json;

use crate::error::{Context, CoreError, Result};
use crate::runtime::calibration::LoadedCalibrator;

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    /// The pooling (unset: the calibrator's, else as
    /// [`crate::runtime::pipeline::resolve_pooling`] decides).
    pub pooling: Option<Pooling>,
    /// An affine calibrator applied after pooling.
    pub calibrator: Option<PathBuf>,
    /// Allow a calibrator fitted on another model or pooling (never another dimension).
    pub allow_mismatch: bool,
    /// Append a `Normalize` module (unit-length output).
    pub normalize: bool,
    /// The directory to create (must not exist, or be empty).
    pub output: PathBuf,
}

/// What was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The modules, in order, as `modules.json` lists them (type names).
    pub modules: Vec<String>,
    /// Output dimension.
    pub dimension: usize,
    /// Files written.
    pub files: usize,
    /// Whether loading it needs bertflow installed (the `bertflow.st.Calibrator` module).
    pub needs_bertflow: bool,
}

/// The type name sentence-transformers imports for bertflow's module.
pub const BERTFLOW_MODULE: &str = "bertflow.st.Calibrator";

fn unsupported(what: String) -> CoreError {
    CoreError::Input(format!(
        "{what} cannot be exported to sentence-transformers (every pooling but `pooler` and \
         every calibrator without token weighting can)"
    ))
}

/// How the exported pipeline pools: sentence-transformers' `Pooling` module
/// (its config), or bertflow's module from the hidden states (its `source`).
enum Pool {
    St(serde_json::Value),
    Bertflow(serde_json::Value),
}

/// The pooling of the export for `pooling` over `enc`.
fn pool(enc: &Encoder, pooling: &Pooling) -> Result<Pool> {
    if *pooling == Pooling::St {
        return Err(unsupported(
            "the pooling st (the directory is already a sentence-transformers pipeline)".into(),
        ));
    }
    let last = enc.num_layers();
    let (cls, mean, last_token) = match enc.source(pooling)? {
        PoolSource::Cls(n) if n == last => (true, false, false),
        PoolSource::Mean(layers) if layers == [last] => (false, true, false),
        PoolSource::LastToken(n) if n == last => (false, false, true),
        PoolSource::Cls(n) => return Ok(Pool::Bertflow(json!({ "cls": n }))),
        PoolSource::Mean(layers) => return Ok(Pool::Bertflow(json!({ "mean": layers }))),
        PoolSource::Pooler(_) | PoolSource::St(_) | PoolSource::LastToken(_) => {
            return Err(unsupported(format!("the pooling {pooling}")))
        }
    };
    Ok(Pool::St(json!({
        "word_embedding_dimension": enc.dim(),
        "pooling_mode_cls_token": cls,
        "pooling_mode_mean_tokens": mean,
        "pooling_mode_max_tokens": false,
        "pooling_mode_mean_sqrt_len_tokens": false,
        "pooling_mode_weightedmean_tokens": false,
        "pooling_mode_lasttoken": last_token,
        "include_prompt": true
    })))
}

/// `2_Dense/model.safetensors` for `z = x W + b`: `linear.weight` (out x in)
/// and `linear.bias`, float32.
fn dense_weights(affine: &bertflow_calib::Affine) -> Result<Vec<u8>> {
    let (din, dout) = affine.weight.dim();
    let weight: Vec<u8> = affine
        .weight
        .t()
        .iter()
        .flat_map(|&v| (v as f32).to_le_bytes())
        .collect();
    let bias: Vec<u8> = affine
        .bias
        .iter()
        .flat_map(|&v| (v as f32).to_le_bytes())
        .collect();
    fn f32_view(
        shape: Vec<usize>,
        data: &[u8],
    ) -> std::result::Result<safetensors::tensor::TensorView<'_>, safetensors::SafeTensorError>
    {
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, data)
    }
    Ok(safetensors::tensor::serialize(
        [
            ("linear.weight", f32_view(vec![dout, din], &weight)?),
            ("linear.bias", f32_view(vec![dout], &bias)?),
        ],
        None,
    )?)
}

/// Files of the model directory that are the transformer's (not a
/// sentence-transformers pipeline's, which the export writes anew).
fn transformer_files(dir: &Path) -> Result<Vec<PathBuf>> {
    const PIPELINE: [&str; 4] = [
        "modules.json",
        "config_sentence_transformers.json",
        "sentence_bert_config.json",
        "README.md",
    ];
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(CoreError::io("read", dir))? {
        let entry = entry.map_err(CoreError::io("read", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && !name.starts_with('.') && !PIPELINE.contains(&name.as_str()) {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// A temporary directory beside `target`, renamed over it once complete.
fn staging_dir(target: &Path) -> Result<tempfile::TempDir> {
    if target.exists() {
        let empty = std::fs::read_dir(target)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false);
        if !empty {
            return Err(CoreError::setting(
                "output",
                format!(
                    "{} exists and is not empty: remove it or choose another directory",
                    target.display()
                ),
            ));
        }
    }
    let parent = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(target.file_name().unwrap_or_default());
    prefix.push(".");
    tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".partial")
        .tempdir_in(parent)
        .map_err(CoreError::io("create a directory in", parent))
}

/// Write the sentence-transformers directory for `enc` (see the module docs).
pub fn export_st(enc: &Encoder, cfg: &ExportConfig) -> Result<Exported> {
    let calibrator = cfg
        .calibrator
        .as_deref()
        .map(|p| LoadedCalibrator::open(p, cfg.allow_mismatch))
        .transpose()?;
    let chosen = crate::runtime::pipeline::resolve_pooling(
        enc,
        cfg.pooling.as_ref(),
        calibrator.as_ref(),
        cfg.allow_mismatch,
        &crate::Silent,
    )?;
    let pooling = pool(enc, &chosen)?;
    // The directory keeps the model's prompts: its default one is what the
    // calibrator must have been fitted with.
    let prompts = bertflow_encoder::st::StPrompts::of_model(enc.files())?;
    let default_prompt =
        crate::runtime::prompt::resolve(&prompts, &Default::default(), enc.model_id())?;
    let dense = match &calibrator {
        None => None,
        Some(c) => {
            c.check(enc, &chosen, default_prompt.as_ref(), &crate::Silent)?;
            if c.meta.weighting.is_some() {
                return Err(unsupported(format!(
                    "the calibrator {} was fitted with token weighting",
                    c.path.display()
                )));
            }
            c.fitted.affine()
        }
    };
    let calibrator_bytes = match (&calibrator, &dense) {
        (Some(c), None) => Some(std::fs::read(&c.path).map_err(CoreError::io("read", &c.path))?),
        _ => None,
    };
    let module_source = match &pooling {
        Pool::St(_) => None,
        Pool::Bertflow(source) => Some(source.clone()),
    };
    let needs_bertflow = calibrator_bytes.is_some() || module_source.is_some();
    let stage = staging_dir(&cfg.output)?;
    let dir = stage.path();
    let write = |rel: &str, bytes: Vec<u8>| -> Result<()> {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(CoreError::io("create", parent))?;
        }
        Ok(bertflow_durable::write(&path, bytes)?)
    };
    let to_json = |v: serde_json::Value| serde_json::to_vec_pretty(&v).unwrap_or_default();
    let mut files = 0;
    for src in transformer_files(&enc.files().dir)? {
        let name = src
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let mut bytes = std::fs::read(&src).map_err(CoreError::io("read", &src))?;
        if name == "config.json" && module_source.is_some() {
            // bertflow's module pools from the hidden states of every layer.
            let mut config: serde_json::Value = serde_json::from_slice(&bytes)?;
            config["output_hidden_states"] = json!(true);
            bytes = to_json(config);
        }
        write(&name, bytes)?;
        files += 1;
    }
    let mut modules = vec![("", "sentence_transformers.models.Transformer")];
    if let Pool::St(config) = pooling {
        write("1_Pooling/config.json", to_json(config))?;
        modules.push(("1_Pooling", "sentence_transformers.models.Pooling"));
        files += 1;
    }
    let mut dimension = enc.dim();
    if needs_bertflow {
        let file = calibrator_bytes.as_ref().map(|_| "calibrator.safetensors");
        write(
            "2_Bertflow/config.json",
            to_json(json!({ "source": module_source, "calibrator": file })),
        )?;
        if let (Some(bytes), Some(c)) = (calibrator_bytes, &calibrator) {
            write("2_Bertflow/calibrator.safetensors", bytes)?;
            dimension = c.fitted.output_dim();
            files += 1;
        }
        modules.push(("2_Bertflow", BERTFLOW_MODULE));
        files += 1;
    }
    if let Some(affine) = &dense {
        let (din, dout) = affine.weight.dim();
        write(
            "2_Dense/config.json",
            to_json(json!({
                "in_features": din,
                "out_features": dout,
                "bias": true,
                "activation_function": "torch.nn.modules.linear.Identity"
            })),
        )?;
        write("2_Dense/model.safetensors", dense_weights(affine)?)?;
        modules.push(("2_Dense", "sentence_transformers.models.Dense"));
        dimension = dout;
        files += 2;
    }
    if cfg.normalize {
        let path = dir.join("3_Normalize");
        std::fs::create_dir_all(&path).map_err(CoreError::io("create", &path))?;
        modules.push(("3_Normalize", "sentence_transformers.models.Normalize"));
    }
    let listed: Vec<serde_json::Value> = modules
        .iter()
        .enumerate()
        .map(|(i, (path, kind))| json!({"idx": i, "name": i.to_string(), "path": path, "type": kind}))
        .collect();
    write("modules.json", to_json(json!(listed)))?;
    write(
        "sentence_bert_config.json",
        to_json(json!({"max_seq_length": enc.max_len(), "do_lower_case": false})),
    )?;
    write(
        "config_sentence_transformers.json",
        to_json(json!({
            "__version__": {"bertflow": env!("CARGO_PKG_VERSION")},
            "prompts": prompts
                .prompts
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect::<serde_json::Map<_, _>>(),
            "default_prompt_name": prompts.default_prompt_name,
            "similarity_fn_name": "cosine"
        })),
    )?;
    files += 3;
    let stage = stage.keep();
    if cfg.output.exists() {
        std::fs::remove_dir(&cfg.output).map_err(CoreError::io("replace", &cfg.output))?;
    }
    bertflow_durable::rename(&stage, &cfg.output)
        .with_context(|| format!("cannot move the export into {}", cfg.output.display()))?;
    Ok(Exported {
        modules: modules.iter().map(|(_, kind)| kind.to_string()).collect(),
        dimension,
        files,
        needs_bertflow,
    })
}
