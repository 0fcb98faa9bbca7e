//! bertflow-encoder: load an encoder checkpoint in Hugging Face layout (BERT,
//! the RoBERTa family, DistilBERT, MPNet, ModernBERT) and turn sentences into vectors with
//! an unambiguous pooling.
//!
//! - [`files`]: find config, weights and tokenizer (directory, sentence-transformers
//!   layout, or a hub id in the local Hugging Face cache).
//! - [`arch`]: the architectures, chosen by `config.json`'s `model_type`.
//! - [`engine`]: the forward pass, returning every hidden state (0 = embeddings).
//! - [`pooling`]: the poolings and the hidden states each one reads.
//! - [`encoder`]: batching sorted by length on worker threads, order restored.
//! - [`precision`]: fp32 or int8 linear layers (bertflow-kernels).
//! - [`checkpoint`]: safetensors and `torch.save` files read into host tensors.
//! - [`cache`]: on-disk cache of encoded matrices with integrity checks.
//! - [`tuning`]: the fp32 and int8 kernels, chosen by measurement once per CPU
//!   (cached in `kernels.json`), by the environment, or by rule.
//! - [`weighting`]: per-token weights (SIF, uSIF) for the averaging poolings.
//! - [`head`]: sequence-classification heads (cross-encoders, rerankers) and the
//!   retrieval heads (SPLADE, BGE-M3's sparse and ColBERT heads, per-token vectors).
//! - [`st`]: the `st` pooling, a sentence-transformers directory's own pipeline.
pub mod arch;
pub mod cache;
pub mod checkpoint;
pub mod config;
pub mod encoder;
pub mod engine;
pub mod error;
mod family;
pub mod files;
pub mod head;
pub mod pooling;
pub mod precision;
pub mod st;
pub mod token_mean;
pub mod tokenize;
pub mod tuning;
pub mod weighting;
mod weights;
mod workers;

pub use arch::Architecture;
/// The kernels crate, for front ends that show or time the kernels.
pub use bertflow_kernels as kernels;
pub use cache::{CachedEntry, EmbeddingCache};
pub use encoder::{EncodeOptions, Encoded, Encoder};
pub use error::{EncoderError, Result};
pub use files::ModelFiles;
pub use head::{CrossEncoder, RetrievalEncoder, SparseVector};
pub use pooling::{PoolSource, Pooling, POOLINGS};
pub use precision::Precision;
pub use tuning::{KernelChoice, TuneOptions};
pub use weighting::{Scheme, TokenCounts, TokenWeights, WeightingSpec};
