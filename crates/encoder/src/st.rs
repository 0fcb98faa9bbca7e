//! The `st` pooling: what `SentenceTransformer(dir).encode(texts)` returns for a
//! sentence-transformers directory.
//!
//! [`StSpec::read`] parses the directory: `modules.json` in order; the
//! `Transformer` module (its truncation: `sentence_bert_config.json`'s
//! `max_seq_length`, else the tokenizer's `model_max_length`, capped at the
//! position limit; `do_lower_case`); `Pooling` (`pooling_mode` or the old
//! `pooling_mode_*_tokens` flags, several modes concatenated in the order
//! sentence-transformers uses); `Dense` (`linear.weight`/`linear.bias` from
//! `model.safetensors` or `pytorch_model.bin`, identity or tanh);
//! `Normalize`; and bertflow's own module `bertflow.st.Calibrator` (its
//! `config.json`: `source`, pooling from the hidden states, and `calibrator`, a
//! calibrator file). Malformed files are errors naming the file.
//!
//! This crate does not read calibrator files: [`StSpec::head`] takes a loader
//! for them (bertflow-core passes one). The result, an [`StHead`], is what
//! [`crate::PoolSource::St`] carries into the forward pass: [`StHead::pool`]
//! runs the whole pipeline on a batch's hidden states.
use crate::error::{io_err, EncoderError, Result};
use crate::pooling::{masked_mean, PoolSource};
use candle_core::{DType, Device, Tensor};
use ndarray::{Array2, ArrayView2};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A row-wise map applied inside the pipeline (bertflow's calibrator module).
pub trait VectorMap: Send + Sync {
    fn input_dim(&self) -> usize;
    fn output_dim(&self) -> usize;
    /// Maps every row of `x` (`n x input_dim`) to `n x output_dim`.
    fn apply(&self, x: ArrayView2<f32>) -> std::result::Result<Array2<f32>, String>;
}

/// Loads bertflow's calibrator file for the `bertflow.st.Calibrator` module.
pub type CalibratorLoader<'a> =
    &'a dyn Fn(&Path) -> std::result::Result<Arc<dyn VectorMap>, String>;

/// sentence-transformers' pooling modes, in the order it concatenates the
/// legacy flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Cls,
    Max,
    Mean,
    MeanSqrtLen,
    WeightedMean,
    LastToken,
}

const LEGACY_MODES: [(&str, Mode); 6] = [
    ("pooling_mode_cls_token", Mode::Cls),
    ("pooling_mode_max_tokens", Mode::Max),
    ("pooling_mode_mean_tokens", Mode::Mean),
    ("pooling_mode_mean_sqrt_len_tokens", Mode::MeanSqrtLen),
    ("pooling_mode_weightedmean_tokens", Mode::WeightedMean),
    ("pooling_mode_lasttoken", Mode::LastToken),
];

impl Mode {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "cls" => Mode::Cls,
            "max" => Mode::Max,
            "mean" => Mode::Mean,
            "mean_sqrt_len_tokens" => Mode::MeanSqrtLen,
            "weightedmean" => Mode::WeightedMean,
            "lasttoken" => Mode::LastToken,
            _ => return None,
        })
    }
}

/// A `Dense` module: `y = act(W x + b)`, `W` is `out x in`, row-major.
#[derive(Debug, Clone)]
pub struct Dense {
    pub in_features: usize,
    pub out_features: usize,
    pub weight: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    pub tanh: bool,
}

impl Dense {
    /// Applies the layer to `rows` (each `in_features` long, concatenated).
    pub fn apply(&self, rows: &[f32]) -> Vec<f32> {
        let (din, dout) = (self.in_features, self.out_features);
        let mut out = Vec::with_capacity(rows.len() / din * dout);
        for x in rows.chunks_exact(din) {
            for o in 0..dout {
                let w = &self.weight[o * din..(o + 1) * din];
                let mut acc = self.bias.as_ref().map_or(0.0, |b| b[o]);
                acc += w.iter().zip(x).map(|(a, b)| a * b).sum::<f32>();
                out.push(if self.tanh { acc.tanh() } else { acc });
            }
        }
        out
    }
}

/// `x / max(|x|, 1e-12)` for every row of width `d` (torch's `F.normalize`).
pub fn normalize_rows(rows: &mut [f32], d: usize) {
    for x in rows.chunks_exact_mut(d) {
        let norm = x.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
        x.iter_mut().for_each(|v| *v /= norm);
    }
}

/// One step of the pipeline after the transformer.
#[derive(Clone)]
pub enum Step {
    /// sentence-transformers' `Pooling` on the last hidden state.
    Pool(Vec<Mode>),
    /// bertflow's module pooling from the hidden states (`{"mean": [..]}`, `{"cls": n}`).
    Source(PoolSource),
    Dense(Dense),
    Normalize,
    /// bertflow's module's calibrator file (resolved by [`StSpec::head`]).
    Calibrator(PathBuf),
    /// The same, loaded.
    Map(Arc<dyn VectorMap>),
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Pool(m) => write!(f, "Pool({m:?})"),
            Step::Source(s) => write!(f, "Source({})", s.key()),
            Step::Dense(d) => write!(
                f,
                "Dense({}->{}, bias {}, {})",
                d.in_features,
                d.out_features,
                d.bias.is_some(),
                if d.tanh { "tanh" } else { "identity" }
            ),
            Step::Normalize => f.write_str("Normalize"),
            Step::Calibrator(p) => write!(f, "Calibrator({})", p.display()),
            Step::Map(m) => write!(f, "Map({}->{})", m.input_dim(), m.output_dim()),
        }
    }
}

/// A parsed sentence-transformers directory.
#[derive(Debug, Clone)]
pub struct StSpec {
    /// The directory holding `modules.json`.
    pub root: PathBuf,
    /// Truncation in tokens, special tokens included (`None`: the position limit).
    pub max_seq_length: Option<usize>,
    /// Lowercase the text before tokenising (`do_lower_case`).
    pub lowercase: bool,
    pub steps: Vec<Step>,
}

fn bad(path: &Path, msg: impl Into<String>) -> EncoderError {
    EncoderError::BadFile {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    serde_json::from_str(&text).map_err(|e| bad(path, e.to_string()))
}

/// `v[key]` as a usize, or an error naming `path`.
fn get_usize(v: &Value, key: &str, path: &Path) -> Result<usize> {
    v.get(key)
        .and_then(Value::as_u64)
        .map(|x| x as usize)
        .ok_or_else(|| bad(path, format!("`{key}` must be a non-negative integer")))
}

fn get_bool(v: &Value, key: &str, default: bool, path: &Path) -> Result<bool> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(path, format!("`{key}` must be true or false"))),
    }
}

/// Refuse `module_input_name`/`module_output_name` other than the sentence embedding.
fn check_io_names(v: &Value, path: &Path) -> Result<()> {
    for key in ["module_input_name", "module_output_name"] {
        match v.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s == "sentence_embedding" => {}
            Some(other) => {
                return Err(bad(
                    path,
                    format!("`{key}` {other} is not supported (only \"sentence_embedding\")"),
                ))
            }
        }
    }
    Ok(())
}

impl StSpec {
    /// Parses the sentence-transformers directory `root` for a model with
    /// `hidden` dimensions, `layers` transformer layers and `positions` positions.
    pub fn read(root: &Path, hidden: usize, layers: usize, positions: usize) -> Result<Self> {
        let modules_path = root.join("modules.json");
        if !modules_path.is_file() {
            return Err(EncoderError::Unsupported(format!(
                "pooling 'st' needs a sentence-transformers directory, and {} has no modules.json",
                root.display()
            )));
        }
        let modules = read_json(&modules_path)?;
        let modules = modules
            .as_array()
            .ok_or_else(|| bad(&modules_path, "expected a JSON list of modules"))?;
        check_prompts(root)?;
        let mut spec = StSpec {
            root: root.to_path_buf(),
            max_seq_length: None,
            lowercase: false,
            steps: Vec::new(),
        };
        // Whether a sentence vector exists yet, and its width (None after a
        // calibrator: known once the file is loaded, checked by `head`).
        let mut pooled = false;
        let mut dim: Option<usize> = None;
        for (i, m) in modules.iter().enumerate() {
            let ty = m
                .get("type")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(&modules_path, format!("module {i} has no string `type`")))?;
            let sub = m.get("path").and_then(Value::as_str).unwrap_or("");
            if sub.split(['/', '\\']).any(|c| c == "..") || Path::new(sub).is_absolute() {
                return Err(bad(
                    &modules_path,
                    format!("module path {sub:?} leaves the directory"),
                ));
            }
            let dir = root.join(sub);
            let kind = ty.rsplit('.').next().unwrap_or(ty);
            let need_pooled = |pooled: bool, what: &str| -> Result<()> {
                if pooled {
                    Ok(())
                } else {
                    Err(bad(
                        &modules_path,
                        format!("{what} (module {i}) comes before any pooling"),
                    ))
                }
            };
            if i == 0 {
                if kind != "Transformer" {
                    return Err(bad(
                        &modules_path,
                        format!("the first module is {ty}, not a Transformer"),
                    ));
                }
                spec.read_transformer(&dir, positions)?;
                continue;
            }
            let st_module = ty.starts_with("sentence_transformers.");
            match kind {
                _ if ty == "bertflow.st.Calibrator" => {
                    let path = dir.join("config.json");
                    let cfg = read_json(&path)?;
                    if !cfg.is_object() {
                        return Err(bad(&path, "expected a JSON object"));
                    }
                    if let Some(src) = cfg.get("source").filter(|v| !v.is_null()) {
                        spec.steps
                            .push(Step::Source(parse_source(src, layers, &path)?));
                        pooled = true;
                        dim = Some(hidden);
                    }
                    match cfg.get("calibrator") {
                        None | Some(Value::Null) => {}
                        Some(Value::String(file)) => {
                            need_pooled(pooled, "bertflow's calibrator")?;
                            if file.is_empty()
                                || file.contains(['/', '\\'])
                                || file == ".."
                                || file == "."
                            {
                                return Err(bad(
                                    &path,
                                    format!("`calibrator` {file:?} must be a file name"),
                                ));
                            }
                            spec.steps.push(Step::Calibrator(dir.join(file)));
                            dim = None;
                        }
                        Some(_) => {
                            return Err(bad(&path, "`calibrator` must be a file name or null"))
                        }
                    }
                }
                "Pooling" if st_module => {
                    let modes = read_pooling(&dir.join("config.json"), hidden)?;
                    pooled = true;
                    dim = Some(modes.len() * hidden);
                    spec.steps.push(Step::Pool(modes));
                }
                "Dense" if st_module => {
                    need_pooled(pooled, "Dense")?;
                    let d = read_dense(&dir, dim)?;
                    dim = Some(d.out_features);
                    spec.steps.push(Step::Dense(d));
                }
                "Normalize" if st_module => {
                    need_pooled(pooled, "Normalize")?;
                    let path = dir.join("config.json");
                    if path.is_file() {
                        check_io_names(&read_json(&path)?, &path)?;
                    }
                    spec.steps.push(Step::Normalize);
                }
                _ => {
                    return Err(bad(
                        &modules_path,
                        format!(
                            "module {i} has type {ty}, which pooling 'st' does not run (it runs \
                             Transformer, Pooling, Dense, Normalize and bertflow.st.Calibrator)"
                        ),
                    ))
                }
            }
        }
        if !spec
            .steps
            .iter()
            .any(|s| matches!(s, Step::Pool(_) | Step::Source(_)))
        {
            return Err(bad(
                &modules_path,
                "no Pooling module (nor bertflow's module with a source): nothing makes a sentence vector",
            ));
        }
        Ok(spec)
    }

    fn read_transformer(&mut self, dir: &Path, positions: usize) -> Result<()> {
        let path = dir.join("sentence_bert_config.json");
        let mut max = None;
        if path.is_file() {
            let cfg = read_json(&path)?;
            if !cfg.is_object() {
                return Err(bad(&path, "expected a JSON object"));
            }
            if cfg.get("max_seq_length").is_some_and(|v| !v.is_null()) {
                max = Some(get_usize(&cfg, "max_seq_length", &path)?);
            }
            self.lowercase = get_bool(&cfg, "do_lower_case", false, &path)?;
        }
        if max.is_none() {
            // sentence-transformers 6 keeps the truncation in the tokenizer's config.
            let tc = dir.join("tokenizer_config.json");
            if tc.is_file() {
                let cfg = read_json(&tc)?;
                if let Some(v) = cfg.get("model_max_length").and_then(Value::as_u64) {
                    max = Some((v as usize).min(positions));
                }
            }
        }
        if let Some(m) = max {
            if m < 2 {
                return Err(bad(
                    &path,
                    format!("max_seq_length {m} leaves no room for a token"),
                ));
            }
            self.max_seq_length = Some(m.min(positions));
        }
        Ok(())
    }

    /// The pipeline ready to run on a model of `hidden` dimensions and `layers`
    /// layers truncating at `max_len`, calibrator files loaded with `loader` (an
    /// error names the file when there is one and no loader).
    pub fn head(
        &self,
        hidden: usize,
        layers: usize,
        max_len: usize,
        loader: Option<CalibratorLoader>,
    ) -> Result<StHead> {
        let mut steps = Vec::with_capacity(self.steps.len());
        let mut key = Sha256::new();
        let mut dim = hidden;
        let mut max_layer = 0;
        for step in &self.steps {
            let step = match step {
                Step::Calibrator(path) => {
                    let loader = loader.ok_or_else(|| {
                        EncoderError::Unsupported(format!(
                            "{} holds bertflow's calibrator module ({}): encode it through \
                             bertflow (bertflow_core::st_pipeline), which reads calibrator files",
                            self.root.display(),
                            path.display()
                        ))
                    })?;
                    key.update(std::fs::read(path).map_err(io_err(path))?);
                    let map = loader(path).map_err(|e| bad(path, e))?;
                    if map.input_dim() != dim {
                        return Err(bad(
                            path,
                            format!(
                                "the calibrator takes {} dimensions but its input has {dim}",
                                map.input_dim()
                            ),
                        ));
                    }
                    dim = map.output_dim();
                    Step::Map(map)
                }
                other => other.clone(),
            };
            match &step {
                Step::Pool(modes) => {
                    dim = modes.len() * hidden;
                    max_layer = layers;
                }
                Step::Source(src) => {
                    dim = hidden;
                    max_layer = max_layer.max(src.max_layer());
                }
                Step::Dense(d) => {
                    if d.in_features != dim {
                        return Err(EncoderError::Unsupported(format!(
                            "a Dense module of {} takes {} dimensions but its input has {dim}",
                            self.root.display(),
                            d.in_features
                        )));
                    }
                    dim = d.out_features;
                    key.update(
                        d.weight
                            .iter()
                            .flat_map(|v| v.to_le_bytes())
                            .collect::<Vec<u8>>(),
                    );
                    if let Some(b) = &d.bias {
                        key.update(b.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
                    }
                }
                _ => {}
            }
            key.update(format!("{step:?};").as_bytes());
            steps.push(step);
        }
        let max_len = self.max_seq_length.map_or(max_len, |m| m.min(max_len));
        key.update(format!("max_len={max_len};lower={}", self.lowercase).as_bytes());
        let key: String = key
            .finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(StHead {
            max_len,
            lowercase: self.lowercase,
            steps,
            dim,
            max_layer,
            layers,
            key,
        })
    }
}

/// bertflow's module's `source`: `{"mean": [layers]}` or `{"cls": layer}`.
fn parse_source(v: &Value, layers: usize, path: &Path) -> Result<PoolSource> {
    let layer = |x: &Value| -> Result<usize> {
        let l = x
            .as_u64()
            .ok_or_else(|| bad(path, "`source` layers must be non-negative integers"))?
            as usize;
        if l > layers {
            return Err(bad(
                path,
                format!("`source` layer {l} is out of range (0..={layers})"),
            ));
        }
        Ok(l)
    };
    let obj = v.as_object().filter(|o| o.len() == 1);
    match obj.and_then(|o| o.iter().next()) {
        Some((k, x)) if k == "cls" => Ok(PoolSource::Cls(layer(x)?)),
        Some((k, Value::Array(xs))) if k == "mean" && !xs.is_empty() => {
            let mut v = xs.iter().map(layer).collect::<Result<Vec<_>>>()?;
            v.sort_unstable();
            v.dedup();
            Ok(PoolSource::Mean(v))
        }
        _ => Err(bad(
            path,
            "`source` must be {\"mean\": [layers]} or {\"cls\": layer}",
        )),
    }
}

/// The modes of a `Pooling` config (new `pooling_mode`, or the old flags).
fn read_pooling(path: &Path, hidden: usize) -> Result<Vec<Mode>> {
    let cfg = read_json(path)?;
    if !cfg.is_object() {
        return Err(bad(path, "expected a JSON object"));
    }
    let width = ["embedding_dimension", "word_embedding_dimension"]
        .into_iter()
        .find(|k| cfg.get(*k).is_some());
    if let Some(k) = width {
        let w = get_usize(&cfg, k, path)?;
        if w != hidden {
            return Err(bad(
                path,
                format!("`{k}` is {w} but the transformer outputs {hidden}"),
            ));
        }
    }
    let modes = match cfg.get("pooling_mode") {
        Some(Value::String(s)) => {
            vec![Mode::parse(s).ok_or_else(|| bad(path, format!("unknown pooling_mode {s:?}")))?]
        }
        Some(Value::Array(xs)) if !xs.is_empty() => xs
            .iter()
            .map(|x| {
                x.as_str()
                    .and_then(Mode::parse)
                    .ok_or_else(|| bad(path, format!("unknown pooling_mode {x}")))
            })
            .collect::<Result<Vec<_>>>()?,
        Some(other) => {
            return Err(bad(
                path,
                format!("`pooling_mode` {other} is not a mode or a list of modes"),
            ))
        }
        None => {
            let mut modes = Vec::new();
            for (key, mode) in LEGACY_MODES {
                if get_bool(&cfg, key, false, path)? {
                    modes.push(mode);
                }
            }
            if modes.is_empty() {
                modes.push(Mode::Mean); // sentence-transformers' default
            }
            modes
        }
    };
    // Without prompts (see `check_prompts`) `include_prompt` changes nothing.
    get_bool(&cfg, "include_prompt", true, path)?;
    Ok(modes)
}

/// A `Dense` module's config and weights; `input`: the width it receives, if known.
fn read_dense(dir: &Path, input: Option<usize>) -> Result<Dense> {
    let path = dir.join("config.json");
    let cfg = read_json(&path)?;
    let din = get_usize(&cfg, "in_features", &path)?;
    let dout = get_usize(&cfg, "out_features", &path)?;
    if din == 0 || dout == 0 {
        return Err(bad(
            &path,
            "in_features and out_features must be at least 1",
        ));
    }
    if let Some(have) = input.filter(|&have| have != din) {
        return Err(bad(
            &path,
            format!("in_features is {din} but its input has {have} dimensions"),
        ));
    }
    let bias = get_bool(&cfg, "bias", true, &path)?;
    check_io_names(&cfg, &path)?;
    if get_bool(&cfg, "use_residual", false, &path)? {
        return Err(bad(&path, "`use_residual` is not supported"));
    }
    let tanh = match cfg.get("activation_function") {
        None => true, // sentence-transformers' default
        Some(Value::Null) => false,
        Some(Value::String(s)) => match s.rsplit('.').next() {
            Some("Tanh") if s.starts_with("torch.") => true,
            Some("Identity") if s.starts_with("torch.") => false,
            _ => {
                return Err(bad(
                    &path,
                    format!("activation_function {s:?} is not supported (identity or tanh)"),
                ))
            }
        },
        Some(other) => {
            return Err(bad(
                &path,
                format!("activation_function {other} is not a name"),
            ))
        }
    };
    let (wpath, tensors) = read_tensors(dir)?;
    let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
        let t = tensors
            .get(name)
            .ok_or_else(|| bad(&wpath, format!("no tensor {name}")))?;
        if t.dims() != shape {
            return Err(bad(
                &wpath,
                format!("{name} has shape {:?}, expected {shape:?}", t.dims()),
            ));
        }
        let v: Vec<f32> = t
            .to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1())
            .map_err(|e| bad(&wpath, e.to_string()))?;
        if v.iter().any(|x| !x.is_finite()) {
            return Err(bad(&wpath, format!("{name} holds non-finite values")));
        }
        Ok(v)
    };
    let weight = get("linear.weight", &[dout, din])?;
    let bias = if bias {
        Some(get("linear.bias", &[dout])?)
    } else {
        None
    };
    Ok(Dense {
        in_features: din,
        out_features: dout,
        weight,
        bias,
        tanh,
    })
}

fn read_tensors(dir: &Path) -> Result<(PathBuf, HashMap<String, Tensor>)> {
    let st = dir.join("model.safetensors");
    if st.is_file() {
        let t = candle_core::safetensors::load(&st, &Device::Cpu)
            .map_err(|e| bad(&st, e.to_string()))?;
        return Ok((st, t));
    }
    let bin = dir.join("pytorch_model.bin");
    if bin.is_file() {
        let t = candle_core::pickle::read_all(&bin).map_err(|e| bad(&bin, e.to_string()))?;
        return Ok((bin, t.into_iter().collect()));
    }
    Err(EncoderError::IncompleteModel {
        dir: dir.to_path_buf(),
        missing: "the Dense module's model.safetensors (or pytorch_model.bin)".into(),
    })
}

/// A default prompt would be prepended by `encode`: not supported (an error
/// rather than other vectors).
fn check_prompts(root: &Path) -> Result<()> {
    let path = root.join("config_sentence_transformers.json");
    if !path.is_file() {
        return Ok(());
    }
    let cfg = read_json(&path)?;
    if let Some(name) = cfg.get("default_prompt_name").and_then(Value::as_str) {
        let prompt = cfg
            .get("prompts")
            .and_then(|p| p.get(name))
            .and_then(Value::as_str);
        if prompt.is_some_and(|p| !p.is_empty()) {
            return Err(bad(
                &path,
                format!("default_prompt_name {name:?}: prompts are not supported by pooling 'st'"),
            ));
        }
    }
    Ok(())
}

/// A sentence-transformers pipeline ready to run on hidden states.
pub struct StHead {
    /// Truncation (sentence-transformers' `max_seq_length`, at most the encoder's).
    pub max_len: usize,
    pub lowercase: bool,
    steps: Vec<Step>,
    dim: usize,
    /// Deepest hidden state read.
    max_layer: usize,
    /// The transformer's layers (its last hidden state feeds `Pooling`).
    layers: usize,
    key: String,
}

impl StHead {
    /// Output dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Equal keys give equal vectors (config, weights, calibrator bytes, truncation).
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The deepest hidden state read.
    pub fn max_layer(&self) -> usize {
        self.max_layer
    }
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Runs the pipeline on a batch: `states[l]` is hidden state `l` as
    /// `[batch, t, h]`, `lens` the real tokens of each sentence (right padded).
    pub fn pool(
        &self,
        states: &[Vec<f32>],
        lens: &[usize],
        t: usize,
        h: usize,
    ) -> Result<Vec<f32>> {
        let mut rows: Vec<f32> = Vec::new();
        let mut width = 0;
        for step in &self.steps {
            match step {
                Step::Pool(modes) => {
                    rows = pool_modes(modes, &states[self.layers], lens, t, h);
                    width = modes.len() * h;
                }
                Step::Source(PoolSource::Cls(l)) => {
                    rows = states[*l]
                        .chunks_exact(t * h)
                        .flat_map(|s| &s[..h])
                        .copied()
                        .collect();
                    width = h;
                }
                Step::Source(PoolSource::Mean(ls)) => {
                    let hs: Vec<&[f32]> = ls.iter().map(|&l| states[l].as_slice()).collect();
                    rows = masked_mean(&hs, lens, t, h, None);
                    width = h;
                }
                Step::Source(other) => {
                    return Err(EncoderError::Unsupported(format!(
                        "source {} in an st pipeline",
                        other.key()
                    )))
                }
                Step::Dense(d) => {
                    rows = d.apply(&rows);
                    width = d.out_features;
                }
                Step::Normalize => normalize_rows(&mut rows, width),
                Step::Map(m) => {
                    let x = ArrayView2::from_shape((lens.len(), width), &rows)
                        .map_err(|e| EncoderError::Unsupported(e.to_string()))?;
                    let z = m.apply(x).map_err(EncoderError::Unsupported)?;
                    width = z.ncols();
                    rows = z.iter().copied().collect();
                }
                Step::Calibrator(p) => {
                    return Err(EncoderError::Unsupported(format!(
                        "calibrator {} not loaded",
                        p.display()
                    )))
                }
            }
        }
        Ok(rows)
    }
}

/// sentence-transformers' `Pooling` of `x` (`[batch, t, h]`), modes concatenated.
pub fn pool_modes(modes: &[Mode], x: &[f32], lens: &[usize], t: usize, h: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(lens.len() * modes.len() * h);
    for (b, &len) in lens.iter().enumerate() {
        let tok = |i: usize| &x[(b * t + i) * h..(b * t + i + 1) * h];
        let sum = |weight: &dyn Fn(usize) -> f32| -> Vec<f32> {
            let mut acc = vec![0f32; h];
            for i in 0..len {
                let w = weight(i);
                acc.iter_mut().zip(tok(i)).for_each(|(a, v)| *a += w * v);
            }
            acc
        };
        for mode in modes {
            match mode {
                Mode::Cls => out.extend_from_slice(tok(0)),
                Mode::LastToken => match len {
                    0 => out.extend(vec![0f32; h]),
                    _ => out.extend_from_slice(tok(len - 1)),
                },
                Mode::Max => {
                    let mut m = vec![f32::NEG_INFINITY; h];
                    for i in 0..len {
                        m.iter_mut().zip(tok(i)).for_each(|(a, &v)| *a = a.max(v));
                    }
                    out.extend(m);
                }
                Mode::Mean | Mode::MeanSqrtLen => {
                    let n = (len as f32).max(1e-9);
                    let d = if *mode == Mode::Mean { n } else { n.sqrt() };
                    out.extend(sum(&|_| 1.0).into_iter().map(|v| v / d));
                }
                Mode::WeightedMean => {
                    let total: f32 = (1..=len).map(|i| i as f32).sum::<f32>().max(1e-9);
                    out.extend(sum(&|i| (i + 1) as f32).into_iter().map(|v| v / total));
                }
            }
        }
    }
    out
}

impl fmt::Debug for StHead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StHead")
            .field("key", &self.key)
            .field("max_len", &self.max_len)
            .field("lowercase", &self.lowercase)
            .field("steps", &self.steps)
            .field("dim", &self.dim)
            .finish()
    }
}

impl PartialEq for StHead {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for StHead {}

impl std::hash::Hash for StHead {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key.hash(state)
    }
}
