//! `/v1/embeddings`' compact outputs: `encoding_format` `int8`, `uint8`,
//! `binary` and `ubinary` answer the codes of the quantizer stage the
//! served calibrator file ends in (core's rules: [`check_stage_request`],
//! [`stage_output`]), as JSON integers or, with `code_encoding: "base64"`,
//! base64 of the raw code bytes.

use base64::Engine as _;
use bertflow_core::quantize::{check_stage_request, stage_output, Output, QuantKind};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// `encoding_format`: OpenAI's `float` and `base64` (little-endian f32),
/// and the codes of sentence-transformers' and Cohere's names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum EncodingFormat {
    #[default]
    Float,
    Base64,
    Int8,
    Uint8,
    Binary,
    Ubinary,
}

impl EncodingFormat {
    /// The code it asks for, if any.
    pub(crate) fn code(self) -> Option<QuantKind> {
        match self {
            EncodingFormat::Float | EncodingFormat::Base64 => None,
            EncodingFormat::Int8 => Some(QuantKind::Int8),
            EncodingFormat::Uint8 => Some(QuantKind::Uint8),
            EncodingFormat::Binary => Some(QuantKind::Binary),
            EncodingFormat::Ubinary => Some(QuantKind::Ubinary),
        }
    }
}

/// bertflow extension `code_encoding`: how codes travel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CodeEncoding {
    /// A JSON array of integers per input: int8 values (`int8`, `binary`)
    /// or 0..255 (`uint8`, `ubinary`).
    #[default]
    Array,
    /// Base64 (with padding) of the code bytes as `bertflow encode` writes
    /// them in its `.npy` (int8 as two's complement).
    Base64,
}

/// One input's code, as sent.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum CodeValue {
    Integers(Vec<i16>),
    Base64(String),
}

/// The encoding formats this server answers: `float`, `base64`, and the
/// two of the quantizer stage's family, if any.
pub(crate) fn formats(stage: Option<&bertflow_core::quantize::Quantizer>) -> Vec<&'static str> {
    let mut out = vec!["float", "base64"];
    match stage.map(|q| q.spec.kind.is_bits()) {
        Some(true) => out.extend(["binary", "ubinary"]),
        Some(false) => out.extend(["int8", "uint8"]),
        None => {}
    }
    out
}

/// Checks a request before anything is embedded: `code_encoding` only with
/// a code format, and core's rules for the stage (422 naming the field).
pub(crate) fn check(
    stage: Option<&bertflow_core::quantize::Quantizer>,
    format: EncodingFormat,
    code_encoding: Option<CodeEncoding>,
    keep: usize,
    normalize: bool,
) -> Result<(), ApiError> {
    let Some(kind) = format.code() else {
        if code_encoding.is_some() {
            return Err(ApiError::invalid(
                Some("code_encoding"),
                "code_encoding applies to the encoding formats int8, uint8, binary and ubinary",
            ));
        }
        return Ok(());
    };
    check_stage_request(stage, kind, keep, normalize).map_err(|e| {
        let (field, message) = e.setting_parts().unwrap_or(("quantize", e.chain()));
        let param = match field {
            "quantize" => "encoding_format",
            other => other,
        };
        ApiError::invalid(Some(param), message)
    })
}

/// The codes of `vectors` (calibrated, cut, normalized as asked) under the
/// stage `q`, one value per row.
pub(crate) fn encode(
    q: &bertflow_core::quantize::Quantizer,
    vectors: &[Vec<f32>],
    kind: QuantKind,
    encoding: CodeEncoding,
) -> Result<Vec<CodeValue>, ApiError> {
    let cols = vectors.first().map_or(q.dim, Vec::len);
    let flat: Vec<f32> = vectors.iter().flatten().copied().collect();
    let x = ndarray::Array2::from_shape_vec((vectors.len(), cols), flat)
        .map_err(|e| ApiError::Internal(format!("vectors of unequal length: {e}")))?;
    let out = stage_output(q, x.view(), kind)
        .map_err(|e| ApiError::Internal(format!("quantizing failed: {}", e.chain())))?;
    let (bytes, signed): (ndarray::Array2<u8>, bool) = match out {
        Output::I8(m) => (m.mapv(|v| v as u8), true),
        Output::U8(m) => (m, false),
        Output::Bits { packed, signed, .. } => {
            let flip = if signed { 0x80 } else { 0 };
            (packed.mapv(|b| b ^ flip), signed)
        }
        Output::F32(_) => {
            return Err(ApiError::Internal(
                "the quantizer stage gave float vectors".into(),
            ))
        }
    };
    Ok(bytes
        .outer_iter()
        .map(|row| match encoding {
            CodeEncoding::Base64 => {
                let raw: Vec<u8> = row.iter().copied().collect();
                CodeValue::Base64(base64::engine::general_purpose::STANDARD.encode(raw))
            }
            CodeEncoding::Array => CodeValue::Integers(
                row.iter()
                    .map(|&b| {
                        if signed {
                            i16::from(b as i8)
                        } else {
                            i16::from(b)
                        }
                    })
                    .collect(),
            ),
        })
        .collect())
}
