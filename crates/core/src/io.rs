//! Reading sentences and writing embeddings (.npy, .jsonl, .safetensors).
use crate::bail;
use crate::error::{Context, CoreError, Result};
use ndarray::Array2;
use std::collections::HashMap;
use std::path::Path;

/// What to do with empty (or whitespace-only) input lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EmptyLines {
    /// Stop with an error naming the first empty line (default: an empty line is
    /// usually a mistake, and a vector for it would be meaningless).
    Error,
    /// Drop empty lines; output rows then follow the non-empty lines (JSONL output
    /// records each row's 1-based input line).
    Skip,
    /// Embed them as the empty sentence ([CLS] [SEP]).
    Keep,
}

/// Input sentences with their 1-based line numbers.
pub struct Input {
    pub texts: Vec<String>,
    pub lines: Vec<usize>,
}

/// Read one sentence per line, or JSONL with a "text" field (by extension .jsonl /
/// .ndjson / .json, as the Spark job reads them, or `jsonl = true`). `-` reads standard input.
pub fn read_sentences(path: &Path, jsonl: bool, empty: EmptyLines) -> Result<Input> {
    let name = path.display().to_string();
    let bytes = if name == "-" {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
            .map_err(CoreError::io("read", Path::new("standard input")))?;
        b
    } else {
        std::fs::read(path).map_err(CoreError::io("read input file", path))?
    };
    let jsonl = jsonl
        || matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("jsonl" | "ndjson" | "json")
        );
    let mut texts = Vec::new();
    let mut lines = Vec::new();
    let mut raw: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    if raw.last().is_some_and(|l| l.is_empty()) {
        raw.pop(); // the final newline
    }
    for (i, line) in raw.iter().enumerate() {
        let lineno = i + 1;
        let line = std::str::from_utf8(line).map_err(|e| {
            CoreError::Input(format!(
                "{name}:{lineno}: invalid UTF-8 (byte {} of the line)",
                e.valid_up_to() + 1
            ))
        })?;
        let line = line.strip_suffix('\r').unwrap_or(line);
        let line = if lineno == 1 {
            line.strip_prefix('\u{feff}').unwrap_or(line)
        } else {
            line
        };
        let text = if jsonl {
            if line.trim().is_empty() {
                String::new()
            } else {
                let v: serde_json::Value = serde_json::from_str(line)
                    .with_context(|| format!("{name}:{lineno}: not a JSON object"))?;
                match v.get("text") {
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(_) => bail!("{name}:{lineno}: field \"text\" is not a string"),
                    None => bail!("{name}:{lineno}: no \"text\" field"),
                }
            }
        } else {
            line.to_string()
        };
        if text.trim().is_empty() {
            match empty {
                EmptyLines::Error => bail!(
                    "{name}:{lineno}: empty line; pass --empty skip to drop empty lines or --empty keep to embed them"
                ),
                EmptyLines::Skip => continue,
                EmptyLines::Keep => {}
            }
        }
        texts.push(text);
        lines.push(lineno);
    }
    if texts.is_empty() {
        bail!("{name}: no sentences to encode (the input is empty)");
    }
    Ok(Input { texts, lines })
}

/// One JSON object a row: `index`, 1-based input `line`, `text`, `embedding`.
fn jsonl_bytes(m: &Array2<f32>, input: &Input) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (i, row) in m.outer_iter().enumerate() {
        let obj = serde_json::json!({
            "index": i,
            "line": input.lines[i],
            "text": input.texts[i],
            "embedding": row.to_vec(),
        });
        serde_json::to_writer(&mut out, &obj)?;
        out.push(b'\n');
    }
    Ok(out)
}

/// Write `m` by the extension of `path`: .npy, .jsonl or .safetensors; `-`
/// writes JSONL to standard output.
pub fn write_embeddings(
    path: &Path,
    m: &Array2<f32>,
    input: &Input,
    meta: &HashMap<String, String>,
) -> Result<()> {
    if path.as_os_str() == "-" {
        let bytes = jsonl_bytes(m, input)?;
        let mut out = std::io::stdout().lock();
        return std::io::Write::write_all(&mut out, &bytes)
            .and_then(|_| std::io::Write::flush(&mut out))
            .map_err(CoreError::io("write", Path::new("standard output")));
    }
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let bytes = match ext {
        "npy" => npy_bytes(m),
        "jsonl" => jsonl_bytes(m, input)?,
        "safetensors" => {
            let data: Vec<u8> = m.iter().flat_map(|v| v.to_le_bytes()).collect();
            let view = safetensors::tensor::TensorView::new(
                safetensors::Dtype::F32,
                vec![m.nrows(), m.ncols()],
                &data,
            )?;
            safetensors::tensor::serialize([("embeddings", view)], Some(meta.clone()))?
        }
        _ => bail!(
            "unknown output format '{}': use .npy, .jsonl or .safetensors (or - for JSONL on standard output)",
            path.display()
        ),
    };
    Ok(bertflow_durable::write(path, bytes)?)
}

/// A NumPy .npy (format 1.0) of little-endian float32, C order.
pub fn npy_bytes(m: &Array2<f32>) -> Vec<u8> {
    let mut out = crate::matrix_file::npy_header_bytes(m.nrows(), m.ncols());
    out.reserve(m.len() * 4);
    for v in m.iter() {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}
