//! Prompts: one rule for every front end (the CLI's `--prompt-name` and
//! `--prompt`, `serve --default-prompt-name` and `--default-prompt`, the
//! server's `prompt_name`, Python's `prompt_name=` and `prompt=`).
//!
//! A sentence-transformers directory may name prompts in its
//! `config_sentence_transformers.json` (`prompts`, `default_prompt_name`; read
//! by [`bertflow_encoder::st::StPrompts`]). As in sentence-transformers'
//! `encode`, the prompt of a text is, in this order:
//! - a prompt text given (`--prompt TEXT`; empty: no prompt at all);
//! - else the model's prompt of the name given (`--prompt-name NAME`; a name
//!   the model does not define is an error naming the ones it does);
//! - else the model's `default_prompt_name`, if it has one;
//! - else none.
//!
//! Giving both a name and a text is an error (sentence-transformers warns and
//! takes the text). The prompt's text is prepended to each text before it is
//! tokenised, so its tokens count against the token limit and are pooled with
//! the text's. A sentence-transformers `Pooling` with `include_prompt: false`
//! leaves them out of its pooling; pooling `st` of such a directory refuses a
//! prompt rather than make other vectors (bertflow's own poolings always pool
//! every token). Embeddings are cached by their prompted texts.
//!
//! A calibrator file records the prompt its fit sentences had
//! ([`bertflow_calib::CalibratorMeta::prompt`]); applying it to vectors made
//! with another prompt is refused like another pooling (unless
//! `allow_mismatch`).
use crate::error::Result;
use crate::CoreError;
use bertflow_encoder::st::StPrompts;
use bertflow_encoder::PoolSource;
use serde::{Deserialize, Serialize};

/// The prompt asked for: a name of the model's prompts, or a text; neither
/// is the model's default (see the module's rule). With core's `clap`
/// feature it is `--prompt-name` and `--prompt`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct PromptConfig {
    /// Prepend the model's prompt of this name to every text (a key of
    /// `prompts` in the sentence-transformers directory's
    /// config_sentence_transformers.json, e.g. query, document) [default: its
    /// default_prompt_name, if any].
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "NAME", conflicts_with = "prompt")
    )]
    pub prompt_name: Option<String>,
    /// Prepend this text to every text (e.g. "query: "); an empty one turns
    /// the model's default prompt off.
    #[cfg_attr(feature = "clap", arg(long, value_name = "TEXT"))]
    pub prompt: Option<String>,
}

impl PromptConfig {
    /// Neither a name nor a text: the model's default.
    pub fn is_default(&self) -> bool {
        self.prompt_name.is_none() && self.prompt.is_none()
    }
}

/// A prompt in use: a non-empty text, and the name it was chosen by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// The model's name for it (`None`: a text given as such).
    pub name: Option<String>,
    pub text: String,
}

impl Prompt {
    /// `text` with the prompt before it.
    pub fn apply(&self, text: &str) -> String {
        let mut s = String::with_capacity(self.text.len() + text.len());
        s.push_str(&self.text);
        s.push_str(text);
        s
    }

    /// For messages and `/info`: `query ("query: ")`, or `"query: "`.
    pub fn describe(&self) -> String {
        match &self.name {
            Some(n) => format!("{n} ({:?})", self.text),
            None => format!("{:?}", self.text),
        }
    }
}

/// The prompt of `asked` for a model with `prompts` (the module's rule):
/// `None` when no prompt applies (or its text is empty). `model` names the
/// model in errors.
pub fn resolve(prompts: &StPrompts, asked: &PromptConfig, model: &str) -> Result<Option<Prompt>> {
    let named = |name: &str| -> Result<Option<Prompt>> {
        let text = prompts.get(name).ok_or_else(|| {
            CoreError::setting(
                "prompt_name",
                format!(
                    "{name:?} is not a prompt of model {model} (its prompts: {}; they are \
                     read from config_sentence_transformers.json in a sentence-transformers \
                     directory); give the prompt's text instead",
                    prompts.names()
                ),
            )
        })?;
        Ok((!text.is_empty()).then(|| Prompt {
            name: Some(name.to_string()),
            text: text.to_string(),
        }))
    };
    match (&asked.prompt_name, &asked.prompt) {
        (Some(_), Some(_)) => Err(CoreError::setting(
            "prompt",
            "give a prompt name or a prompt text, not both",
        )),
        (None, Some(text)) => Ok((!text.is_empty()).then(|| Prompt {
            name: None,
            text: text.clone(),
        })),
        (Some(name), None) => named(name),
        (None, None) => match &prompts.default_prompt_name {
            Some(name) => named(name),
            None => Ok(None),
        },
    }
}

/// What the texts are, for `encode_query` and `encode_document`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Query,
    Document,
}

impl Role {
    /// The prompt name sentence-transformers 6 uses for it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Query => "query",
            Role::Document => "document",
        }
    }
}

/// What `encode_query` / `encode_document` ask for, as sentence-transformers
/// 6: `asked` when it names a prompt or gives one; else the model's prompt
/// [`Role::name`] (`query`, `document`) if it has one; else an empty prompt,
/// which turns the default prompt off (sentence-transformers 6 gives every
/// model empty `query` and `document` prompts, so it never falls back to
/// `default_prompt_name` there, nor to `passage` or `corpus`).
pub fn for_role(prompts: &StPrompts, asked: &PromptConfig, role: Role) -> PromptConfig {
    if !asked.is_default() {
        return asked.clone();
    }
    match prompts.get(role.name()) {
        Some(_) => PromptConfig {
            prompt_name: Some(role.name().to_string()),
            prompt: None,
        },
        None => PromptConfig {
            prompt_name: None,
            prompt: Some(String::new()),
        },
    }
}

/// `texts` with `prompt` (if any) before each.
pub fn apply<S: AsRef<str>>(prompt: Option<&Prompt>, texts: &[S]) -> Vec<String> {
    texts
        .iter()
        .map(|t| match prompt {
            Some(p) => p.apply(t.as_ref()),
            None => t.as_ref().to_string(),
        })
        .collect()
}

/// Error when `prompt` would be pooled by `source` where sentence-transformers
/// leaves it out: pooling `st` of a directory whose `Pooling` says
/// `include_prompt: false`.
pub fn check_source(prompt: Option<&Prompt>, source: &PoolSource) -> Result<()> {
    match (prompt, source) {
        (Some(p), PoolSource::St(head)) if !head.include_prompt => Err(CoreError::setting(
            "prompt",
            format!(
                "prompt {}: this sentence-transformers directory's Pooling has include_prompt \
                 false (the prompt's tokens are left out of its pooling), which pooling st does \
                 not do; use another pooling, or no prompt",
                p.describe()
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> StPrompts {
        StPrompts {
            prompts: vec![
                ("query".into(), "query: ".into()),
                ("document".into(), "".into()),
            ],
            default_prompt_name: Some("query".into()),
        }
    }

    fn ask(name: Option<&str>, text: Option<&str>) -> PromptConfig {
        PromptConfig {
            prompt_name: name.map(str::to_string),
            prompt: text.map(str::to_string),
        }
    }

    #[test]
    fn the_rule() {
        let m = model();
        let text = |a| resolve(&m, &a, "m").unwrap().map(|p| p.text);
        assert_eq!(text(ask(None, None)).as_deref(), Some("query: "));
        assert_eq!(text(ask(Some("query"), None)).as_deref(), Some("query: "));
        assert_eq!(text(ask(Some("document"), None)), None);
        assert_eq!(text(ask(None, Some("x: "))).as_deref(), Some("x: "));
        assert_eq!(text(ask(None, Some(""))), None);
        let e = resolve(&m, &ask(Some("passage"), None), "m").unwrap_err();
        assert!(e.to_string().contains("\"query\", \"document\""), "{e}");
        assert!(resolve(&m, &ask(Some("query"), Some("x")), "m").is_err());
        let none = StPrompts::default();
        assert_eq!(resolve(&none, &ask(None, None), "m").unwrap(), None);
        let e = resolve(&none, &ask(Some("query"), None), "m").unwrap_err();
        assert!(e.to_string().contains("its prompts: none"), "{e}");
        let p = resolve(&m, &ask(None, None), "m").unwrap().unwrap();
        assert_eq!(apply(Some(&p), &["a", "b"]), ["query: a", "query: b"]);
        assert_eq!(apply(None, &["a"]), ["a"]);
    }

    #[test]
    fn roles() {
        let m = model();
        let name = |a: &PromptConfig, r| for_role(&m, a, r).prompt_name;
        assert_eq!(
            name(&ask(None, None), Role::Query).as_deref(),
            Some("query")
        );
        assert_eq!(
            name(&ask(None, None), Role::Document).as_deref(),
            Some("document")
        );
        assert_eq!(
            for_role(&m, &ask(None, Some("x")), Role::Query),
            ask(None, Some("x"))
        );
        // Without the role's prompt: no prompt, not the default one.
        let only_default = StPrompts {
            prompts: vec![("passage".into(), "p: ".into())],
            default_prompt_name: Some("passage".into()),
        };
        for role in [Role::Query, Role::Document] {
            let asked = for_role(&only_default, &PromptConfig::default(), role);
            assert_eq!(resolve(&only_default, &asked, "m").unwrap(), None);
        }
    }
}
