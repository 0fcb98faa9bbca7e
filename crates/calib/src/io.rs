//! Saving and loading fitted calibrators: one `.safetensors` file each, the
//! parameters as tensors and, under the `__metadata__` key
//! [`METADATA_KEY`], a JSON header: `{"format": "bertflow-calibrator",
//! "format_version": 1, "meta": CalibratorMeta, "calibrator": <the fitted
//! calibrator's kind, hyper-parameters and dimensions>}`.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use safetensors::tensor::{SafeTensors, TensorView};
use serde::{Deserialize, Serialize};

use crate::error::{CalibError, Result};
use crate::tensors::{TensorReader, TensorWriter};
use crate::{Calibrator, Fitted};

/// Version of the file layout written by this crate for a calibrator alone.
pub const FORMAT_VERSION: u32 = 1;
/// Version written for a file that ends in a quantizer stage (older
/// readers refuse it by its version instead of misreading it).
pub const QUANTIZED_FORMAT_VERSION: u32 = 2;
/// The `__metadata__` key holding the JSON header.
pub const METADATA_KEY: &str = "bertflow_calibrator";
/// Field of the JSON header holding the tensors' checksum: the CRC-32, 8 hex
/// digits, over every tensor in name order (its name, then its data bytes).
/// Checked at load; files written before it existed have none and still load.
pub const CHECKSUM_FIELD: &str = "tensors_crc32";
/// Most bytes of a calibrator file's safetensors header (its JSON).
const MAX_HEADER_BYTES: u64 = 64 << 20;
/// Most bytes of a calibrator file (a whitening of 16,384 dimensions in f64
/// is 2 GiB).
const MAX_FILE_BYTES: u64 = 4 << 30;

/// CRC-32 over `(name, bytes)` pairs in name order.
fn tensors_crc32<'a>(tensors: impl Iterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut sorted: Vec<_> = tensors.collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut hasher = crc32fast::Hasher::new();
    for (name, bytes) in sorted {
        hasher.update(name.as_bytes());
        hasher.update(bytes);
    }
    format!("{:08x}", hasher.finalize())
}
const FORMAT_NAME: &str = "bertflow-calibrator";

/// Where a calibrator comes from; filled by the caller, stored in the file.
/// A key this build does not know (a misspelt `quantizer` would silently drop
/// the quantizer) is an error naming it: fields are only ever added, each
/// optional with a default, so every older file still reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibratorMeta {
    /// Identity of the embedding model (name, path or hash).
    pub model: String,
    /// Pooling used to build the embeddings (e.g. "mean", "cls", "first-last-avg").
    pub pooling: String,
    /// Embedding dimension the calibrator was fitted on.
    pub input_dim: usize,
    /// Number of sentences in the fit corpus.
    pub fit_corpus_size: usize,
    /// Seed used to fit (flows), if any.
    pub seed: Option<u64>,
    /// Version of bertflow that wrote the file.
    pub bertflow_version: String,
    /// File format version; `save` always writes [`FORMAT_VERSION`].
    pub format_version: u32,
    /// Set when the calibrator was fitted on embeddings from outside bertflow (a
    /// `.npy` or `.safetensors` of vectors, a NumPy array): then `model` is
    /// `external:<label>@<fingerprint>` and `pooling` is [`EXTERNAL_POOLING`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalInput>,
    /// Set when the calibrator (a flow) was fitted on a seeded sample: the number
    /// of rows the `fit_corpus_size` sample rows were drawn from. Absent in
    /// files fitted on every row (and in files written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_from: Option<usize>,
    /// The token weighting of the averaged poolings the calibrator was fitted
    /// on (absent: the plain mean). The per-token weights are stored in the
    /// file as the tensor [`WEIGHTING_TENSOR`], so the same weighting is
    /// applied wherever the calibrator is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weighting: Option<WeightingMeta>,
    /// What the fit warned about (too few rows for the dimensions, a flow whose
    /// NLL got worse): kept in the file so that whoever uses it can see it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The quantizer stage the file ends in, applied to the calibrator's
    /// output (its scales and rotation are tensors named `quantizer.*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantizer: Option<crate::Quantizer>,
    /// The prompt prepended to every sentence of the fit (its text; absent:
    /// none, as in files written before prompts existed): vectors made with
    /// another prompt are refused like another pooling
    /// ([`crate::check_compatible_prompted`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

/// The tensor holding [`WeightingMeta::weights`] in a calibrator file.
pub const WEIGHTING_TENSOR: &str = "weighting.token_weights";

/// A token weighting as recorded in a calibrator file (see
/// `bertflow_encoder::weighting`; this crate does not depend on it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightingMeta {
    /// The weighting spec, e.g. `usif` or `sif:a=0.001,special=drop,punct=drop`.
    pub spec: String,
    /// Where the word-piece frequencies came from (e.g. `fit corpus`, a file name).
    pub counts_from: String,
    /// The weighting's key: a hash of its spec and every weight.
    pub key: String,
    /// The weight of a token id beyond the end of `weights`.
    pub unseen: f32,
    /// uSIF's `a`, when the scheme is usif.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usif_a: Option<f64>,
    /// Weight per token id (in the file's tensors, not its JSON header).
    #[serde(skip)]
    pub weights: Vec<f32>,
}

/// The `pooling` recorded for calibrators fitted on external embeddings.
pub const EXTERNAL_POOLING: &str = "external";

/// Where external embeddings came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalInput {
    /// A user's label for the source (e.g. "text-embedding-3-small"), if given.
    pub label: Option<String>,
    /// A SHA-256 prefix of the input's shape and bytes.
    pub fingerprint: String,
}

impl CalibratorMeta {
    /// Metadata with this crate's version and format version and no seed.
    pub fn new(
        model: impl Into<String>,
        pooling: impl Into<String>,
        input_dim: usize,
        fit_corpus_size: usize,
    ) -> Self {
        CalibratorMeta {
            model: model.into(),
            pooling: pooling.into(),
            input_dim,
            fit_corpus_size,
            seed: None,
            bertflow_version: env!("CARGO_PKG_VERSION").to_string(),
            format_version: FORMAT_VERSION,
            external: None,
            weighting: None,
            sampled_from: None,
            warnings: Vec::new(),
            quantizer: None,
            prompt: None,
        }
    }

    /// Metadata for a calibrator fitted on external embeddings (vectors from any
    /// source): the model identity is `external:<label>@<fingerprint>`.
    pub fn external(
        label: Option<String>,
        fingerprint: impl Into<String>,
        input_dim: usize,
        fit_corpus_size: usize,
    ) -> Self {
        let fingerprint = fingerprint.into();
        let name = label.clone().unwrap_or_else(|| "embeddings".to_string());
        let mut meta = Self::new(
            format!("external:{name}@{fingerprint}"),
            EXTERNAL_POOLING,
            input_dim,
            fit_corpus_size,
        );
        meta.external = Some(ExternalInput { label, fingerprint });
        meta
    }

    /// The same metadata with another source of the fit embeddings: a model
    /// identity and pooling (`Some`), or external embeddings with `label`
    /// (`None`; the input fingerprint is kept, `unknown` if there was none).
    pub fn with_source(&self, model: Option<(String, String)>, label: Option<String>) -> Self {
        let mut meta = match model {
            Some((identity, pooling)) => {
                let mut m = Self::new(identity, pooling, self.input_dim, self.fit_corpus_size);
                m.external = None;
                m.prompt = self.prompt.clone();
                m
            }
            None => {
                let fp = self.external.as_ref().map(|e| e.fingerprint.clone());
                let label = label.filter(|l| !l.is_empty());
                let fp = fp.unwrap_or_else(|| "unknown".to_string());
                Self::external(label, fp, self.input_dim, self.fit_corpus_size)
            }
        };
        meta.seed = self.seed;
        meta.sampled_from = self.sampled_from;
        meta.warnings = self.warnings.clone();
        meta.quantizer = self.quantizer.clone();
        meta
    }

    /// Whether the calibrator was fitted on external embeddings.
    pub fn is_external(&self) -> bool {
        self.external.is_some()
    }

    /// Sets the seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Records that the fit used a sample of `fit_corpus_size` rows drawn from
    /// `total` rows.
    pub fn with_sampled_from(mut self, total: usize) -> Self {
        self.sampled_from = Some(total);
        self
    }
}

#[derive(Serialize)]
struct FileHeaderRef<'a> {
    format: &'a str,
    format_version: u32,
    meta: &'a CalibratorMeta,
    calibrator: &'a Fitted,
    /// See [`CHECKSUM_FIELD`].
    tensors_crc32: String,
}

#[derive(Deserialize)]
struct FileHeader {
    meta: CalibratorMeta,
    calibrator: Fitted,
}

/// The format version of a file with `meta`'s quantizer stage (if any)
/// after a calibrator of output dimension `out_dim`; an error when the
/// stage takes another dimension, or the version recorded in `meta` is too
/// old for a stage.
fn check_stage(meta: &CalibratorMeta, out_dim: usize) -> Result<u32> {
    let Some(q) = &meta.quantizer else {
        return Ok(FORMAT_VERSION);
    };
    if q.dim != out_dim {
        return Err(CalibError::Meta(format!(
            "the quantizer takes {} dimensions, the calibrator gives {out_dim}",
            q.dim
        )));
    }
    Ok(QUANTIZED_FORMAT_VERSION)
}

/// Serialises a fitted calibrator and its metadata to safetensors bytes.
pub(crate) fn to_bytes(fitted: &Fitted, meta: &CalibratorMeta) -> Result<Vec<u8>> {
    if meta.input_dim != fitted.input_dim() {
        return Err(CalibError::Meta(format!(
            "meta.input_dim is {} but the calibrator takes {} dimensions",
            meta.input_dim,
            fitted.input_dim()
        )));
    }
    let mut meta = meta.clone();
    let version = check_stage(&meta, fitted.output_dim())?;
    meta.format_version = version;
    let mut w = TensorWriter::default();
    fitted.write_tensors(&mut w);
    if let Some(q) = &meta.quantizer {
        q.write_tensors(&mut w);
    }
    if let Some(wm) = &meta.weighting {
        if wm.weights.is_empty() || wm.weights.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(CalibError::Meta(
                "the token weighting needs finite, non-negative weights".into(),
            ));
        }
        w.f32(
            WEIGHTING_TENSOR,
            &[wm.weights.len()],
            wm.weights.iter().copied(),
        );
    }
    let views = w
        .tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            TensorView::new(*dtype, shape.clone(), bytes).map(|v| (name.clone(), v))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| CalibError::Meta(format!("cannot build tensors: {e}")))?;
    let header = FileHeaderRef {
        format: FORMAT_NAME,
        format_version: version,
        meta: &meta,
        calibrator: fitted,
        tensors_crc32: tensors_crc32(
            w.tensors
                .iter()
                .map(|(name, _, _, bytes)| (name.as_str(), bytes.as_slice())),
        ),
    };
    let json = serde_json::to_string(&header)
        .map_err(|e| CalibError::Meta(format!("cannot serialise the header: {e}")))?;
    let info = HashMap::from([(METADATA_KEY.to_string(), json)]);
    safetensors::serialize(views, Some(info))
        .map_err(|e| CalibError::Meta(format!("cannot serialise tensors: {e}")))
}

/// Parses safetensors bytes (`path` is only used in error messages).
pub(crate) fn from_bytes(bytes: &[u8], path: &Path) -> Result<(Fitted, CalibratorMeta)> {
    let err = |reason: String| CalibError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let st = SafeTensors::deserialize(bytes).map_err(|e| {
        err(format!(
            "not a readable safetensors file (damaged or truncated?): {e}"
        ))
    })?;
    let (_, md) = SafeTensors::read_metadata(bytes)
        .map_err(|e| err(format!("unreadable safetensors header: {e}")))?;
    let json = md
        .metadata()
        .as_ref()
        .and_then(|m| m.get(METADATA_KEY))
        .ok_or_else(|| {
            err(format!(
                "no {METADATA_KEY:?} entry in the metadata: not a bertflow calibrator"
            ))
        })?;
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| err(format!("header is not JSON: {e}")))?;
    if value.get("format").and_then(|v| v.as_str()) != Some(FORMAT_NAME) {
        return Err(err(format!(
            "header does not declare format {FORMAT_NAME:?}"
        )));
    }
    match value.get("format_version").and_then(|v| v.as_u64()) {
        Some(v) if v <= QUANTIZED_FORMAT_VERSION as u64 && v >= 1 => {}
        Some(v) => {
            return Err(err(format!(
                "format version {v} is not supported (this bertflow reads up to {QUANTIZED_FORMAT_VERSION})"
            )))
        }
        None => return Err(err("header has no format_version".into())),
    }
    // Every top-level key is known: a misspelt checksum key must not switch
    // the check off.
    const KEYS: [&str; 5] = [
        "format",
        "format_version",
        "meta",
        "calibrator",
        CHECKSUM_FIELD,
    ];
    if let Some(key) = value
        .as_object()
        .and_then(|o| o.keys().find(|k| !KEYS.contains(&k.as_str())))
    {
        return Err(err(format!(
            "unknown key {key:?} in the header (known: {})",
            KEYS.join(", ")
        )));
    }
    let stored_crc = value
        .get(CHECKSUM_FIELD)
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| err(format!("{CHECKSUM_FIELD} is not a string")))
        })
        .transpose()?;
    let header: FileHeader =
        serde_json::from_value(value).map_err(|e| err(format!("invalid header: {e}")))?;
    let mut fitted = header.calibrator;
    let mut reader = TensorReader {
        st,
        path: path.to_path_buf(),
        used: BTreeSet::new(),
    };
    fitted.read_tensors(&mut reader)?;
    let mut meta = header.meta;
    if let Some(q) = &mut meta.quantizer {
        q.read_tensors(&mut reader)?;
    }
    if let Some(wm) = &mut meta.weighting {
        let len = reader
            .st
            .tensor(WEIGHTING_TENSOR)
            .map(|t| t.shape().iter().product::<usize>())
            .map_err(|_| err(format!("missing tensor {WEIGHTING_TENSOR:?}")))?;
        wm.weights = reader.f32(WEIGHTING_TENSOR, &[len])?;
        // What `save` refuses to write is refused on reading too.
        let bad = |v: f32| !(v.is_finite() && v >= 0.0);
        if wm.weights.is_empty() || wm.weights.iter().any(|&v| bad(v)) || bad(wm.unseen) {
            return Err(err(format!(
                "tensor {WEIGHTING_TENSOR:?}: the token weighting needs finite, non-negative weights"
            )));
        }
    }
    // After the tensors were read, so that a missing or misshapen tensor is
    // named rather than reported as a checksum mismatch.
    let checksum = match stored_crc {
        Some(stored) => {
            let tensors = reader.st.tensors();
            let actual = tensors_crc32(tensors.iter().map(|(n, t)| (n.as_str(), t.data())));
            if actual == stored {
                Ok(())
            } else {
                Err(err(format!(
                    "the tensors' checksum is {actual}, the file records {stored}: the file is damaged"
                )))
            }
        }
        None => Ok(()),
    };
    reader.finish()?;
    checksum?;
    check_stage(&meta, fitted.output_dim()).map_err(|e| err(e.to_string()))?;
    if meta.input_dim != fitted.input_dim() {
        return Err(err(format!(
            "meta.input_dim {} does not match the calibrator's input dimension {}",
            meta.input_dim,
            fitted.input_dim()
        )));
    }
    Ok((fitted, meta))
}

/// Writes a calibrator file atomically (temporary file, fsync, rename): a
/// failure leaves a file already at `path` as it was.
pub fn save(fitted: &Fitted, path: impl AsRef<Path>, meta: &CalibratorMeta) -> Result<()> {
    let bytes = to_bytes(fitted, meta)?;
    Ok(bertflow_durable::write(path.as_ref(), bytes)?)
}

/// Reads a calibrator file written by [`save`].
pub fn load(path: impl AsRef<Path>) -> Result<(Fitted, CalibratorMeta)> {
    let path = path.as_ref();
    let bytes = read_bounded(path)?;
    from_bytes(&bytes, path)
}

/// The bytes of the calibrator file at `path`, read no further than its
/// safetensors header declares: a regular file (not a device or a FIFO), a
/// header of at most [`MAX_HEADER_BYTES`], and exactly the length the header's
/// tensor offsets give (at most [`MAX_FILE_BYTES`]).
fn read_bounded(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let io = |source| CalibError::Io {
        action: "reading",
        path: path.to_path_buf(),
        source,
    };
    let err = |reason: String| CalibError::Format {
        path: path.to_path_buf(),
        reason,
    };
    // A regular file only, checked on the open descriptor (opened without
    // blocking, so a FIFO is refused at once).
    let (file, file_len) =
        bertflow_durable::open_regular(path, MAX_FILE_BYTES).map_err(|e| match e {
            bertflow_durable::ReadError::Io { source, .. } => io(source),
            bertflow_durable::ReadError::NotRegular { kind, .. } => {
                err(format!("not a regular file ({kind})"))
            }
            bertflow_durable::ReadError::TooLarge { len, .. } => err(format!(
                "{len} bytes, more than a calibrator file may have ({MAX_FILE_BYTES})"
            )),
        })?;
    let mut reader = file.take(MAX_FILE_BYTES);
    let mut prefix = [0u8; 8];
    reader
        .read_exact(&mut prefix)
        .map_err(|_| err("too short for a safetensors file (damaged or truncated?)".into()))?;
    let header_len = u64::from_le_bytes(prefix);
    if header_len > MAX_HEADER_BYTES || header_len + 8 > file_len {
        return Err(err(format!(
            "the safetensors header declares {header_len} bytes: not a safetensors file (damaged or truncated?)"
        )));
    }
    let mut bytes = Vec::with_capacity(8 + header_len as usize);
    bytes.extend_from_slice(&prefix);
    (&mut reader)
        .take(header_len)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes[8..])
        .map_err(|e| {
            err(format!(
                "unreadable safetensors header (damaged or truncated?): {e}"
            ))
        })?;
    let data_len = header
        .iter()
        .filter(|(name, _)| name.as_str() != "__metadata__")
        .filter_map(|(_, t)| t.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    let total = 8 + header_len + data_len;
    if total != file_len || total > MAX_FILE_BYTES {
        return Err(err(format!(
            "the safetensors header declares {total} bytes but the file has {file_len} (damaged or truncated?)"
        )));
    }
    bytes.reserve_exact(data_len as usize);
    reader.take(data_len).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 != total {
        return Err(err("the file changed while it was read".into()));
    }
    Ok(bytes)
}
