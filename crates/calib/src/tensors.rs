//! The named tensors of a calibrator file: [`TensorWriter`] collects them for
//! saving, [`TensorReader`] reads them back checked (dtype, shape, finiteness,
//! none left unused). Below every calibrator and quantizer and the file
//! format ([`crate::io`]) that uses them.

use std::collections::BTreeSet;
use std::path::PathBuf;

use safetensors::tensor::{Dtype, SafeTensors};

use crate::error::{CalibError, Result};

/// Collects named tensors for saving.
#[derive(Default)]
pub(crate) struct TensorWriter {
    pub(crate) tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)>,
}

impl TensorWriter {
    pub fn f64(&mut self, name: &str, shape: &[usize], data: impl Iterator<Item = f64>) {
        let bytes = data.flat_map(|v| v.to_le_bytes()).collect();
        self.tensors
            .push((name.to_string(), Dtype::F64, shape.to_vec(), bytes));
    }

    pub fn f32(&mut self, name: &str, shape: &[usize], data: impl Iterator<Item = f32>) {
        let bytes = data.flat_map(|v| v.to_le_bytes()).collect();
        self.tensors
            .push((name.to_string(), Dtype::F32, shape.to_vec(), bytes));
    }
}

/// Reads named tensors of a loaded file, checking dtype, shape and
/// finiteness, and that no tensor is left unused.
pub(crate) struct TensorReader<'a> {
    pub(crate) st: SafeTensors<'a>,
    pub(crate) path: PathBuf,
    pub(crate) used: BTreeSet<String>,
}

impl TensorReader<'_> {
    pub fn format_error(&self, reason: String) -> CalibError {
        CalibError::Format {
            path: self.path.clone(),
            reason,
        }
    }

    fn raw(&mut self, name: &str, dtype: Dtype, shape: &[usize]) -> Result<&[u8]> {
        let view = self
            .st
            .tensor(name)
            .map_err(|_| self.format_error(format!("missing tensor {name:?}")))?;
        if view.dtype() != dtype {
            return Err(self.format_error(format!(
                "tensor {name:?} has dtype {:?}, expected {dtype:?}",
                view.dtype()
            )));
        }
        if view.shape() != shape {
            return Err(self.format_error(format!(
                "tensor {name:?} has shape {:?}, expected {shape:?}",
                view.shape()
            )));
        }
        self.used.insert(name.to_string());
        Ok(view.data())
    }

    /// A `rows x cols` f64 tensor as a matrix (row-major, as written).
    pub fn matrix_f64(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<ndarray::Array2<f64>> {
        let v = self.f64(name, &[rows, cols])?;
        ndarray::Array2::from_shape_vec((rows, cols), v)
            .map_err(|e| self.format_error(e.to_string()))
    }

    pub fn f64(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f64>> {
        let v: Vec<f64> = self
            .raw(name, Dtype::F64, shape)?
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect();
        if v.iter().any(|x| !x.is_finite()) {
            return Err(self.format_error(format!("tensor {name:?} has non-finite values")));
        }
        Ok(v)
    }

    pub fn f32(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let v: Vec<f32> = self
            .raw(name, Dtype::F32, shape)?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if v.iter().any(|x| !x.is_finite()) {
            return Err(self.format_error(format!("tensor {name:?} has non-finite values")));
        }
        Ok(v)
    }

    pub(crate) fn finish(self) -> Result<()> {
        let extra: Vec<String> = self
            .st
            .names()
            .into_iter()
            .filter(|n| !self.used.contains(*n))
            .map(|n| n.to_string())
            .collect();
        if extra.is_empty() {
            Ok(())
        } else {
            let mut extra = extra;
            extra.sort();
            Err(self.format_error(format!("unexpected tensors {extra:?}")))
        }
    }
}
