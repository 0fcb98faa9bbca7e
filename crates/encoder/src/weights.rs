//! Checkpoint tensors by name. Names mirror the Hugging Face checkpoint
//! (`encoder.layer.3.attention.self.query.weight`); the architecture's base-model
//! prefix (`bert.` as in BertForPreTraining checkpoints such as
//! bert-base-uncased, `roberta.`, `distilbert.`, `mpnet.`, `model.`) and the old
//! TensorFlow-era `gamma`/`beta` names of LayerNorm parameters are accepted.
use crate::error::{EncoderError, Result};
use crate::family::Architecture;
use crate::files::WeightsFile;
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;

pub struct Weights {
    tensors: HashMap<String, Tensor>,
    prefix: String,
}

impl Weights {
    /// The tensors of `file`, named without the prefix that `arch`'s checkpoints
    /// may carry.
    pub fn load(file: &WeightsFile, arch: Architecture) -> Result<Self> {
        let device = &Device::Cpu;
        let tensors: HashMap<String, Tensor> = match file {
            WeightsFile::Safetensors(p) => {
                candle_core::safetensors::load(p, device).map_err(|e| EncoderError::BadFile {
                    path: p.clone(),
                    msg: e.to_string(),
                })?
            }
            WeightsFile::Pytorch(p) => candle_core::pickle::read_all(p)
                .map_err(|e| EncoderError::BadFile {
                    path: p.clone(),
                    msg: e.to_string(),
                })?
                .into_iter()
                .collect(),
        };
        let anchor = arch.anchor();
        let prefix = arch
            .prefixes()
            .iter()
            .find(|p| tensors.contains_key(&format!("{p}{anchor}")))
            .ok_or_else(|| {
                let mut names: Vec<_> = tensors.keys().cloned().collect();
                names.sort();
                names.truncate(5);
                EncoderError::Weights(format!(
                    "no embeddings tensor ({anchor}, optionally prefixed by {}) in the checkpoint; first names: {}",
                    arch.prefixes()[1..].join(" "),
                    names.join(", ")
                ))
            })?
            .to_string();
        Ok(Self { tensors, prefix })
    }

    /// Weights from named tensors (unit tests build small random models).
    #[cfg(test)]
    pub(crate) fn from_tensors(tensors: HashMap<String, Tensor>) -> Self {
        Self {
            tensors,
            prefix: String::new(),
        }
    }

    /// The tensors by full name (unit tests derive models from others).
    #[cfg(test)]
    pub(crate) fn clone_tensors(&self) -> HashMap<String, Tensor> {
        self.tensors.clone()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(&format!("{}{name}", self.prefix))
    }

    /// The tensor `name` (without the model prefix) as f32 with the expected shape.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.get_full(format!("{}{name}", self.prefix), shape)
    }

    /// Whether the checkpoint has `name` outside the base model (a task head's
    /// `classifier.weight`), as written.
    pub fn contains_top(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// [`Weights::vec`] of a tensor outside the base model, named as written.
    pub fn vec_top(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        Ok(self
            .get_full(name.to_string(), shape)?
            .flatten_all()?
            .to_vec1::<f32>()?)
    }

    fn get_full(&self, full: String, shape: &[usize]) -> Result<Tensor> {
        let t = self
            .tensors
            .get(&full)
            .or_else(|| {
                let alt = full
                    .strip_suffix(".weight")
                    .map(|s| format!("{s}.gamma"))
                    .or_else(|| full.strip_suffix(".bias").map(|s| format!("{s}.beta")))?;
                if full.contains("LayerNorm") {
                    self.tensors.get(&alt)
                } else {
                    None
                }
            })
            .ok_or_else(|| EncoderError::Weights(format!("missing tensor {full}")))?;
        if t.dims() != shape {
            return Err(EncoderError::Weights(format!(
                "tensor {full} has shape {:?}, expected {:?}",
                t.dims(),
                shape
            )));
        }
        let t = t.to_dtype(DType::F32)?;
        // A NaN or infinite weight makes every output NaN: refuse it here,
        // naming the tensor, rather than answer NaN vectors.
        let values = t.flatten_all()?.to_vec1::<f32>()?;
        if let Some(k) = values.iter().position(|x| !x.is_finite()) {
            return Err(EncoderError::Weights(format!(
                "tensor {full} holds a non-finite value ({}) at element {k}",
                values[k]
            )));
        }
        Ok(t)
    }

    /// [`Weights::get`] as host values, row-major.
    pub fn vec(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        Ok(self.get(name, shape)?.flatten_all()?.to_vec1::<f32>()?)
    }
}
