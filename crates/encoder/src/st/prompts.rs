//! A sentence-transformers directory's prompts: `prompts` and
//! `default_prompt_name` in its `config_sentence_transformers.json`, as
//! `SentenceTransformer(dir)` reads them. A model that is not a
//! sentence-transformers directory, or one without that file, has no prompts.
//!
//! This crate only reads them; which prompt a text gets, and prepending it,
//! is bertflow-core's rule (`bertflow_core::prompt`), the same for every
//! front end.
use super::read::{bad, read_json};
use crate::error::Result;
use crate::files::ModelFiles;
use serde_json::Value;
use std::path::Path;

/// The file holding the prompts, in the directory holding `modules.json`.
pub const PROMPTS_FILE: &str = "config_sentence_transformers.json";

/// The prompts a model defines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StPrompts {
    /// Name and text of each prompt, in the file's order (an empty text is
    /// allowed: it prepends nothing).
    pub prompts: Vec<(String, String)>,
    /// The prompt used when none is asked for (a key of `prompts`).
    pub default_prompt_name: Option<String>,
}

impl StPrompts {
    /// The prompts of the model in `files` (none unless it is a
    /// sentence-transformers directory with [`PROMPTS_FILE`]).
    pub fn of_model(files: &ModelFiles) -> Result<Self> {
        match &files.st_root {
            Some(root) => Self::read(root),
            None => Ok(Self::default()),
        }
    }

    /// Reads [`PROMPTS_FILE`] in `root` (no file: no prompts). A malformed
    /// file, a prompt that is not a string, or a `default_prompt_name` that
    /// names no prompt is an error naming the file (sentence-transformers
    /// refuses the last one too).
    pub fn read(root: &Path) -> Result<Self> {
        let path = root.join(PROMPTS_FILE);
        if !path.is_file() {
            return Ok(Self::default());
        }
        let cfg = read_json(&path)?;
        if !cfg.is_object() {
            return Err(bad(&path, "expected a JSON object"));
        }
        let prompts = match cfg.get("prompts") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(name, text)| match text {
                    Value::String(t) => Ok((name.clone(), t.clone())),
                    other => Err(bad(
                        &path,
                        format!("prompt {name:?} must be a string, got {other}"),
                    )),
                })
                .collect::<Result<Vec<_>>>()?,
            Some(other) => {
                return Err(bad(
                    &path,
                    format!("`prompts` must be an object of name: text, got {other}"),
                ))
            }
        };
        let default_prompt_name = match cfg.get("default_prompt_name") {
            None | Some(Value::Null) => None,
            Some(Value::String(name)) => Some(name.clone()),
            Some(other) => {
                return Err(bad(
                    &path,
                    format!("`default_prompt_name` must be a string or null, got {other}"),
                ))
            }
        };
        let out = Self {
            prompts,
            default_prompt_name,
        };
        if let Some(name) = &out.default_prompt_name {
            if out.get(name).is_none() {
                return Err(bad(
                    &path,
                    format!(
                        "default_prompt_name {name:?} is not one of its prompts ({})",
                        out.names()
                    ),
                ));
            }
        }
        Ok(out)
    }

    /// The text of the prompt `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.prompts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    }

    /// The names, quoted and comma-separated (`none` when there are none),
    /// for messages.
    pub fn names(&self) -> String {
        if self.prompts.is_empty() {
            return "none".to_string();
        }
        self.prompts
            .iter()
            .map(|(n, _)| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
