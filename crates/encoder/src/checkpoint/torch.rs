//! `torch.save`'d state dicts (`pytorch_model.bin`, `*.pt`): a zip archive
//! holding `NAME/data.pkl` (the pickled dict of name to
//! `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`, each
//! storage a persistent id `('storage', torch.FloatStorage, key, device,
//! numel)`) and `NAME/data/KEY` (each storage's raw little-endian bytes).
//! Contiguous tensors of float, half, bfloat16, double and integer storages are
//! read; anything else is an error naming what it met.
use super::pickle::{self, Value, V};
use super::zip::{self, Entry};
use super::{DType, HostTensor, NamedTensors};
use crate::error::{io_err, EncoderError, Result};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

type Res<T> = std::result::Result<T, String>;

/// One tensor of a state dict: name, shape, row-major f32 values.
pub type StateEntry = (String, Vec<usize>, Vec<f32>);

/// Whether `buf` starts like the pre-1.6 (not zip) `torch.save` format: the
/// pickled magic number.
pub(crate) fn is_legacy(buf: &[u8]) -> bool {
    buf.starts_with(&[0x80, 0x02, 0x8a, 0x0a])
}

/// The named tensors of a `torch.save`'d state dict, in the file's order, as
/// (name, shape, row-major f32 values). Other heads' weights (`colbert_linear.pt`,
/// `sparse_linear.pt`) are read with it.
pub fn read_torch_state_dict(path: &Path) -> Result<Vec<StateEntry>> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    let tensors = parse(Arc::new(bytes)).map_err(|msg| EncoderError::BadFile {
        path: path.to_path_buf(),
        msg,
    })?;
    Ok(tensors
        .into_iter()
        .map(|(name, t)| {
            let values = t.to_f32();
            (name, t.shape().to_vec(), values)
        })
        .collect())
}

/// The tensors of the `torch.save` archive `buf`.
pub(crate) fn parse(buf: Arc<Vec<u8>>) -> Res<NamedTensors> {
    if is_legacy(&buf) {
        return Err(
            "a PyTorch file in the legacy (before 1.6) format, which is not read: \
                    load it in PyTorch and save it again, or convert it to safetensors"
                .into(),
        );
    }
    let entries = zip::entries(&buf)?;
    let pkl = entries
        .iter()
        .find(|e| e.name == "data.pkl" || e.name.ends_with("/data.pkl"))
        .ok_or("not a torch.save archive: no data.pkl in it")?;
    let prefix = &pkl.name[..pkl.name.len() - "data.pkl".len()];
    let by_name: HashMap<&str, &Entry> = entries.iter().map(|e| (e.name.as_str(), e)).collect();
    if let Some(e) = by_name.get(format!("{prefix}byteorder").as_str()) {
        let order = &buf[e.start..e.start + e.len];
        if order != b"little" {
            return Err(format!(
                "storages are stored {:?}-endian; only little-endian is read",
                String::from_utf8_lossy(order)
            ));
        }
    }
    let root = pickle::load(&buf[pkl.start..pkl.start + pkl.len])?;
    let Value::Dict(items) = &root.value else {
        return Err("data.pkl does not hold a dict of tensors (a state dict)".into());
    };
    let mut out = Vec::with_capacity(items.len());
    for (k, v) in items {
        let Value::Str(name) = &k.value else {
            return Err("the state dict has a key that is not a string".into());
        };
        let t = tensor(v, &buf, prefix, &by_name).map_err(|e| format!("tensor {name}: {e}"))?;
        out.push((name.clone(), t));
    }
    Ok(out)
}

fn int(v: &V) -> Res<i64> {
    match v.value {
        Value::Int(i) => Ok(i),
        _ => Err(format!("expected an integer, found {}", kind(v))),
    }
}

fn usize_of(v: &V) -> Res<usize> {
    usize::try_from(int(v)?).map_err(|_| "a negative size, offset or stride".to_string())
}

fn ints(v: &V) -> Res<Vec<usize>> {
    match &v.value {
        Value::Tuple(xs) => xs.iter().map(usize_of).collect(),
        _ => Err(format!("expected a tuple of sizes, found {}", kind(v))),
    }
}

/// A short description of `v` for messages.
fn kind(v: &V) -> String {
    match &v.value {
        Value::Global(m, n) => format!("{m}.{n}"),
        Value::Call(f, _) => match &f.value {
            Value::Global(m, n) => format!("a call of {m}.{n}"),
            _ => "a call".into(),
        },
        Value::None => "None".into(),
        Value::Bool(b) => format!("the bool {b}"),
        Value::Int(i) => format!("the integer {i}"),
        Value::Float(x) => format!("the float {x}"),
        Value::Str(_) => "a string".into(),
        Value::Tuple(_) => "a tuple".into(),
        Value::List(_) => "a list".into(),
        Value::Dict(_) => "a dict".into(),
        Value::PersistentId(_) => "a persistent id".into(),
    }
}

fn storage_dtype(module: &str, name: &str) -> Res<DType> {
    let d = match (module, name) {
        ("torch", "FloatStorage") => DType::F32,
        ("torch", "HalfStorage") => DType::F16,
        ("torch", "BFloat16Storage") => DType::BF16,
        ("torch", "DoubleStorage") => DType::F64,
        ("torch", "LongStorage") => DType::I64,
        ("torch", "IntStorage") => DType::I32,
        ("torch", "ShortStorage") => DType::I16,
        ("torch", "CharStorage") => DType::I8,
        ("torch", "ByteStorage") => DType::U8,
        ("torch", "BoolStorage") => DType::Bool,
        _ => return Err(format!("storage type {module}.{name} is not supported")),
    };
    Ok(d)
}

/// One state-dict value: a rebuilt tensor (or a parameter around one).
fn tensor(
    v: &V,
    buf: &Arc<Vec<u8>>,
    prefix: &str,
    by_name: &HashMap<&str, &Entry>,
) -> Res<HostTensor> {
    let Value::Call(f, args) = &v.value else {
        return Err(format!("expected a tensor, found {}", kind(v)));
    };
    let func = match &f.value {
        Value::Global(m, n) => format!("{m}.{n}"),
        _ => String::new(),
    };
    match func.as_str() {
        "torch._utils._rebuild_parameter" | "torch._utils._rebuild_parameter_with_state"
            if !args.is_empty() =>
        {
            // A Parameter around a tensor: the tensor (one level only).
            if let Value::Call(g, _) = &args[0].value {
                if matches!(&g.value, Value::Global(m, n) if m == "torch._utils" && n == "_rebuild_tensor_v2")
                {
                    return tensor(&args[0], buf, prefix, by_name);
                }
            }
            Err(format!("a parameter around {}", kind(&args[0])))
        }
        "torch._utils._rebuild_tensor_v2" if args.len() >= 4 => {
            let Value::PersistentId(pid) = &args[0].value else {
                return Err(format!("expected a storage, found {}", kind(&args[0])));
            };
            let Value::Tuple(p) = &pid.value else {
                return Err("a storage reference that is not a tuple".into());
            };
            let (dtype, key) = match p.as_slice() {
                [tag, ty, key, _device, _numel] if matches!(&tag.value, Value::Str(s) if s == "storage") =>
                {
                    let dtype = match &ty.value {
                        Value::Global(m, n) => storage_dtype(m, n)?,
                        _ => return Err(format!("a storage type that is {}", kind(ty))),
                    };
                    let Value::Str(key) = &key.value else {
                        return Err("a storage key that is not a string".into());
                    };
                    (dtype, key.clone())
                }
                _ => return Err("a storage reference of an unknown form".into()),
            };
            let offset = usize_of(&args[1])?;
            let size = ints(&args[2])?;
            let stride = ints(&args[3])?;
            check_contiguous(&size, &stride)?;
            let entry = by_name
                .get(format!("{prefix}data/{key}").as_str())
                .ok_or_else(|| format!("storage {key} is not in the archive"))?;
            let start = offset
                .checked_mul(dtype.size())
                .ok_or("storage offset overflows")?;
            let t = HostTensor::view(buf.clone(), entry.start.saturating_add(start), dtype, size)?;
            if start.checked_add(t.len).is_none_or(|end| end > entry.len) {
                return Err(format!(
                    "shape {:?} at element {offset} runs past the end of storage {key} ({} bytes)",
                    t.shape(),
                    entry.len
                ));
            }
            Ok(t)
        }
        _ => Err(format!("expected a tensor, found {}", kind(v))),
    }
}

/// Row-major strides for `size` (dimensions of one element may have any stride).
fn check_contiguous(size: &[usize], stride: &[usize]) -> Res<()> {
    if size.len() != stride.len() {
        return Err(format!(
            "size {size:?} and stride {stride:?} differ in rank"
        ));
    }
    let mut want = 1usize;
    for (&n, &s) in size.iter().zip(stride).rev() {
        if n != 1 && s != want {
            return Err(format!(
                "a non-contiguous tensor (size {size:?}, stride {stride:?}): save it after \
                 .contiguous()"
            ));
        }
        want = want.saturating_mul(n);
    }
    Ok(())
}
