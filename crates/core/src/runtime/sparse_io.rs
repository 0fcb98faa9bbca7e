//! Files of sparse and multi-vector outputs.
//!
//! - Sparse, `.npz`: SciPy's CSR layout as `scipy.sparse.save_npz` writes it
//!   (a zip of `data.npy` float32, `indices.npy` int32, `indptr.npy` int32 (int64
//!   past 2^31 entries), `format.npy` = `b'csr'`, `shape.npy` int64 `(rows,
//!   vocabulary)`), entries stored, so `scipy.sparse.load_npz` reads it.
//! - `.jsonl`: one object a text: `index`, `line`, `text`, and each output:
//!   `embedding` (dense), `indices` and `values` (sparse; `tokens`:
//!   `[token, weight]` pairs, largest first, with `--decode`), `vectors`
//!   (per-token).
//! - Multi-vector, `.safetensors`: `vectors` `[total tokens, dim]` float32 and
//!   `offsets` `[texts + 1]` int64 (text `i`'s vectors are rows
//!   `offsets[i]..offsets[i+1]`).
use crate::error::{CoreError, Result};
use crate::runtime::io::Input;
use bertflow_encoder::head::Retrieved;
use bertflow_encoder::SparseVector;
use ndarray::Array2;
use std::collections::HashMap;
use std::path::Path;

/// A `.npy` (format 1.0) of `descr` values of `shape` (`()`, `(n,)`, ...).
fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A zip archive of `files`, stored (no compression), as `numpy.savez` writes.
fn zip_stored(files: &[(&str, Vec<u8>)]) -> Result<Vec<u8>> {
    let too_big = || CoreError::Input("a sparse .npz over 4 GiB is not supported".into());
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in files {
        let offset = u32::try_from(out.len()).map_err(|_| too_big())?;
        let size = u32::try_from(data.len()).map_err(|_| too_big())?;
        let crc = crc32fast::hash(data);
        // version 2.0, no flags, stored, 1980-01-01 00:00
        let fixed = |out: &mut Vec<u8>| {
            for v in [20u16, 0, 0, 0, 0x21] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            for v in [crc, size, size] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
        };
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        fixed(&mut out);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes());
        fixed(&mut central);
        // comment length, disk, internal and external attributes
        for v in [0u16, 0, 0] {
            central.extend_from_slice(&v.to_le_bytes());
        }
        central.extend_from_slice(&0u32.to_le_bytes());
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let cd_offset = u32::try_from(out.len()).map_err(|_| too_big())?;
    let cd_size = central.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    let n = files.len() as u16;
    for v in [0u16, 0, n, n] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&cd_size.to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    Ok(out)
}

/// The CSR `.npz` bytes of `vecs` over a vocabulary of `dim`.
pub fn csr_npz_bytes(vecs: &[SparseVector], dim: usize) -> Result<Vec<u8>> {
    for (i, v) in vecs.iter().enumerate() {
        v.validate(Some(dim))
            .map_err(|e| CoreError::Input(format!("sparse vector {i}: {e}")))?;
    }
    let nnz: usize = vecs.iter().map(SparseVector::nnz).sum();
    let data: Vec<u8> = vecs
        .iter()
        .flat_map(|v| v.values.iter().flat_map(|x| x.to_le_bytes()))
        .collect();
    let indices: Vec<u8> = vecs
        .iter()
        .flat_map(|v| v.indices.iter().flat_map(|&i| (i as i32).to_le_bytes()))
        .collect();
    let mut ptr = vec![0usize];
    for v in vecs {
        ptr.push(ptr.last().copied().unwrap_or(0) + v.nnz());
    }
    let wide = nnz > i32::MAX as usize;
    let indptr: Vec<u8> = if wide {
        ptr.iter().flat_map(|&p| (p as i64).to_le_bytes()).collect()
    } else {
        ptr.iter().flat_map(|&p| (p as i32).to_le_bytes()).collect()
    };
    let shape: Vec<u8> = [vecs.len() as i64, dim as i64]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    zip_stored(&[
        ("indices.npy", npy("<i4", &format!("({},)", nnz), &indices)),
        (
            "indptr.npy",
            npy(
                if wide { "<i8" } else { "<i4" },
                &format!("({},)", ptr.len()),
                &indptr,
            ),
        ),
        ("format.npy", npy("|S3", "()", b"csr")),
        ("shape.npy", npy("<i8", "(2,)", &shape)),
        ("data.npy", npy("<f4", &format!("({},)", nnz), &data)),
    ])
}

/// The entries of a zip archive whose files are stored (as [`csr_npz_bytes`]
/// and `numpy.savez` write them), by name.
fn unzip_stored(bytes: &[u8]) -> Result<HashMap<String, &[u8]>> {
    let bad = |m: &str| CoreError::Input(format!("not a stored .npz archive: {m}"));
    let u16_at = |p: usize| -> Result<usize> {
        let b = bytes.get(p..p + 2).ok_or_else(|| bad("truncated"))?;
        Ok(u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let u32_at = |p: usize| -> Result<usize> {
        let b = bytes.get(p..p + 4).ok_or_else(|| bad("truncated"))?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let mut out = HashMap::new();
    let mut p = 0;
    while bytes.len() >= p + 4 && u32_at(p)? == 0x0403_4b50 {
        let (method, size, usize_) = (u16_at(p + 8)?, u32_at(p + 18)?, u32_at(p + 22)?);
        let (name_len, extra) = (u16_at(p + 26)?, u16_at(p + 28)?);
        if method != 0 || size != usize_ {
            return Err(bad("a compressed entry (only stored entries are read)"));
        }
        let name = bytes
            .get(p + 30..p + 30 + name_len)
            .ok_or_else(|| bad("truncated"))?;
        let start = p + 30 + name_len + extra;
        let data = bytes
            .get(start..start + size)
            .ok_or_else(|| bad("truncated"))?;
        out.insert(String::from_utf8_lossy(name).into_owned(), data);
        p = start + size;
    }
    Ok(out)
}

/// The header's `descr` and the data of a `.npy`.
fn npy_parts(b: &[u8]) -> Result<(String, &[u8])> {
    let bad = || CoreError::Input("a bad .npy inside the .npz".into());
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(bad());
    }
    let (len, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        _ => (
            u32::from_le_bytes(
                b.get(8..12)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?,
            ) as usize,
            12,
        ),
    };
    let header =
        std::str::from_utf8(b.get(start..start + len).ok_or_else(bad)?).map_err(|_| bad())?;
    let descr = header
        .split("'descr':")
        .nth(1)
        .and_then(|s| s.split('\'').nth(1))
        .ok_or_else(bad)?
        .to_string();
    Ok((descr, &b[start + len..]))
}

/// Integers of a `<i4` or `<i8` `.npy`.
fn ints(b: &[u8]) -> Result<Vec<i64>> {
    let (descr, data) = npy_parts(b)?;
    Ok(match descr.as_str() {
        "<i4" => data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
            .collect(),
        "<i8" => data
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect(),
        d => {
            return Err(CoreError::Input(format!(
                "integers of type {d} in the .npz"
            )))
        }
    })
}

/// The rows and vocabulary size of a CSR `.npz` of float32 values with
/// stored entries (what [`csr_npz_bytes`] writes; `numpy.savez`, not
/// `savez_compressed`).
pub fn read_csr_npz(bytes: &[u8]) -> Result<(Vec<SparseVector>, usize)> {
    let files = unzip_stored(bytes)?;
    let get = |n: &str| {
        files
            .get(n)
            .copied()
            .ok_or_else(|| CoreError::Input(format!("the .npz has no {n}")))
    };
    let (_, format) = npy_parts(get("format.npy")?)?;
    if format != b"csr" {
        return Err(CoreError::Input("the .npz is not a CSR matrix".into()));
    }
    let shape = ints(get("shape.npy")?)?;
    let indices = ints(get("indices.npy")?)?;
    let indptr = ints(get("indptr.npy")?)?;
    let (descr, data) = npy_parts(get("data.npy")?)?;
    if descr != "<f4" {
        return Err(CoreError::Input(format!(
            "values of type {descr} in the .npz"
        )));
    }
    let values: Vec<f32> = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let [rows, dim] = shape[..] else {
        return Err(CoreError::Input("the .npz's shape is not 2-D".into()));
    };
    if indptr.len() != rows as usize + 1 || indices.len() != values.len() {
        return Err(CoreError::Input("the .npz's arrays disagree".into()));
    }
    let mut out = Vec::with_capacity(rows as usize);
    for w in indptr.windows(2) {
        let (a, b) = (w[0] as usize, w[1] as usize);
        if a > b || b > values.len() {
            return Err(CoreError::Input(
                "the .npz's indptr is not increasing".into(),
            ));
        }
        let v = SparseVector {
            indices: indices[a..b].iter().map(|&i| i as u32).collect(),
            values: values[a..b].to_vec(),
        };
        v.validate(Some(dim as usize))
            .map_err(|e| CoreError::Input(format!("the .npz: {e}")))?;
        out.push(v);
    }
    Ok((out, dim as usize))
}

/// One JSON object a text with every output of `got`: `index`, `line`,
/// `text`, then `embedding` (dense), `indices` and `values` (sparse; `tokens`:
/// the named entries of `decoded`, if given), `vectors` (per-token).
pub fn retrieved_jsonl_bytes(
    got: &Retrieved,
    input: &Input,
    decoded: Option<&[Vec<(String, f32)>]>,
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (i, text) in input.texts.iter().enumerate() {
        let mut obj = serde_json::json!({"index": i, "line": input.lines.get(i), "text": text});
        if let Some(d) = &got.dense {
            obj["embedding"] = serde_json::json!(d.row(i).to_vec());
        }
        if let Some(v) = got.sparse.as_ref().and_then(|s| s.get(i)) {
            obj["indices"] = serde_json::json!(v.indices);
            obj["values"] = serde_json::json!(v.values);
            if let Some(d) = decoded.and_then(|d| d.get(i)) {
                obj["tokens"] = serde_json::json!(d);
            }
        }
        if let Some(m) = got.multi.as_ref().and_then(|m| m.get(i)) {
            let rows: Vec<Vec<f32>> = m.outer_iter().map(|r| r.to_vec()).collect();
            obj["vectors"] = serde_json::json!(rows);
        }
        serde_json::to_writer(&mut out, &obj)?;
        out.push(b'\n');
    }
    Ok(out)
}

/// Per-token vectors as `.safetensors`: `vectors` and `offsets` (see the module).
pub fn multi_safetensors_bytes(
    mats: &[Array2<f32>],
    dim: usize,
    meta: &HashMap<String, String>,
) -> Result<Vec<u8>> {
    let mut offsets = vec![0i64];
    let mut data = Vec::new();
    for m in mats {
        if m.ncols() != dim {
            return Err(CoreError::Input(format!(
                "token vectors of {} dimensions, expected {dim}",
                m.ncols()
            )));
        }
        offsets.push(offsets.last().copied().unwrap_or(0) + m.nrows() as i64);
        data.extend(m.iter().flat_map(|x| x.to_le_bytes()));
    }
    let total = *offsets.last().unwrap_or(&0) as usize;
    let off: Vec<u8> = offsets.iter().flat_map(|x| x.to_le_bytes()).collect();
    let vectors =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![total, dim], &data)?;
    let offsets =
        safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![mats.len() + 1], &off)?;
    Ok(safetensors::tensor::serialize(
        [("vectors", vectors), ("offsets", offsets)],
        Some(meta.clone()),
    )?)
}

/// Whether `path` is a `.safetensors` whose header names an `offsets`
/// tensor (per-token vectors); false when it cannot be read.
pub fn is_multi_vector_file(path: &Path) -> bool {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut n = [0u8; 8];
    if f.read_exact(&mut n).is_err() {
        return false;
    }
    let n = u64::from_le_bytes(n);
    if n > 100 << 20 {
        return false;
    }
    let mut h = vec![0u8; n as usize];
    if f.read_exact(&mut h).is_err() {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(&h)
        .ok()
        .and_then(|v| v.get("offsets").cloned())
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csr_npz_round_trips() {
        let vecs = vec![
            SparseVector {
                indices: vec![1, 7],
                values: vec![0.5, 2.0],
            },
            SparseVector::default(),
            SparseVector {
                indices: vec![0],
                values: vec![1.25],
            },
        ];
        let bytes = csr_npz_bytes(&vecs, 10).unwrap();
        let (back, dim) = read_csr_npz(&bytes).unwrap();
        assert_eq!((back, dim), (vecs.clone(), 10));
        assert!(csr_npz_bytes(&vecs, 5).is_err());
        assert!(read_csr_npz(&bytes[..bytes.len() / 2]).is_err());
    }

    #[test]
    fn multi_vectors_keep_their_offsets() {
        let mats = vec![Array2::<f32>::ones((3, 2)), Array2::<f32>::zeros((1, 2))];
        let bytes = multi_safetensors_bytes(&mats, 2, &HashMap::new()).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let off = st.tensor("offsets").unwrap();
        let off: Vec<i64> = off
            .data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(off, [0, 3, 4]);
        assert_eq!(st.tensor("vectors").unwrap().shape(), [4, 2]);
        assert!(multi_safetensors_bytes(&mats, 3, &HashMap::new()).is_err());
    }
}
