//! Reading files that are not trusted: [`open_regular`] opens a path only if it
//! is a regular file (never a FIFO, a device, a socket or a directory, whether
//! named directly or through a symlink) of at most a given size, and
//! [`read_regular`] reads such a file whole, never past the limit.
//!
//! The file is opened with `O_NONBLOCK` (opening a FIFO with no writer returns at
//! once instead of waiting for one; on a regular file the flag changes nothing)
//! and the check is made on the open descriptor (`fstat`), so a file swapped
//! between a check and the open cannot slip through.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// A file could not be read, or is not one bertflow reads.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The operating system refused (missing file, permissions, ...).
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A FIFO, a device, a socket or a directory.
    #[error("{}: not a regular file ({kind}); refused", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    /// Larger than the reader allows.
    #[error("{}: {len} bytes, more than the limit of {limit} for this kind of file; refused", path.display())]
    TooLarge { path: PathBuf, len: u64, limit: u64 },
}

impl ReadError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Self::Io { path, .. } | Self::NotRegular { path, .. } | Self::TooLarge { path, .. } => {
                path
            }
        }
    }

    /// Whether the file does not exist (for readers to which a missing file
    /// is no error).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// What kind of file `t` is, in words.
fn kind_of(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a plain file"
    }
}

/// Opens `path` for reading if it is a regular file (a symlink is followed: to
/// a regular file it is fine, to anything else it is refused) of at most
/// `limit` bytes; returns the file and its length. Never blocks on a FIFO.
pub fn open_regular(path: &Path, limit: u64) -> Result<(File, u64), ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = opts.open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
        });
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            len: meta.len(),
            limit,
        });
    }
    Ok((file, meta.len()))
}

/// The bytes of the regular file at `path` (see [`open_regular`]), of at most
/// `limit`; a file that grows past the limit while read is refused too.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let (file, len) = open_regular(path, limit)?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            len: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_regular_string(path: &Path, limit: u64) -> Result<String, ReadError> {
    String::from_utf8(read_regular(path, limit)?).map_err(|e| ReadError::Io {
        path: path.to_path_buf(),
        source: io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()),
    })
}
