//! `roberta`, `xlm-roberta`, `camembert`: BERT's layers and names (optionally
//! prefixed `roberta.`), with position ids that start after the padding index
//! (`padding_idx + 1` for the first real token, so a sentence has at most
//! `max_position_embeddings - padding_idx - 1` tokens) and one token type.
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
    // transformers' RobertaConfig default.
    let pad = c.pad_token_id.unwrap_or(1);
    Ok(c.into_config(Architecture::Roberta, model_type, raw, pad, pad + 1))
}

pub(crate) fn load(w: &Weights, cfg: &ModelConfig) -> Result<ModelParts> {
    let positions = Positions::AfterPadding {
        padding_idx: cfg.pad_token_id,
    };
    Ok(ModelParts {
        embeddings: Embeddings::load_bert_style(w, cfg, positions)?,
        blocks: (0..cfg.num_hidden_layers)
            .map(|i| post_norm_block(w, &PostNormNames::bert(i), cfg))
            .collect::<Result<_>>()?,
        bias: None,
        pooler: pooler(w, cfg.hidden_size)?,
    })
}
