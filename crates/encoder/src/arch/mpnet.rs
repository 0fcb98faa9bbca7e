//! `mpnet`: positions from `padding_idx + 1` (`padding_idx` is 1, fixed in
//! transformers' MPNetEmbeddings), no token types, post-norm layers under
//! MPNet's names (`encoder.layer.N.attention.attn.q`, `attention.LayerNorm`, ...,
//! optionally prefixed `mpnet.`), and a relative position bias added to every
//! layer's attention scores: `encoder.relative_attention_bias` `[buckets,
//! heads]` looked up by transformers' `MPNetEncoder.relative_position_bucket`
//! (32 buckets, max distance 128), computed once per batch.
use super::{pooler, post_norm_block, Architecture, BertStyleConfig, PostNormNames};
use crate::config::ModelConfig;
use crate::engine::{AttentionBias, Embeddings, ModelParts, Positions};
use crate::error::{EncoderError, Result};
use crate::weights::Weights;

/// MPNetEmbeddings' `padding_idx`.
const PADDING_IDX: usize = 1;
/// `compute_position_bias` buckets with its default of 32, whatever the config says.
const NUM_BUCKETS: usize = 32;
const MAX_DISTANCE: usize = 128;

pub(crate) fn parse_config(
    model_type: String,
    raw: serde_json::Value,
) -> Result<ModelConfig, String> {
    let mut c = BertStyleConfig::read(&raw)?;
    c.type_vocab_size = 0;
    let pad = c.pad_token_id.unwrap_or(PADDING_IDX);
    Ok(c.into_config(Architecture::MpNet, model_type, raw, pad, PADDING_IDX + 1))
}

fn names(i: usize) -> PostNormNames {
    let p = format!("encoder.layer.{i}");
    PostNormNames {
        q: format!("{p}.attention.attn.q"),
        k: format!("{p}.attention.attn.k"),
        v: format!("{p}.attention.attn.v"),
        attn_out: format!("{p}.attention.attn.o"),
        attn_ln: format!("{p}.attention.LayerNorm"),
        inter: format!("{p}.intermediate.dense"),
        out: format!("{p}.output.dense"),
        out_ln: format!("{p}.output.LayerNorm"),
    }
}

pub(crate) fn load(w: &Weights, cfg: &ModelConfig) -> Result<ModelParts> {
    let buckets = cfg
        .raw
        .get("relative_attention_num_buckets")
        .and_then(|v| v.as_u64())
        .unwrap_or(NUM_BUCKETS as u64) as usize;
    if buckets < NUM_BUCKETS {
        return Err(EncoderError::Unsupported(format!(
            "relative_attention_num_buckets {buckets}: MPNet looks up {NUM_BUCKETS} buckets"
        )));
    }
    let heads = cfg.num_attention_heads;
    let table = w.vec("encoder.relative_attention_bias.weight", &[buckets, heads])?;
    let positions = Positions::AfterPadding {
        padding_idx: PADDING_IDX,
    };
    Ok(ModelParts {
        embeddings: Embeddings::load_bert_style(w, cfg, positions)?,
        blocks: (0..cfg.num_hidden_layers)
            .map(|i| post_norm_block(w, &names(i), cfg))
            .collect::<Result<_>>()?,
        bias: Some(Box::new(RelativeBias { table, heads })),
        pooler: pooler(w, cfg.hidden_size)?,
    })
}

/// transformers' `MPNetEncoder.relative_position_bucket` for `relative_position`
/// = key position - query position, in f32 as torch computes it.
pub fn relative_position_bucket(relative_position: i64) -> usize {
    let half = (NUM_BUCKETS / 2) as i64;
    let n = -relative_position;
    let mut ret = if n < 0 { half } else { 0 };
    let n = n.abs();
    let max_exact = half / 2;
    ret += if n < max_exact {
        n
    } else {
        let ratio = (n as f32 / max_exact as f32).ln()
            / ((MAX_DISTANCE as f64 / max_exact as f64).ln() as f32)
            * (half - max_exact) as f32;
        (max_exact + ratio as i64).min(half - 1)
    };
    ret as usize
}

/// The bias table `[buckets, heads]`, spread over `[heads, seq, seq]` per batch.
struct RelativeBias {
    table: Vec<f32>,
    heads: usize,
}

impl AttentionBias for RelativeBias {
    fn fill(&self, seq: usize, out: &mut Vec<f32>) {
        out.resize(self.heads * seq * seq, 0.0);
        for i in 0..seq {
            for j in 0..seq {
                let b = relative_position_bucket(j as i64 - i as i64);
                for h in 0..self.heads {
                    out[(h * seq + i) * seq + j] = self.table[b * self.heads + h];
                }
            }
        }
    }
}
