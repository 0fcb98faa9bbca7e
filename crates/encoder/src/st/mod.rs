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
use crate::token_mean::masked_mean;
use ndarray::{Array2, ArrayView2};
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod prompts;
mod read;
pub use prompts::{StPrompts, PROMPTS_FILE};
use read::bad;

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
                // f64 sums: a whitening's weights and bias are large and cancel.
                let mut acc = self.bias.as_ref().map_or(0.0, |b| b[o] as f64);
                acc += w
                    .iter()
                    .zip(x)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>();
                let acc = acc as f32;
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

/// bertflow's module's source: the hidden states it pools (the subset of
/// [`crate::PoolSource`] an st pipeline accepts, with the same keys).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LayerSource {
    /// The [CLS] vector of hidden state `n`.
    Cls(usize),
    /// Masked token mean of the mean of these hidden states (sorted, deduplicated).
    Mean(Vec<usize>),
}

impl LayerSource {
    /// The deepest hidden state needed.
    pub fn max_layer(&self) -> usize {
        match self {
            LayerSource::Cls(n) => *n,
            LayerSource::Mean(v) => v.iter().copied().max().unwrap_or(0),
        }
    }

    /// The key of the same [`crate::PoolSource`] (`cls@N`, `mean@A,B`).
    pub fn key(&self) -> String {
        match self {
            LayerSource::Cls(n) => format!("cls@{n}"),
            LayerSource::Mean(v) => format!(
                "mean@{}",
                v.iter()
                    .map(|l| l.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

/// One step of the pipeline after the transformer.
#[derive(Clone)]
pub enum Step {
    /// sentence-transformers' `Pooling` on the last hidden state.
    Pool(Vec<Mode>),
    /// bertflow's module pooling from the hidden states (`{"mean": [..]}`, `{"cls": n}`).
    Source(LayerSource),
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
    /// The `Pooling` module's `include_prompt` (default true): false leaves a
    /// prompt's tokens out of the pooled tokens. bertflow-core refuses a
    /// non-empty prompt with pooling `st` then (see `bertflow_core::prompt`).
    pub include_prompt: bool,
    pub steps: Vec<Step>,
}

impl StSpec {
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
            include_prompt: self.include_prompt,
            steps,
            dim,
            max_layer,
            layers,
            key,
        })
    }
}

/// A sentence-transformers pipeline ready to run on hidden states.
pub struct StHead {
    /// Truncation (sentence-transformers' `max_seq_length`, at most the encoder's).
    pub max_len: usize,
    pub lowercase: bool,
    /// The directory's `include_prompt` (see [`StSpec::include_prompt`]).
    pub include_prompt: bool,
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
                Step::Source(LayerSource::Cls(l)) => {
                    rows = states[*l]
                        .chunks_exact(t * h)
                        .flat_map(|s| &s[..h])
                        .copied()
                        .collect();
                    width = h;
                }
                Step::Source(LayerSource::Mean(ls)) => {
                    let hs: Vec<&[f32]> = ls.iter().map(|&l| states[l].as_slice()).collect();
                    rows = masked_mean(&hs, lens, t, h, None);
                    width = h;
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
