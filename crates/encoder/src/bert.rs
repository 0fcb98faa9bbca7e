//! The BERT forward pass, returning every hidden state.
//!
//! Hidden state 0 is the embedding output (word + position + token-type
//! embeddings, then LayerNorm); hidden state `i` (1..=num_hidden_layers) is the
//! output of transformer layer `i`. This matches `output_hidden_states=True` in
//! Hugging Face transformers.
use crate::config::{BertConfig, HiddenAct};
use crate::error::Result;
use crate::weights::Weights;
use candle_core::{Device, Tensor};

/// y = x W^T + b, with W^T stored contiguous for the matrix product.
struct Linear {
    w_t: Tensor,
    b: Tensor,
}

impl Linear {
    fn load(w: &Weights, name: &str, d_in: usize, d_out: usize) -> Result<Self> {
        let weight = w.get(&format!("{name}.weight"), &[d_out, d_in])?;
        let b = w.get(&format!("{name}.bias"), &[d_out])?;
        Ok(Self {
            w_t: weight.t()?.contiguous()?,
            b,
        })
    }

    /// `x`: [n, d_in] -> [n, d_out]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.matmul(&self.w_t)?.broadcast_add(&self.b)?)
    }
}

struct LayerNorm {
    w: Tensor,
    b: Tensor,
    eps: f32,
}

impl LayerNorm {
    fn load(w: &Weights, name: &str, h: usize, eps: f64) -> Result<Self> {
        Ok(Self {
            w: w.get(&format!("{name}.weight"), &[h])?,
            b: w.get(&format!("{name}.bias"), &[h])?,
            eps: eps as f32,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::layer_norm(x, &self.w, &self.b, self.eps)?)
    }
}

struct Layer {
    /// Query, key and value projections fused into one [H, 3H] product; the
    /// 1/sqrt(head_dim) score scale is folded into the query part.
    qkv: Linear,
    attn_out: Linear,
    attn_ln: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_ln: LayerNorm,
}

impl Layer {
    fn load(w: &Weights, i: usize, cfg: &BertConfig) -> Result<Self> {
        let h = cfg.hidden_size;
        let p = format!("encoder.layer.{i}");
        let scale = 1.0 / (cfg.head_dim() as f64).sqrt();
        let get = |n: &str, shape: &[usize]| w.get(&format!("{p}.attention.self.{n}"), shape);
        let qw = (get("query.weight", &[h, h])? * scale)?;
        let qb = (get("query.bias", &[h])? * scale)?;
        let weight = Tensor::cat(
            &[
                qw,
                get("key.weight", &[h, h])?,
                get("value.weight", &[h, h])?,
            ],
            0,
        )?;
        let bias = Tensor::cat(&[qb, get("key.bias", &[h])?, get("value.bias", &[h])?], 0)?;
        Ok(Self {
            qkv: Linear {
                w_t: weight.t()?.contiguous()?,
                b: bias,
            },
            attn_out: Linear::load(w, &format!("{p}.attention.output.dense"), h, h)?,
            attn_ln: LayerNorm::load(
                w,
                &format!("{p}.attention.output.LayerNorm"),
                h,
                cfg.layer_norm_eps,
            )?,
            intermediate: Linear::load(
                w,
                &format!("{p}.intermediate.dense"),
                h,
                cfg.intermediate_size,
            )?,
            output: Linear::load(w, &format!("{p}.output.dense"), cfg.intermediate_size, h)?,
            out_ln: LayerNorm::load(w, &format!("{p}.output.LayerNorm"), h, cfg.layer_norm_eps)?,
        })
    }

    /// `x`: [b*t, h]; `mask_bias`: [b, 1, 1, t] (0 for tokens, very negative for padding).
    fn forward(
        &self,
        x: &Tensor,
        mask_bias: &Tensor,
        b: usize,
        t: usize,
        cfg: &BertConfig,
    ) -> Result<Tensor> {
        let (nh, dh, h) = (cfg.num_attention_heads, cfg.head_dim(), cfg.hidden_size);
        let qkv = self
            .qkv
            .forward(x)?
            .reshape((b, t, 3, nh, dh))?
            .permute((2, 0, 3, 1, 4))?;
        let q = qkv.get(0)?.contiguous()?;
        let k = qkv.get(1)?.contiguous()?;
        let v = qkv.get(2)?.contiguous()?;
        let scores = q.matmul(&k.t()?)?.broadcast_add(mask_bias)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let ctx = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b * t, h))?;
        let h1 = self.attn_ln.forward(&(self.attn_out.forward(&ctx)? + x)?)?;
        let inter = self.intermediate.forward(&h1)?;
        let inter = match cfg.hidden_act {
            HiddenAct::Gelu => inter.gelu_erf()?,
            HiddenAct::GeluApprox => inter.gelu()?,
            HiddenAct::Relu => inter.relu()?,
        };
        Ok(self.out_ln.forward(&(self.output.forward(&inter)? + h1)?)?)
    }
}

/// A BERT encoder whose forward pass returns all hidden states.
pub struct BertModel {
    pub config: BertConfig,
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    emb_ln: LayerNorm,
    layers: Vec<Layer>,
    pooler: Option<Linear>,
    device: Device,
}

impl BertModel {
    pub fn load(w: &Weights, config: BertConfig, device: &Device) -> Result<Self> {
        let h = config.hidden_size;
        let word = w.get("embeddings.word_embeddings.weight", &[config.vocab_size, h])?;
        let position = w.get(
            "embeddings.position_embeddings.weight",
            &[config.max_position_embeddings, h],
        )?;
        let token_type = w.get(
            "embeddings.token_type_embeddings.weight",
            &[config.type_vocab_size, h],
        )?;
        let emb_ln = LayerNorm::load(w, "embeddings.LayerNorm", h, config.layer_norm_eps)?;
        let layers = (0..config.num_hidden_layers)
            .map(|i| Layer::load(w, i, &config))
            .collect::<Result<Vec<_>>>()?;
        let pooler = if w.contains("pooler.dense.weight") {
            Some(Linear::load(w, "pooler.dense", h, h)?)
        } else {
            None
        };
        Ok(Self {
            config,
            word,
            position,
            token_type: token_type.get(0)?,
            emb_ln,
            layers,
            pooler,
            device: device.clone(),
        })
    }

    pub fn has_pooler(&self) -> bool {
        self.pooler.is_some()
    }

    /// The static word-embedding matrix [vocab, hidden] (no position or LayerNorm).
    pub fn word_embeddings(&self) -> &Tensor {
        &self.word
    }

    /// Forward a padded batch. `ids`: b rows of equal length t (padded with the pad
    /// id), `lens`: the real length of each row. Returns hidden states `0..=upto`,
    /// each [b, t, hidden]; layers above `upto` are not computed.
    pub fn forward(
        &self,
        ids: &[u32],
        lens: &[usize],
        t: usize,
        upto: usize,
    ) -> Result<Vec<Tensor>> {
        let b = lens.len();
        let h = self.config.hidden_size;
        let ids_t = Tensor::from_slice(ids, (b * t,), &self.device)?;
        let emb = self
            .word
            .index_select(&ids_t, 0)?
            .reshape((b, t, h))?
            .broadcast_add(&self.position.narrow(0, 0, t)?)?
            .broadcast_add(&self.token_type)?
            .reshape((b * t, h))?;
        let mut x = self.emb_ln.forward(&emb)?;
        let mut bias = vec![0f32; b * t];
        for (row, &len) in lens.iter().enumerate() {
            bias[row * t + len..(row + 1) * t].fill(f32::MIN);
        }
        let mask_bias = Tensor::from_vec(bias, (b, 1, 1, t), &self.device)?;
        let mut states = Vec::with_capacity(upto + 1);
        states.push(x.reshape((b, t, h))?);
        for layer in self.layers.iter().take(upto) {
            x = layer.forward(&x, &mask_bias, b, t, &self.config)?;
            states.push(x.reshape((b, t, h))?);
        }
        Ok(states)
    }

    /// tanh(W h_[CLS] + b) of the last layer's [CLS] vectors `cls`: [b, hidden].
    pub fn pool(&self, cls: &Tensor) -> Result<Option<Tensor>> {
        match &self.pooler {
            Some(p) => Ok(Some(p.forward(cls)?.tanh()?)),
            None => Ok(None),
        }
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }
}
