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

impl EmptyLines {
    /// The rules by name, as `--empty` and `empty=` take them.
    pub const NAMES: [&'static str; 3] = ["error", "skip", "keep"];
}

impl std::str::FromStr for EmptyLines {
    type Err = crate::CoreError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "error" => Ok(EmptyLines::Error),
            "skip" => Ok(EmptyLines::Skip),
            "keep" => Ok(EmptyLines::Keep),
            _ => Err(crate::CoreError::setting(
                "empty",
                format!("must be one of {}, got {s:?}", Self::NAMES.join(", ")),
            )),
        }
    }
}

/// Whether a text counts as empty: nothing but whitespace.
pub fn is_blank(text: &str) -> bool {
    text.trim().is_empty()
}

/// The one empty-text rule of every front end (the CLI's `--empty`, the
/// Spark job's `empty=`): which of `texts` to keep. A `None` (a null row) is
/// kept, for the caller to give a null vector. With [`EmptyLines::Error`] the
/// first empty text is a setting error on `empty` naming it as `describe`
/// says (e.g. a file's line, a table's row).
pub fn keep_rows(
    texts: &[Option<&str>],
    rule: EmptyLines,
    describe: impl Fn(usize) -> String,
) -> Result<Vec<bool>> {
    let mut keep = Vec::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        let blank = t.is_some_and(is_blank);
        if blank && rule == EmptyLines::Error {
            return Err(empty_error(&describe(i)));
        }
        keep.push(!(blank && rule == EmptyLines::Skip));
    }
    Ok(keep)
}

/// How [`keep_rows`]'s error ends: the other rules, by their names (a front
/// end that spells the setting its own way, as the CLI's `--empty skip`,
/// replaces it).
pub const EMPTY_RULES_HINT: &str = "`skip` drops empty texts, `keep` embeds them";

fn empty_error(what: &str) -> crate::CoreError {
    crate::CoreError::setting("empty", format!("{what}: empty text; {EMPTY_RULES_HINT}"))
}

/// Most bytes of one input line (a sentence, or a JSONL record). Texts are
/// cut to the model's `max_len` tokens anyway (and by characters before
/// tokenising, see the encoder's `encode_prefix`), so a longer line is a
/// mistake (or not text).
pub const MAX_LINE_BYTES: usize = 64 << 20;
/// Most bytes of one input (file or standard input).
pub const MAX_INPUT_BYTES: u64 = 16 << 30;

/// The bytes of the regular file at `path`, of at most `limit` bytes;
/// `what` names it in errors. Devices (`/dev/zero`), FIFOs and directories
/// are refused without reading them; a file growing while read is cut at
/// `limit` + 1 bytes and refused.
pub fn read_regular_file(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>> {
    bertflow_durable::read_regular(path, limit).map_err(|e| regular_file_error(e, what))
}

/// [`bertflow_durable::ReadError`] as this crate's error, naming the file as
/// `what`.
pub fn regular_file_error(e: bertflow_durable::ReadError, what: &str) -> CoreError {
    use bertflow_durable::ReadError;
    match e {
        ReadError::Io { path, source } => CoreError::Io {
            action: "read",
            path,
            source,
        },
        ReadError::NotRegular { path, kind } => CoreError::Input(format!(
            "{}: the {what} is not a regular file ({kind})",
            path.display()
        )),
        ReadError::TooLarge { path, len, limit } => CoreError::Input(format!(
            "{}: the {what} has {len} bytes, more than the limit of {limit}",
            path.display()
        )),
    }
}

/// [`bertflow_durable::open_regular`] with this crate's errors: the regular
/// file at `path` (never a FIFO or a device), of any size, and its length.
pub fn open_regular_file(path: &Path, what: &str) -> Result<(std::fs::File, u64)> {
    bertflow_durable::open_regular(path, u64::MAX).map_err(|e| regular_file_error(e, what))
}

/// Standard input, line by line, within [`MAX_LINE_BYTES`] per line and
/// [`MAX_INPUT_BYTES`] in all.
fn read_stdin_lines() -> Result<Vec<u8>> {
    use std::io::{BufRead, Read};
    let mut stdin = std::io::stdin().lock();
    let mut bytes = Vec::new();
    let mut lineno = 0usize;
    loop {
        let start = bytes.len();
        let n = (&mut stdin)
            .take(MAX_LINE_BYTES as u64 + 2)
            .read_until(b'\n', &mut bytes)
            .map_err(CoreError::io("read", Path::new("standard input")))?;
        if n == 0 {
            return Ok(bytes);
        }
        lineno += 1;
        let line = &bytes[start..];
        let len = line.len() - usize::from(line.ends_with(b"\n"));
        let len = len - usize::from(line[..len].ends_with(b"\r"));
        if len > MAX_LINE_BYTES {
            bail!("-:{lineno}: the line is longer than the limit of {MAX_LINE_BYTES} bytes");
        }
        if bytes.len() as u64 > MAX_INPUT_BYTES {
            bail!("-: standard input is longer than the limit of {MAX_INPUT_BYTES} bytes");
        }
    }
}

/// Input sentences with their 1-based line numbers.
pub struct Input {
    pub texts: Vec<String>,
    pub lines: Vec<usize>,
}

/// Whether a path names JSON lines by its extension (.jsonl, .ndjson, .json,
/// any case): the one rule of the CLI's inputs and the Spark job's.
pub fn is_jsonl_path(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "jsonl" | "ndjson" | "json"))
}

/// Read one sentence per line, or JSONL with a "text" field (by extension .jsonl /
/// .ndjson / .json, as the Spark job reads them, or `jsonl = true`). `-` reads
/// standard input.
///
/// Bounded: a path must name a regular file (not a device such as
/// `/dev/zero`, nor a FIFO) of at most [`MAX_INPUT_BYTES`]; standard input is
/// read line by line and refused at the first line over [`MAX_LINE_BYTES`] or
/// past [`MAX_INPUT_BYTES`] in all.
pub fn read_sentences(path: &Path, jsonl: bool, empty: EmptyLines) -> Result<Input> {
    let name = path.display().to_string();
    let bytes = if name == "-" {
        read_stdin_lines()?
    } else {
        read_regular_file(path, MAX_INPUT_BYTES, "input file")?
    };
    let jsonl = jsonl || is_jsonl_path(path);
    let mut texts = Vec::new();
    let mut lines = Vec::new();
    let mut raw: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    if raw.last().is_some_and(|l| l.is_empty()) {
        raw.pop(); // the final newline
    }
    for (i, line) in raw.iter().enumerate() {
        let lineno = i + 1;
        if line.len() > MAX_LINE_BYTES {
            bail!(
                "{name}:{lineno}: the line has {} bytes, more than the limit of {MAX_LINE_BYTES}",
                line.len()
            );
        }
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
        if is_blank(&text) {
            match empty {
                EmptyLines::Error => return Err(empty_error(&format!("{name}:{lineno}"))),
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

/// An error unless [`write_embeddings`] writes `path`'s format: front ends
/// check it before encoding, so that a wrong extension costs nothing.
pub fn check_embeddings_output(path: &Path) -> Result<()> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if path.as_os_str() == "-" || matches!(ext, "npy" | "jsonl" | "safetensors") {
        return Ok(());
    }
    bail!(
        "unknown output format '{}': use .npy, .jsonl or .safetensors (or - for JSONL on standard output)",
        path.display()
    )
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
        _ => return check_embeddings_output(path),
    };
    Ok(bertflow_durable::write(path, bytes)?)
}

/// A NumPy .npy (format 1.0) of little-endian float32, C order.
pub fn npy_bytes(m: &Array2<f32>) -> Vec<u8> {
    let mut out = crate::runtime::matrix_file::npy_header_bytes(m.nrows(), m.ncols());
    out.reserve(m.len() * 4);
    for v in m.iter() {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_empty_rule_keeps_nulls_and_names_the_first_empty_text() {
        let texts = [Some("a"), Some("  \t"), None, Some(""), Some("b")];
        let at = |i: usize| format!("row {i}");
        assert_eq!(
            keep_rows(&texts, EmptyLines::Skip, at).unwrap(),
            [true, false, true, false, true]
        );
        assert_eq!(keep_rows(&texts, EmptyLines::Keep, at).unwrap(), [true; 5]);
        let err = keep_rows(&texts, EmptyLines::Error, at)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "empty: row 1: empty text; `skip` drops empty texts, `keep` embeds them"
        );
        assert_eq!("skip".parse::<EmptyLines>().unwrap(), EmptyLines::Skip);
        let err = "drop".parse::<EmptyLines>().unwrap_err().to_string();
        assert_eq!(err, "empty: must be one of error, skip, keep, got \"drop\"");
    }
}
