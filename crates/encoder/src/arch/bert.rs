//! `bert`: learned absolute positions from 0, token type 0, post-norm layers.
//! Checkpoint names as BertModel's, optionally prefixed `bert.`
//! (BertForPreTraining) or `model.`.
use super::{pooler, post_norm_block, Architecture, BertStyleConfig, PostNormNames};
use crate::config::ModelConfig;
use crate::engine::{Embeddings, ModelParts, Positions};
use crate::error::Result;
use crate::weights::Weights;

pub(crate) fn parse_config(
    model_type: String,
    raw: serde_json::Value,
) -> Result<ModelConfig, String> {
    let c = BertStyleConfig::read(&raw)?;
    let pad = c.pad_token_id.unwrap_or(0);
    Ok(c.into_config(Architecture::Bert, model_type, raw, pad, 0))
}

pub(crate) fn load(w: &Weights, cfg: &ModelConfig) -> Result<ModelParts> {
    Ok(ModelParts {
        embeddings: Embeddings::load_bert_style(w, cfg, Positions::FromZero)?,
        blocks: (0..cfg.num_hidden_layers)
            .map(|i| post_norm_block(w, &PostNormNames::bert(i), cfg))
            .collect::<Result<_>>()?,
        bias: None,
        pooler: pooler(w, cfg.hidden_size)?,
    })
}
