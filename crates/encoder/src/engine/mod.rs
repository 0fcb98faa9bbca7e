//! The encoder engine: the layers every architecture is built from and the
//! forward pass that returns every hidden state.
//!
//! Hidden state 0 is the embedding output; hidden state `i`
//! (1..=num_hidden_layers) is the output of block `i`. This matches
//! `output_hidden_states=True` in Hugging Face transformers, for every
//! architecture of [`crate::arch`]. The pass runs on the host without
//! per-operation allocation ([`host`]), fp32 through `gemm` or int8 through
//! bertflow-kernels' [`QuantLinear`].
use crate::config::{HiddenAct, ModelConfig};
use crate::error::{EncoderError, Result};
use crate::precision::Precision;
use crate::weights::Weights;
use bertflow_kernels::fp32::Path;
use bertflow_kernels::{Isa, PackedLinear, QuantLinear};

pub(crate) mod decoder;
mod host;
pub use host::Workspace;
pub(crate) use host::{Pass, Scratch};

/// y = x W^T + b by one of bertflow-kernels' layers (bias in its output stage).
pub(crate) struct Linear {
    pub(crate) product: Product,
    pub(crate) d_in: usize,
    pub(crate) d_out: usize,
}

/// The weights of a [`Linear`], in the form its precision runs: fp32 packed
/// once at load, or, with `--precision int8`, quantised and packed for the
/// int8 kernel (the fp32 form is then dropped, not kept beside it).
pub(crate) enum Product {
    Fp32(PackedLinear),
    Int8(QuantLinear, Isa),
}

impl Linear {
    /// From `weight` row-major `[d_out, d_in]` (PyTorch's layout) and `bias`
    /// (`None`: no bias, as ModernBERT's layers).
    pub(crate) fn new(
        weight: &[f32],
        bias: Option<Vec<f32>>,
        d_in: usize,
        d_out: usize,
    ) -> Result<Self> {
        let b = bias.unwrap_or_else(|| vec![0.0; d_out]);
        if weight.len() != d_in * d_out || b.len() != d_out || d_in == 0 || d_out == 0 {
            return Err(EncoderError::Weights(format!(
                "a [{d_out}, {d_in}] layer got {} weights and {} biases",
                weight.len(),
                b.len()
            )));
        }
        let fp = PackedLinear::new(weight, &b, d_out, d_in)
            .map_err(|e| EncoderError::Weights(e.to_string()))?;
        Ok(Self {
            product: Product::Fp32(fp),
            d_in,
            d_out,
        })
    }

    /// `name.weight` `[d_out, d_in]` and `name.bias` `[d_out]`.
    pub(crate) fn load(w: &Weights, name: &str, d_in: usize, d_out: usize) -> Result<Self> {
        let weight = w.vec(&format!("{name}.weight"), &[d_out, d_in])?;
        let b = w.vec(&format!("{name}.bias"), &[d_out])?;
        Self::new(&weight, Some(b), d_in, d_out)
    }

    /// Query, key and value projections (`names`, each `[h, h]` with a bias) fused
    /// into one `[h, 3h]` product, the 1/sqrt(head_dim) score scale folded into
    /// the query part.
    pub(crate) fn fused_qkv(
        w: &Weights,
        names: [&str; 3],
        h: usize,
        head_dim: usize,
    ) -> Result<Self> {
        let scale = 1.0 / (head_dim as f64).sqrt();
        let mut weight = Vec::with_capacity(3 * h * h);
        let mut bias = Vec::with_capacity(3 * h);
        for (part, name) in names.iter().enumerate() {
            let s = if part == 0 { scale as f32 } else { 1.0 };
            let wp = w.vec(&format!("{name}.weight"), &[h, h])?;
            let bp = w.vec(&format!("{name}.bias"), &[h])?;
            weight.extend(wp.iter().map(|x| x * s));
            bias.extend(bp.iter().map(|x| x * s));
        }
        Self::new(&weight, Some(bias), h, 3 * h)
    }

    /// Switch the product to int8 (weights quantised per output channel now,
    /// the fp32 form freed); an error if it already is int8.
    pub(crate) fn quantize(&mut self, isa: Isa) -> Result<()> {
        let (k, n) = (self.d_in, self.d_out);
        let Product::Fp32(fp) = &self.product else {
            return Err(EncoderError::Unsupported(
                "a linear layer was quantised twice".into(),
            ));
        };
        let q = QuantLinear::new(&fp.weights(), fp.bias(), n, k)?;
        self.product = Product::Int8(q, isa);
        Ok(())
    }
}

/// LayerNorm over the hidden dimension (`b` zero where the model has no bias).
pub(crate) struct LayerNorm {
    pub(crate) w: Vec<f32>,
    pub(crate) b: Vec<f32>,
    pub(crate) eps: f32,
}

impl LayerNorm {
    /// `name.weight` and `name.bias` (or the TF-era `gamma`/`beta`).
    pub(crate) fn load(w: &Weights, name: &str, h: usize, eps: f64) -> Result<Self> {
        Ok(Self {
            w: w.vec(&format!("{name}.weight"), &[h])?,
            b: w.vec(&format!("{name}.bias"), &[h])?,
            eps: eps as f32,
        })
    }
}

/// Which row of the position table each token reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Positions {
    /// Token `i` reads row `i` (BERT, DistilBERT).
    FromZero,
    /// transformers' `create_position_ids_from_input_ids` (RoBERTa family,
    /// MPNet): a token that is not `padding_idx` reads `padding_idx + n`, `n`
    /// the count of non-padding tokens up to it included; a padding token reads
    /// `padding_idx`.
    AfterPadding { padding_idx: usize },
    /// No position table (`position` is empty): the blocks rotate queries and
    /// keys instead (ModernBERT's rotary embeddings).
    None,
}

/// The embedding layer: word + position (unless [`Positions::None`]) + token
/// type (0 unless a pass names others), then LayerNorm (where the model has one:
/// decoder-style models have none).
pub(crate) struct Embeddings {
    /// `[vocab, hidden]`
    pub(crate) word: Vec<f32>,
    /// `[max_position_embeddings, hidden]`
    pub(crate) position: Vec<f32>,
    pub(crate) positions: Positions,
    /// The token-type table `[type_vocab_size, hidden]`, where the model has one.
    pub(crate) token_type: Option<Vec<f32>>,
    pub(crate) ln: Option<LayerNorm>,
}

impl Embeddings {
    /// BERT's names (`embeddings.word_embeddings`, `.position_embeddings`,
    /// `.token_type_embeddings` when `cfg.type_vocab_size > 0`, `.LayerNorm`).
    pub(crate) fn load_bert_style(
        w: &Weights,
        cfg: &ModelConfig,
        positions: Positions,
    ) -> Result<Self> {
        let h = cfg.hidden_size;
        let token_type = if cfg.type_vocab_size > 0 {
            Some(w.vec(
                "embeddings.token_type_embeddings.weight",
                &[cfg.type_vocab_size, h],
            )?)
        } else {
            None
        };
        Ok(Self {
            word: w.vec("embeddings.word_embeddings.weight", &[cfg.vocab_size, h])?,
            position: w.vec(
                "embeddings.position_embeddings.weight",
                &[cfg.max_position_embeddings, h],
            )?,
            positions,
            token_type,
            ln: Some(LayerNorm::load(
                w,
                "embeddings.LayerNorm",
                h,
                cfg.layer_norm_eps,
            )?),
        })
    }
}

/// A score bias shared by every layer of one pass (MPNet's relative positions).
pub(crate) trait AttentionBias: Send + Sync {
    /// `out` = the `[heads, seq, seq]` bias of a batch padded to `seq` tokens.
    fn fill(&self, seq: usize, out: &mut Vec<f32>);
}

/// One transformer layer of the host pass. Blocks read hidden state `l` and
/// write hidden state `l + 1`, with the workspace's scratch buffers.
pub(crate) trait Block: Send + Sync {
    fn forward_host(
        &self,
        x: &[f32],
        out: &mut Vec<f32>,
        pass: &Pass,
        scratch: &mut Scratch,
    ) -> Result<()>;

    /// Switch the block's linear layers to int8.
    fn quantize(&mut self, isa: Isa) -> Result<()>;
}

/// BERT's post-norm layer: attention, add & LayerNorm, feed-forward, add &
/// LayerNorm (BERT, the RoBERTa family, DistilBERT, MPNet).
pub(crate) struct PostNormBlock {
    pub(crate) qkv: Linear,
    pub(crate) attn_out: Linear,
    pub(crate) attn_ln: LayerNorm,
    pub(crate) intermediate: Linear,
    pub(crate) output: Linear,
    pub(crate) out_ln: LayerNorm,
    pub(crate) act: HiddenAct,
}

/// What an architecture's module builds from a checkpoint.
pub(crate) struct ModelParts {
    pub(crate) embeddings: Embeddings,
    pub(crate) blocks: Vec<Box<dyn Block>>,
    pub(crate) bias: Option<Box<dyn AttentionBias>>,
    pub(crate) pooler: Option<Linear>,
}

/// An encoder of any supported architecture; its forward pass returns every
/// hidden state.
pub struct Model {
    pub config: ModelConfig,
    embeddings: Embeddings,
    blocks: Vec<Box<dyn Block>>,
    bias: Option<Box<dyn AttentionBias>>,
    pooler: Option<Linear>,
    precision: Precision,
    /// The int8 kernel, with [`Precision::Int8`].
    isa: Option<Isa>,
    /// The kernel of the fp32 products (every product at fp32; the pooler's at int8).
    fp32: Path,
}

impl Model {
    /// The model of `parts` (built by the architecture's module:
    /// `Model::load` in [`crate::arch`]); with [`Precision::Int8`] the blocks'
    /// linear products run in int8.
    pub(crate) fn from_parts(
        config: ModelConfig,
        parts: ModelParts,
        precision: Precision,
    ) -> Result<Self> {
        let fp32 = Path::selected().map_err(|e| EncoderError::Precision(e.to_string()))?;
        let mut model = Self {
            config,
            embeddings: parts.embeddings,
            blocks: parts.blocks,
            bias: parts.bias,
            pooler: parts.pooler,
            precision: Precision::Fp32,
            isa: None,
            fp32,
        };
        if precision == Precision::Int8 {
            model.quantize(Isa::selected()?)?;
        }
        Ok(model)
    }

    /// Quantise every block for the int8 kernel `isa`.
    pub(crate) fn quantize(&mut self, isa: Isa) -> Result<()> {
        for b in &mut self.blocks {
            b.quantize(isa)?;
        }
        self.precision = Precision::Int8;
        self.isa = Some(isa);
        Ok(())
    }

    /// What, beyond the model's files, decides the numbers this model computes:
    /// `None` at fp32; at int8 the activation code width of its kernel (7 or 8
    /// bits) and the version of the int8 pass (`v2`: GELU by polynomial), e.g.
    /// `int8-8bit-v2`. Cache keys include it, so vectors from an older int8 pass
    /// or another code width are never reused.
    pub fn numerics(&self) -> Option<String> {
        let isa = self.isa?;
        let bits = if isa.act_max() > 127 { 8 } else { 7 };
        Some(format!("int8-{bits}bit-v2"))
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The fp32 kernel (of every product at fp32; of the pooler at int8).
    pub fn fp32_kernel(&self) -> Path {
        self.fp32
    }

    /// The int8 kernel, with [`Precision::Int8`].
    pub fn int8_kernel(&self) -> Option<Isa> {
        self.isa
    }

    /// The name of the kernel of the transformer layers' products, e.g.
    /// `avx512pair` at fp32, `avx512vnni` at int8.
    pub fn kernel_name(&self) -> &'static str {
        self.isa.map_or(self.fp32.name(), |i| i.name())
    }

    pub fn has_pooler(&self) -> bool {
        self.pooler.is_some()
    }

    pub fn num_layers(&self) -> usize {
        self.blocks.len()
    }

    /// The static word-embedding matrix `[vocab, hidden]` row-major (no position
    /// or LayerNorm).
    pub fn word_embeddings(&self) -> &[f32] {
        &self.embeddings.word
    }

    /// Errors unless `ids` holds `lens.len()` rows of `t` ids below the vocabulary
    /// size, every length is in `1..=t`, `t` fits the positions and `upto` is a
    /// layer of this model.
    fn check_batch(&self, ids: &[u32], lens: &[usize], t: usize, upto: usize) -> Result<()> {
        let cfg = &self.config;
        let bad = |msg: String| Err(EncoderError::Unsupported(format!("forward pass: {msg}")));
        if ids.len() != lens.len() * t {
            return bad(format!("{} ids for {} rows of {t}", ids.len(), lens.len()));
        }
        if t > cfg.max_tokens {
            return bad(format!(
                "{t} tokens exceed this model's limit of {}",
                cfg.max_tokens
            ));
        }
        if let Some(l) = lens.iter().find(|&&l| l == 0 || l > t) {
            return bad(format!("sentence length {l} outside 1..={t}"));
        }
        if let Some(id) = ids.iter().find(|&&id| id as usize >= cfg.vocab_size) {
            return bad(format!(
                "token id {id} >= vocabulary size {}",
                cfg.vocab_size
            ));
        }
        if upto > self.blocks.len() {
            return bad(format!("layer {upto} of {}", self.blocks.len()));
        }
        Ok(())
    }

    /// Forward a padded batch into `ws`: `ids` holds `lens.len()` rows of `t` ids
    /// (padded with the pad id), `lens` the real length of each row. Computes
    /// hidden states `0..=upto` (layers above `upto` are not run); read them with
    /// [`Workspace::states`].
    pub fn forward_into(
        &self,
        ids: &[u32],
        lens: &[usize],
        t: usize,
        upto: usize,
        ws: &mut Workspace,
    ) -> Result<()> {
        self.check_batch(ids, lens, t, upto)?;
        host::forward(self, ids, None, lens, t, upto, ws)
    }

    /// [`Model::forward_into`] with a token type per id (`types`, as `ids`: the
    /// second text of a pair is type 1 for BERT); an error for a type outside
    /// the model's token-type table, or for types on a model without one.
    pub fn forward_typed_into(
        &self,
        ids: &[u32],
        types: &[u32],
        lens: &[usize],
        t: usize,
        upto: usize,
        ws: &mut Workspace,
    ) -> Result<()> {
        self.check_batch(ids, lens, t, upto)?;
        let rows = self.config.type_vocab_size;
        if types.len() != ids.len() {
            return Err(EncoderError::Unsupported(format!(
                "forward pass: {} token types for {} ids",
                types.len(),
                ids.len()
            )));
        }
        if let Some(&ty) = types.iter().find(|&&ty| ty as usize >= rows.max(1)) {
            return Err(EncoderError::Unsupported(format!(
                "forward pass: token type {ty} outside this model's {rows} token types"
            )));
        }
        host::forward(self, ids, Some(types), lens, t, upto, ws)
    }

    /// tanh(W h + b) of the last layer's first-token vectors `cls` (`rows` of
    /// `hidden`), or `None` without pooler weights.
    pub fn pool(&self, cls: &[f32]) -> Result<Option<Vec<f32>>> {
        let Some(p) = &self.pooler else {
            return Ok(None);
        };
        let mut out = Vec::new();
        host::linear_tanh(p, cls, &mut out)?;
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests;
