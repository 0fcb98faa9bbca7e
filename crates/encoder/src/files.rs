//! Finding a model on disk: a directory in Hugging Face layout, a
//! sentence-transformers directory, or a hub id in the local Hugging Face cache.
use crate::error::{io_err, EncoderError, Result};
use std::path::{Path, PathBuf};

/// Where the weights are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightsFile {
    Safetensors(PathBuf),
    /// `pytorch_model.bin` (a `torch.save` zip archive), read by [`crate::checkpoint`].
    Pytorch(PathBuf),
}

/// How to build the tokenizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerFile {
    /// `tokenizer.json` (its stored padding and truncation are ignored).
    Json(PathBuf),
    /// `vocab.txt` alone: a plain BERT WordPiece tokenizer.
    Vocab { vocab: PathBuf, lowercase: bool },
}

/// The files of one model, resolved.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// What the user asked for (a path or a hub id), for messages and cache keys.
    pub id: String,
    /// Directory that holds config.json.
    pub dir: PathBuf,
    pub config: PathBuf,
    pub weights: WeightsFile,
    pub tokenizer: TokenizerFile,
    /// The pooling a sentence-transformers directory declares (informational).
    pub st_pooling: Option<String>,
    /// The sentence-transformers directory (holding `modules.json`), if it is one.
    pub st_root: Option<PathBuf>,
}

impl ModelFiles {
    /// Resolve `spec`: an existing directory, or a hub id like `bert-base-uncased` /
    /// `sentence-transformers/all-MiniLM-L6-v2` looked up in the local Hugging Face
    /// cache (`$HF_HUB_CACHE`, `$HF_HOME/hub`, `~/.cache/huggingface/hub`).
    pub fn resolve(spec: &str) -> Result<Self> {
        let p = Path::new(spec);
        if p.is_dir() {
            return Self::from_dir(spec, p);
        }
        if p.exists() {
            return Err(EncoderError::ModelNotFound {
                what: spec.into(),
                hint: "expected a directory holding config.json, model.safetensors and tokenizer.json or vocab.txt".into(),
            });
        }
        let looks_like_path =
            spec.starts_with('.') || spec.starts_with('/') || spec.split('/').count() > 2;
        if !looks_like_path {
            if let Some(dir) = hub_snapshot(spec) {
                return Self::from_dir(spec, &dir);
            }
        }
        Err(EncoderError::ModelNotFound {
            what: spec.into(),
            hint: format!(
                "it is neither a directory nor a model in the Hugging Face cache ({}).",
                hub_cache_dirs()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }

    fn from_dir(id: &str, dir: &Path) -> Result<Self> {
        // A sentence-transformers directory may keep the transformer in a sub-folder
        // named by modules.json (older models: "0_BERT" or "0_Transformer").
        let mut model_dir = dir.to_path_buf();
        let mut st_pooling = None;
        let modules = dir.join("modules.json");
        let st_root = modules.is_file().then(|| dir.to_path_buf());
        if modules.is_file() {
            let text = std::fs::read_to_string(&modules).map_err(io_err(&modules))?;
            let mods: Vec<serde_json::Value> =
                serde_json::from_str(&text).map_err(|e| EncoderError::BadFile {
                    path: modules.clone(),
                    msg: e.to_string(),
                })?;
            for m in &mods {
                let ty = m.get("type").and_then(|v| v.as_str()).unwrap_or("");
                let sub = m.get("path").and_then(|v| v.as_str()).unwrap_or("");
                if ty.ends_with("Transformer")
                    && !sub.is_empty()
                    && !dir.join("config.json").is_file()
                {
                    model_dir = dir.join(sub);
                }
                if ty.ends_with("Pooling") {
                    st_pooling = read_st_pooling(&dir.join(sub).join("config.json"));
                }
            }
        }
        let config = model_dir.join("config.json");
        let mut missing = Vec::new();
        if !config.is_file() {
            missing.push("config.json");
        }
        let weights = if model_dir.join("model.safetensors").is_file() {
            Some(WeightsFile::Safetensors(
                model_dir.join("model.safetensors"),
            ))
        } else if model_dir.join("pytorch_model.bin").is_file() {
            Some(WeightsFile::Pytorch(model_dir.join("pytorch_model.bin")))
        } else {
            missing.push("model.safetensors (or pytorch_model.bin)");
            None
        };
        let tokenizer = if model_dir.join("tokenizer.json").is_file() {
            Some(TokenizerFile::Json(model_dir.join("tokenizer.json")))
        } else if model_dir.join("vocab.txt").is_file() {
            let vocab = model_dir.join("vocab.txt");
            let lowercase = detect_lowercase(&model_dir, &vocab)?;
            Some(TokenizerFile::Vocab { vocab, lowercase })
        } else {
            missing.push("tokenizer.json (or vocab.txt)");
            None
        };
        match (weights, tokenizer) {
            (Some(weights), Some(tokenizer)) if missing.is_empty() => Ok(Self {
                id: id.to_string(),
                dir: model_dir,
                config,
                weights,
                tokenizer,
                st_pooling,
                st_root,
            }),
            _ => Err(EncoderError::IncompleteModel {
                dir: model_dir,
                missing: format!("missing {}", missing.join(", ")),
            }),
        }
    }
}

fn read_st_pooling(path: &Path) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let on = |k: &str| v.get(k).and_then(|x| x.as_bool()).unwrap_or(false);
    if on("pooling_mode_mean_tokens") {
        Some("last-avg".into())
    } else if on("pooling_mode_cls_token") {
        Some("cls".into())
    } else {
        None
    }
}

/// `do_lower_case` from tokenizer_config.json; without it, a vocabulary with
/// almost no capitalised entries is taken as uncased.
fn detect_lowercase(dir: &Path, vocab: &Path) -> Result<bool> {
    let tc = dir.join("tokenizer_config.json");
    if let Ok(text) = std::fs::read_to_string(&tc) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            if let Some(b) = v.get("do_lower_case").and_then(|x| x.as_bool()) {
                return Ok(b);
            }
        }
    }
    let text = std::fs::read_to_string(vocab).map_err(io_err(vocab))?;
    let upper = text
        .lines()
        .filter(|l| !l.starts_with('[') && l.chars().next().is_some_and(|c| c.is_uppercase()))
        .count();
    Ok(upper * 100 < text.lines().count())
}

fn hub_cache_dirs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Ok(p) = std::env::var("HF_HUB_CACHE") {
        v.push(PathBuf::from(p));
    }
    if let Ok(p) = std::env::var("HF_HOME") {
        v.push(PathBuf::from(p).join("hub"));
    }
    if let Ok(home) = std::env::var("HOME") {
        v.push(PathBuf::from(home).join(".cache/huggingface/hub"));
    }
    v
}

/// `hub/models--org--name/snapshots/<rev>` for the revision that refs/main names,
/// else the only (or newest) snapshot.
fn hub_snapshot(id: &str) -> Option<PathBuf> {
    let folder = format!("models--{}", id.replace('/', "--"));
    for cache in hub_cache_dirs() {
        let repo = cache.join(&folder);
        let snaps = repo.join("snapshots");
        if !snaps.is_dir() {
            continue;
        }
        if let Ok(rev) = std::fs::read_to_string(repo.join("refs/main")) {
            let d = snaps.join(rev.trim());
            if d.is_dir() {
                return Some(d);
            }
        }
        let mut entries: Vec<_> = std::fs::read_dir(&snaps)
            .ok()?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .collect();
        entries.sort_by_key(|e| e.metadata().and_then(|m| m.modified()).ok());
        if let Some(e) = entries.last() {
            return Some(e.path());
        }
    }
    None
}
