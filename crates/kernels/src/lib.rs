//! bertflow-kernels: CPU kernels for the encoder.
//!
//! - [`int8`]: `y = act(dequant(q(x) · Wq^T) + b)` with weights quantised per output
//!   channel to s8 and packed at load, activations quantised per row to u8 at run
//!   time (8 bits for the AVX512-VNNI, AVX-VNNI and portable kernels, 7 for AVX2);
//!   integer products by a register-blocked AVX512-VNNI, AVX-VNNI (256-bit), AVX2 or
//!   portable kernel, chosen at run time ([`Isa`]). Each kernel is bit-exact against
//!   its scalar model.
//! - [`fp32`]: `y = act(x W^T + b [+ residual])` in fp32 with the weights packed
//!   once at load into 64-channel blocks, by a register-blocked AVX-512, AVX2 or
//!   portable micro-kernel chosen at run time, bias, residual and activation fused.
//! - [`act`]: the vectorisable exact-erf GELU shared with the fp32 path.
//! - [`norm`]: LayerNorm and RMSNorm over rows.
//! - [`attention`]: self-attention read in place from the fused QKV product, with
//!   an optional additive score bias and sliding window ([`AttnOpts`]).
//! - [`tune`]: the kernels timed on a model's layer shapes (the encoder keeps the
//!   fastest per CPU), the CPU key of a cached choice, one core's FMA/VNNI peak.
//! - [`rope`]: rotary position embeddings applied in place to the fused QKV
//!   rows, and the gated activations (GeGLU; SwiGLU and Gemma's tanh-GELU gate:
//!   [`glu`]) of gated feed-forward layers.
pub mod act;
pub mod attention;
pub mod codes;
pub mod fp32;
pub mod int8;
pub mod norm;
pub mod rope;
pub mod tune;

pub use act::{gelu_erf, gelu_erf_inplace, gelu_poly, Act};
pub use attention::{attention, AttnOpts, AttnShape};
pub use fp32::{Fp32Error, PackedLinear};
pub use int8::{Isa, KernelError, QuantInput, QuantLinear};
pub use norm::{layer_norm, rms_norm, ShapeError};
pub use rope::{gated_act, glu, rope_qk, Glu, RopeTable};
