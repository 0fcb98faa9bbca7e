//! The BERT forward pass, returning every hidden state.
//!
//! Hidden state 0 is the embedding output (word + position + token-type
//! embeddings, then LayerNorm); hidden state `i` (1..=num_hidden_layers) is the
//! output of transformer layer `i`. This matches `output_hidden_states=True` in
//! Hugging Face transformers.
use crate::config::{BertConfig, HiddenAct};
use crate::error::{EncoderError, Result};
use crate::precision::Precision;
use crate::weights::Weights;
use bertflow_kernels::{Act, Isa, QuantLinear};
use candle_core::{Device, Tensor};
use ops::{BiasAct, BiasResidual, Int8Linear};

mod host;
mod ops;
pub use host::Workspace;

/// y = x W^T + b, with W^T stored contiguous for the matrix product.
struct Linear {
    w_t: Tensor,
    b: Tensor,
    /// `b` on the host, for the fused CPU epilogues.
    b_host: Vec<f32>,
    /// The int8 form and its kernel, with `--precision int8` (CPU only).
    q: Option<(QuantLinear, Isa)>,
}

impl Linear {
    fn new(weight: Tensor, b: Tensor) -> Result<Self> {
        let b_host = b.to_vec1::<f32>()?;
        Ok(Self {
            w_t: weight.t()?.contiguous()?,
            b,
            b_host,
            q: None,
        })
    }

    /// Switch the products to int8 (weights quantised per output channel now).
    fn quantize(&mut self, isa: Isa) -> Result<()> {
        let (k, n) = self.w_t.dims2()?;
        let w = self
            .w_t
            .t()?
            .contiguous()?
            .flatten_all()?
            .to_vec1::<f32>()?;
        self.q = Some((QuantLinear::new(&w, &self.b_host, n, k)?, isa));
        Ok(())
    }

    fn load(w: &Weights, name: &str, d_in: usize, d_out: usize) -> Result<Self> {
        let weight = w.get(&format!("{name}.weight"), &[d_out, d_in])?;
        let b = w.get(&format!("{name}.bias"), &[d_out])?;
        Self::new(weight, b)
    }

    /// `x`: [n, d_in] -> [n, d_out]
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.matmul(&self.w_t)?.broadcast_add(&self.b)?)
    }

    /// act(x W^T + b): on the CPU the bias and the activation are applied in one
    /// pass over the fresh product, in place.
    fn forward_act(&self, x: &Tensor, act: Act) -> Result<Tensor> {
        if let Some((lin, isa)) = &self.q {
            return Ok(x.apply_op1_no_bwd(&Int8Linear {
                lin,
                isa: *isa,
                act,
            })?);
        }
        let y = x.matmul(&self.w_t)?;
        if y.device().is_cpu() && y.is_contiguous() {
            y.inplace_op1(&BiasAct {
                bias: &self.b_host,
                act,
            })?;
            return Ok(y);
        }
        let y = y.broadcast_add(&self.b)?;
        Ok(match act {
            Act::None => y,
            Act::GeluErf => y.gelu_erf()?,
            Act::Relu => y.relu()?,
        })
    }

    /// x W^T + b + residual, fused on the CPU like [`Linear::forward_act`].
    fn forward_residual(&self, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        if let Some((lin, isa)) = &self.q {
            return Ok(x.apply_op2_no_bwd(
                residual,
                &Int8Linear {
                    lin,
                    isa: *isa,
                    act: Act::None,
                },
            )?);
        }
        let y = x.matmul(&self.w_t)?;
        if y.device().is_cpu() && y.is_contiguous() && residual.is_contiguous() {
            y.inplace_op2(residual, &BiasResidual { bias: &self.b_host })?;
            return Ok(y);
        }
        Ok((y.broadcast_add(&self.b)? + residual)?)
    }
}

struct LayerNorm {
    w: Tensor,
    b: Tensor,
    /// `w` and `b` on the host, for the CPU forward pass.
    w_host: Vec<f32>,
    b_host: Vec<f32>,
    eps: f32,
}

impl LayerNorm {
    fn load(w: &Weights, name: &str, h: usize, eps: f64) -> Result<Self> {
        let (w, b) = (
            w.get(&format!("{name}.weight"), &[h])?,
            w.get(&format!("{name}.bias"), &[h])?,
        );
        Ok(Self {
            w_host: w.to_vec1()?,
            b_host: b.to_vec1()?,
            w,
            b,
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
    fn quantize(&mut self, isa: Isa) -> Result<()> {
        for lin in [
            &mut self.qkv,
            &mut self.attn_out,
            &mut self.intermediate,
            &mut self.output,
        ] {
            lin.quantize(isa)?;
        }
        Ok(())
    }

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
            qkv: Linear::new(weight, bias)?,
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
            .forward_act(x, Act::None)?
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
        let h1 = self
            .attn_ln
            .forward(&self.attn_out.forward_residual(&ctx, x)?)?;
        let inter = match cfg.hidden_act {
            HiddenAct::Gelu => self.intermediate.forward_act(&h1, Act::GeluErf)?,
            HiddenAct::GeluApprox => self.intermediate.forward_act(&h1, Act::None)?.gelu()?,
            HiddenAct::Relu => self.intermediate.forward_act(&h1, Act::Relu)?,
        };
        self.out_ln
            .forward(&self.output.forward_residual(&inter, &h1)?)
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
    precision: Precision,
}

impl BertModel {
    /// Load with f32 linear layers.
    pub fn load(w: &Weights, config: BertConfig, device: &Device) -> Result<Self> {
        Self::load_with_precision(w, config, device, Precision::Fp32)
    }

    /// Load; with [`Precision::Int8`] the transformer layers' linear products run
    /// in int8 (bertflow-kernels, kernel from `BERTFLOW_INT8_KERNEL` or the best
    /// this CPU has). int8 needs the CPU device.
    pub fn load_with_precision(
        w: &Weights,
        config: BertConfig,
        device: &Device,
        precision: Precision,
    ) -> Result<Self> {
        if precision == Precision::Int8 && !device.is_cpu() {
            return Err(crate::error::EncoderError::Precision(
                "int8 runs on the CPU only".into(),
            ));
        }
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
        let mut layers = (0..config.num_hidden_layers)
            .map(|i| Layer::load(w, i, &config))
            .collect::<Result<Vec<_>>>()?;
        if precision == Precision::Int8 {
            let isa = Isa::selected()?;
            for l in &mut layers {
                l.quantize(isa)?;
            }
        }
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
            precision,
        })
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    pub fn has_pooler(&self) -> bool {
        self.pooler.is_some()
    }

    /// The static word-embedding matrix [vocab, hidden] (no position or LayerNorm).
    pub fn word_embeddings(&self) -> &Tensor {
        &self.word
    }

    /// Errors unless `ids` holds `lens.len()` rows of `t` ids below the vocabulary
    /// size, every length is in `1..=t`, `t` fits the position table and `upto` is
    /// a layer of this model.
    fn check_batch(&self, ids: &[u32], lens: &[usize], t: usize, upto: usize) -> Result<()> {
        let cfg = &self.config;
        let bad = |msg: String| Err(EncoderError::Unsupported(format!("forward pass: {msg}")));
        if ids.len() != lens.len() * t {
            return bad(format!("{} ids for {} rows of {t}", ids.len(), lens.len()));
        }
        if t > cfg.max_position_embeddings {
            return bad(format!(
                "{t} tokens exceed the {} positions",
                cfg.max_position_embeddings
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
        if upto > self.layers.len() {
            return bad(format!("layer {upto} of {}", self.layers.len()));
        }
        Ok(())
    }

    /// Forward a padded batch into `ws` (see [`BertModel::forward`] for the
    /// arguments); read the hidden states with [`Workspace::states`]. fp32 and int8
    /// on the CPU run the allocation-free forward pass of [`host`]; other devices
    /// run [`BertModel::forward`] and copy its states to the host.
    pub fn forward_into(
        &self,
        ids: &[u32],
        lens: &[usize],
        t: usize,
        upto: usize,
        ws: &mut Workspace,
    ) -> Result<()> {
        if matches!(self.precision, Precision::Fp32 | Precision::Int8) && self.device.is_cpu() {
            self.check_batch(ids, lens, t, upto)?;
            return host::forward(self, ids, lens, t, upto, ws);
        }
        let states = self.forward(ids, lens, t, upto)?;
        ws.set_states(&states)
    }

    /// Forward a padded batch through candle tensors. `ids`: b rows of equal
    /// length t (padded with the pad id), `lens`: the real length of each row.
    /// Returns hidden states `0..=upto`, each [b, t, hidden]; layers above `upto`
    /// are not computed.
    pub fn forward(
        &self,
        ids: &[u32],
        lens: &[usize],
        t: usize,
        upto: usize,
    ) -> Result<Vec<Tensor>> {
        self.check_batch(ids, lens, t, upto)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use bertflow_kernels::act::{gelu_erf_inplace, gelu_erf_slice};

    #[test]
    fn fast_gelu_erf_matches_candle() {
        let xs: Vec<f32> = (-20_000..=20_000)
            .map(|i| i as f32 * 1e-3)
            .chain([-300.0, -90.0, 90.0, 300.0, 0.0, -0.0])
            .collect();
        let want = Tensor::new(xs.as_slice(), &Device::Cpu)
            .unwrap()
            .gelu_erf()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let mut got = xs.clone();
        gelu_erf_inplace(&mut got);
        for ((x, g), w) in xs.iter().zip(&got).zip(&want) {
            let tol = 4e-7 * x.abs().max(1.0);
            assert!((g - w).abs() <= tol, "gelu_erf({x}) = {g}, want {w}");
        }
        let mut odd = xs.clone();
        gelu_erf_slice(&mut odd);
        assert_eq!(odd, got, "the SIMD and baseline builds agree bit for bit");
    }

    #[test]
    fn fused_linear_epilogues_match_the_plain_ops() {
        let dev = Device::Cpu;
        let w = Tensor::new(&[[0.5f32, -1.0, 2.0], [1.5, 0.25, -0.75]], &dev).unwrap();
        let b = Tensor::new(&[0.1f32, -0.2], &dev).unwrap();
        let lin = Linear::new(w, b).unwrap();
        let x = Tensor::new(&[[1.0f32, 2.0, 3.0], [-1.0, 0.5, 4.0]], &dev).unwrap();
        let r = Tensor::new(&[[0.3f32, -0.4], [1.0, 2.0]], &dev).unwrap();
        let plain = lin.forward(&x).unwrap();
        let close = |a: &Tensor, b: &Tensor| {
            let d = (a - b)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(d < 1e-6, "max abs diff {d}");
        };
        close(&lin.forward_act(&x, Act::None).unwrap(), &plain);
        close(
            &lin.forward_act(&x, Act::Relu).unwrap(),
            &plain.relu().unwrap(),
        );
        close(
            &lin.forward_act(&x, Act::GeluErf).unwrap(),
            &plain.gelu_erf().unwrap(),
        );
        close(
            &lin.forward_residual(&x, &r).unwrap(),
            &(&plain + &r).unwrap(),
        );
    }
}
