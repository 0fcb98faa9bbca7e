//! Checkpoint tensors by name. Names mirror the Hugging Face checkpoint
//! (`encoder.layer.3.attention.self.query.weight`); the architecture's base-model
//! prefix (`bert.` as in BertForPreTraining checkpoints such as
//! bert-base-uncased, `roberta.`, `distilbert.`, `mpnet.`, `model.`) and the old
//! TensorFlow-era `gamma`/`beta` names of LayerNorm parameters are accepted.
use crate::checkpoint::{read_safetensors, read_torch, HostTensor};
use crate::error::{EncoderError, Result};
use crate::family::Architecture;
use crate::files::WeightsFile;
use std::collections::HashMap;

pub struct Weights {
    tensors: HashMap<String, HostTensor>,
    prefix: String,
}

impl Weights {
    /// The tensors of `file`, named without the prefix that `arch`'s checkpoints
    /// may carry.
    pub fn load(file: &WeightsFile, arch: Architecture) -> Result<Self> {
        let tensors: HashMap<String, HostTensor> = match file {
            WeightsFile::Safetensors(p) => read_safetensors(p)?,
            WeightsFile::Pytorch(p) => read_torch(p)?,
        }
        .into_iter()
        .collect();
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
    pub(crate) fn from_tensors(tensors: HashMap<String, HostTensor>) -> Self {
        Self {
            tensors,
            prefix: String::new(),
        }
    }

    /// The tensors by full name (unit tests derive models from others).
    #[cfg(test)]
    pub(crate) fn clone_tensors(&self) -> HashMap<String, HostTensor> {
        self.tensors.clone()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(&format!("{}{name}", self.prefix))
    }

    /// The tensor `name` (without the model prefix) as f32 with the expected shape.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<HostTensor> {
        let values = self.vec(name, shape)?;
        HostTensor::from_f32(shape.to_vec(), &values)
    }

    /// Whether the checkpoint has `name` outside the base model (a task head's
    /// `classifier.weight`), as written.
    pub fn contains_top(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// [`Weights::vec`] of a tensor outside the base model, named as written.
    pub fn vec_top(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        self.get_full(name.to_string(), shape)
    }

    /// The values of tensor `full` (as named in the file), checked to have
    /// `shape` and finite values.
    fn get_full(&self, full: String, shape: &[usize]) -> Result<Vec<f32>> {
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
        if t.shape() != shape {
            return Err(EncoderError::Weights(format!(
                "tensor {full} has shape {:?}, expected {:?}",
                t.shape(),
                shape
            )));
        }
        // A NaN or infinite weight makes every output NaN: refuse it here,
        // naming the tensor, rather than answer NaN vectors.
        let values = t.to_f32();
        if let Some(k) = values.iter().position(|x| !x.is_finite()) {
            return Err(EncoderError::Weights(format!(
                "tensor {full} holds a non-finite value ({}) at element {k}",
                values[k]
            )));
        }
        Ok(values)
    }

    /// [`Weights::get`] as host values, row-major.
    pub fn vec(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        self.get_full(format!("{}{name}", self.prefix), shape)
    }
}
