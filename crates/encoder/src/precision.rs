//! Numeric precision of the linear layers.
use crate::error::EncoderError;
use std::fmt;
use std::str::FromStr;

/// How the encoder's linear layers (Q/K/V, attention output, FFN) compute.
/// Embeddings, LayerNorm, softmax and the attention products stay f32.
/// (There is no bf16: it was a reserved name that only errored, and is gone.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 everywhere (the reference).
    #[default]
    Fp32,
    /// s8 weights per output channel, u8 activations per row (8 bits for the
    /// AVX512-VNNI, AVX-VNNI and portable kernels, 7 for AVX2), i32 products
    /// (bertflow-kernels, kernel chosen at run time).
    Int8,
}

impl Precision {
    pub const NAMES: [&'static str; 2] = ["fp32", "int8"];

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Int8 => "int8",
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
    fn bf16_is_not_a_precision() {
        let e = "bf16".parse::<Precision>().unwrap_err().to_string();
        assert!(e.contains("valid: fp32, int8"), "{e}");
    }
}
