//! bertflow-kernels: CPU kernels for the encoder.
//!
//! - [`int8`]: `y = act(dequant(q(x) · Wq^T) + b)` with weights quantised per output
//!   channel to s8 at load and activations quantised per row to 7-bit u8 at run
//!   time; integer products by an AVX512-VNNI, an AVX2 or a portable kernel, chosen
//!   at run time ([`Isa`]). All paths give bit-identical results.
//! - [`act`]: the vectorisable exact-erf GELU shared with the fp32 path.
//! - [`norm`]: fp32 row epilogues: bias + activation, bias + residual + LayerNorm.
//! - [`attention`]: self-attention read in place from the fused QKV product.
pub mod act;
pub mod attention;
pub mod int8;
pub mod norm;

pub use act::{gelu_erf, gelu_erf_inplace, Act};
pub use attention::{attention, AttnShape};
pub use int8::{Isa, KernelError, QuantLinear};
pub use norm::{bias_act, bias_residual_layer_norm, layer_norm, ShapeError};
