//! Files from outside opened only when they are regular files (never a FIFO
//! or a device) within a size limit: [`bertflow_durable`]'s readers with this
//! crate's errors. Below [`crate::runtime::io`] and
//! [`crate::runtime::matrix_file`], which both use them.
use crate::error::{CoreError, Result};
use std::path::Path;

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
    bertflow_durable::open_regular(path, u64::MAX).map_err(|e| match e {
        bertflow_durable::ReadError::Io { path, source } => CoreError::Io {
            action: "open",
            path,
            source,
        },
        e => regular_file_error(e, what),
    })
}
