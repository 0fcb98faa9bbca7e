//! Numeric precision of the linear layers.
use crate::error::EncoderError;
use std::fmt;
use std::str::FromStr;

/// How the encoder's linear layers (Q/K/V, attention output, FFN) compute.
/// Embeddings, LayerNorm, softmax and the attention products stay f32.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 everywhere (the reference).
    #[default]
    Fp32,
    /// s8 weights per output channel, 7-bit u8 activations per row, i32 products
    /// (bertflow-kernels: AVX512-VNNI, AVX2 or portable, chosen at run time).
    Int8,
    /// bf16 products on AVX512-BF16 CPUs. Not implemented yet: always an error.
    Bf16,
}

impl Precision {
    pub const NAMES: [&'static str; 3] = ["fp32", "int8", "bf16"];

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Int8 => "int8",
            Precision::Bf16 => "bf16",
        }
    }

    /// An error when this CPU (or this build) cannot run the precision.
    pub fn check_supported(self) -> Result<(), EncoderError> {
        match self {
            Precision::Fp32 | Precision::Int8 => Ok(()),
            Precision::Bf16 => {
                #[cfg(target_arch = "x86_64")]
                let has = std::arch::is_x86_feature_detected!("avx512bf16");
                #[cfg(not(target_arch = "x86_64"))]
                let has = false;
                Err(EncoderError::Precision(if has {
                    "bf16 is not implemented yet; use fp32 or int8".into()
                } else {
                    "bf16 needs a CPU with AVX512-BF16, and this CPU has no AVX512-BF16; use fp32 or int8".into()
                }))
            }
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = EncoderError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" | "f32" => Ok(Precision::Fp32),
            "int8" | "i8" => Ok(Precision::Int8),
            "bf16" => Ok(Precision::Bf16),
            _ => Err(EncoderError::Precision(format!(
                "unknown precision '{s}'; valid: {}",
                Precision::NAMES.join(", ")
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print_round_trip() {
        for name in Precision::NAMES {
            assert_eq!(name.parse::<Precision>().unwrap().to_string(), name);
        }
        assert_eq!("F32".parse::<Precision>().unwrap(), Precision::Fp32);
        assert!("int4".parse::<Precision>().is_err());
        assert_eq!(Precision::default(), Precision::Fp32);
    }

    #[test]
    fn bf16_is_an_error_and_says_why() {
        let e = Precision::Bf16.check_supported().unwrap_err().to_string();
        assert!(e.contains("bf16"), "{e}");
        assert!(Precision::Int8.check_supported().is_ok());
    }
}
