//! Parsing a sentence-transformers directory into an [`StSpec`].
use super::LayerSource;
use super::{Dense, Mode, StSpec, Step, LEGACY_MODES};
use crate::checkpoint::{read_safetensors, read_torch, HostTensor};
use crate::error::{io_err, EncoderError, Result};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub(super) fn bad(path: &Path, msg: impl Into<String>) -> EncoderError {
    EncoderError::BadFile {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

pub(super) fn read_json(path: &Path) -> Result<Value> {
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
        // A malformed prompts file is an error here too, naming the file.
        super::prompts::StPrompts::read(root)?;
        let mut spec = StSpec {
            root: root.to_path_buf(),
            max_seq_length: None,
            lowercase: false,
            include_prompt: true,
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
                    let (modes, include_prompt) = read_pooling(&dir.join("config.json"), hidden)?;
                    spec.include_prompt &= include_prompt;
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
}

/// bertflow's module's `source`: `{"mean": [layers]}` or `{"cls": layer}`.
fn parse_source(v: &Value, layers: usize, path: &Path) -> Result<LayerSource> {
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
        Some((k, x)) if k == "cls" => Ok(LayerSource::Cls(layer(x)?)),
        Some((k, Value::Array(xs))) if k == "mean" && !xs.is_empty() => {
            let mut v = xs.iter().map(layer).collect::<Result<Vec<_>>>()?;
            v.sort_unstable();
            v.dedup();
            Ok(LayerSource::Mean(v))
        }
        _ => Err(bad(
            path,
            "`source` must be {\"mean\": [layers]} or {\"cls\": layer}",
        )),
    }
}

/// The modes of a `Pooling` config (new `pooling_mode`, or the old flags)
/// and its `include_prompt`.
fn read_pooling(path: &Path, hidden: usize) -> Result<(Vec<Mode>, bool)> {
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
    let include_prompt = get_bool(&cfg, "include_prompt", true, path)?;
    Ok((modes, include_prompt))
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
        if t.shape() != shape {
            return Err(bad(
                &wpath,
                format!("{name} has shape {:?}, expected {shape:?}", t.shape()),
            ));
        }
        let v = t.to_f32();
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

fn read_tensors(dir: &Path) -> Result<(PathBuf, HashMap<String, HostTensor>)> {
    let st = dir.join("model.safetensors");
    if st.is_file() {
        return Ok((st.clone(), read_safetensors(&st)?.into_iter().collect()));
    }
    let bin = dir.join("pytorch_model.bin");
    if bin.is_file() {
        return Ok((bin.clone(), read_torch(&bin)?.into_iter().collect()));
    }
    Err(EncoderError::IncompleteModel {
        dir: dir.to_path_buf(),
        missing: "the Dense module's model.safetensors (or pytorch_model.bin)".into(),
    })
}
