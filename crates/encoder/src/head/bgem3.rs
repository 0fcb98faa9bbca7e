//! BGE-M3's extra heads, as FlagEmbedding's `BGEM3` saves them beside the
//! XLM-RoBERTa weights: `sparse_linear.pt` (`weight` `[1, h]`, `bias` `[1]`)
//! and `colbert_linear.pt` (`weight` `[d, h]`, `bias` `[d]`), each a
//! `torch.save`d state dict.
//!
//! The published formulas (FlagEmbedding `BGEM3FlagModel`):
//! - sparse: `relu(sparse_linear(h_t))` per token, the largest weight per token
//!   id, the ids of the `cls`, `eos`, `pad` and `unk` tokens and zero weights dropped;
//! - colbert: `normalize(colbert_linear(h_t))` for the tokens after the first
//!   (padding dropped);
//! - dense: `normalize(h_0)`.
use crate::error::{EncoderError, Result};
use bertflow_kernels::PackedLinear;
use std::collections::HashMap;
use std::path::Path;

/// The file names of the heads in the model directory.
pub const SPARSE_FILE: &str = "sparse_linear.pt";
pub const COLBERT_FILE: &str = "colbert_linear.pt";

/// A tensor's shape and its values as f32.
type Tensor = (Vec<usize>, Vec<f32>);

/// The tensors of a `torch.save`d state dict as f32 values with their shape.
/// The one place that reads `.pt` heads.
fn read_state_dict(path: &Path) -> Result<HashMap<String, Tensor>> {
    Ok(crate::checkpoint::read_torch_state_dict(path)?
        .into_iter()
        .map(|(name, dims, values)| (name, (dims, values)))
        .collect())
}

/// `weight` `[d_out, d_in]` and `bias` `[d_out]` of the state dict at `path`
/// (`d_out` read from the file when `None`).
fn linear(path: &Path, d_in: usize, d_out: Option<usize>) -> Result<(Vec<f32>, Vec<f32>, usize)> {
    let mut sd = read_state_dict(path)?;
    let bad = |msg: String| EncoderError::BadFile {
        path: path.to_path_buf(),
        msg,
    };
    let (wd, w) = sd
        .remove("weight")
        .ok_or_else(|| bad("no `weight` tensor".into()))?;
    let n = match (wd.as_slice(), d_out) {
        ([n, k], None) if *k == d_in && *n > 0 => *n,
        ([n, k], Some(d)) if *k == d_in && *n == d => d,
        _ => {
            return Err(bad(format!(
                "`weight` has shape {wd:?}, expected [{}, {d_in}]",
                d_out.map_or("d".to_string(), |d| d.to_string())
            )))
        }
    };
    let b = match sd.remove("bias") {
        Some((bd, b)) if bd == [n] => b,
        Some((bd, _)) => return Err(bad(format!("`bias` has shape {bd:?}, expected [{n}]"))),
        None => vec![0.0; n],
    };
    if let Some(x) = w.iter().chain(&b).find(|x| !x.is_finite()) {
        return Err(bad(format!("holds a non-finite value ({x})")));
    }
    Ok((w, b, n))
}

/// `sparse_linear`: one weight per token.
pub(crate) struct TokenWeights {
    w: Vec<f32>,
    b: f32,
}

impl TokenWeights {
    pub(crate) fn load(path: &Path, hidden: usize) -> Result<Self> {
        let (w, b, _) = linear(path, hidden, Some(1))?;
        Ok(Self { w, b: b[0] })
    }

    /// `relu(w . h + b)` of each row of `x`.
    pub(crate) fn weights(&self, x: &[f32]) -> Vec<f32> {
        x.chunks_exact(self.w.len())
            .map(|row| {
                let dot: f32 = row.iter().zip(&self.w).map(|(a, b)| a * b).sum();
                (dot + self.b).max(0.0)
            })
            .collect()
    }
}

/// `colbert_linear` (`[d, hidden]`, bias), as a packed fp32 product.
pub(crate) fn projection(path: &Path, hidden: usize) -> Result<PackedLinear> {
    let (w, b, n) = linear(path, hidden, None)?;
    PackedLinear::new(&w, &b, n, hidden).map_err(|e| EncoderError::BadFile {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })
}
