//! # bertflow-durable
//!
//! Every file bertflow writes goes through this crate, so that a crash or a
//! full disk never damages what was there:
//!
//! * [`AtomicFile`] writes to a temporary file in the target's directory,
//!   and [`AtomicFile::commit`] flushes it, fsyncs it, renames it over the
//!   target and fsyncs the directory. Until the rename the target keeps its
//!   old bytes (or stays absent); an error or a drop before `commit` removes
//!   the temporary file. [`write`] does all of it for bytes in memory.
//! * [`crash_point`] aborts the process at a named point when the
//!   environment variable [`CRASH_ENV`] lists that name, so tests can kill a
//!   writer at an exact instant and check what a reader finds afterwards.
//! * [`FAIL_ENV`] makes writes to one file name fail with `ENOSPC` after a
//!   number of bytes: a full disk on any file system, for tests.
//!
//! Errors name the path and say in words what went wrong (disk full,
//! permission denied, missing directory) and that the old file is intact.
//!
//! And every file bertflow reads that it did not just make comes through
//! [`open_regular`] or [`read_regular`]: only a regular file (no FIFO, device
//! or socket, even behind a symlink), checked on the open descriptor, opened
//! without blocking, and no larger than the reader's limit.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

mod read;
pub use read::{open_regular, read_regular, read_regular_string, ReadError};

/// Environment variable naming the crash points to abort at (comma-separated).
pub const CRASH_ENV: &str = "BERTFLOW_CRASH_AT";
/// Environment variable `NAME[@BYTES]`: writes through [`AtomicFile`] to a
/// file called `NAME` fail with `ENOSPC` once more than `BYTES` (default 0)
/// bytes have been written.
pub const FAIL_ENV: &str = "BERTFLOW_FAIL_WRITE";

/// An output file could not be written; whatever was at the path is unchanged.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {}: {}{}; {}", path.display(), explain(source), source_text(source), KEPT)]
pub struct DurableError {
    /// What was being done (`create`, `write`, `replace`, ...).
    pub action: &'static str,
    /// The file (or directory) concerned.
    pub path: PathBuf,
    /// The operating system's error.
    #[source]
    pub source: io::Error,
}

const KEPT: &str = "a file already at that path keeps its old content";

fn explain(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::StorageFull => "the disk is full",
        io::ErrorKind::QuotaExceeded => "the disk quota is exceeded",
        io::ErrorKind::PermissionDenied => "permission denied",
        io::ErrorKind::NotFound => "the directory does not exist",
        io::ErrorKind::ReadOnlyFilesystem => "the file system is read-only",
        _ => "",
    }
}

fn source_text(e: &io::Error) -> String {
    if explain(e).is_empty() {
        e.to_string()
    } else {
        format!(" ({e})")
    }
}

impl DurableError {
    fn new<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> Self + 'a {
        move |source| Self {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Abort the process here if [`CRASH_ENV`] lists `name` (tests only; the
/// variable is read once). A no-op costing one comparison otherwise.
pub fn crash_point(name: &str) {
    if crash_armed(name) {
        eprintln!("bertflow: {CRASH_ENV}: crashing at {name}");
        std::process::abort();
    }
}

/// Whether [`CRASH_ENV`] lists `name` (read once per process).
pub fn crash_armed(name: &str) -> bool {
    static POINTS: OnceLock<Vec<String>> = OnceLock::new();
    let points = POINTS.get_or_init(|| {
        std::env::var(CRASH_ENV)
            .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect())
            .unwrap_or_default()
    });
    points.iter().any(|p| p == name)
}

/// The injected failure for a file called `name`, if [`FAIL_ENV`] asks for one.
fn injected_limit(target: &Path) -> Option<u64> {
    let spec = std::env::var(FAIL_ENV).ok()?;
    let (name, bytes) = match spec.split_once('@') {
        Some((n, b)) => (n.to_owned(), b.trim().parse().unwrap_or(0)),
        None => (spec, 0),
    };
    (target.file_name()? == name.as_str()).then_some(bytes)
}

/// The directory holding `path` (`.` for a bare file name).
fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// fsync the directory `dir`, so that a rename or a new file in it is durable.
pub fn sync_dir(dir: &Path) -> Result<(), DurableError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(DurableError::new("sync", dir))
}

/// fsync a file written by someone else (a library that writes its own files).
pub fn sync_file(path: &Path) -> Result<(), DurableError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(DurableError::new("sync", path))
}

/// Rename `from` over `to` and fsync the directory of `to`.
pub fn rename(from: &Path, to: &Path) -> Result<(), DurableError> {
    std::fs::rename(from, to).map_err(DurableError::new("replace", to))?;
    sync_dir(parent_of(to))
}

/// A file that replaces `path` atomically when committed (see the crate docs).
pub struct AtomicFile {
    target: PathBuf,
    out: BufWriter<tempfile::NamedTempFile>,
    written: u64,
    fail_after: Option<u64>,
}

impl AtomicFile {
    /// Start writing a replacement for `path` (a temporary file
    /// `.NAME.XXXXXX.tmp` beside it).
    pub fn create(path: &Path) -> Result<Self, DurableError> {
        let dir = parent_of(path);
        let mut prefix = OsString::from(".");
        prefix.push(path.file_name().unwrap_or_default());
        prefix.push(".");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // As File::create would: 0666 less the umask.
            builder.permissions(std::fs::Permissions::from_mode(0o666));
        }
        let tmp = builder
            .tempfile_in(dir)
            .map_err(DurableError::new("create", path))?;
        Ok(Self {
            target: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, tmp),
            written: 0,
            fail_after: injected_limit(path),
        })
    }

    /// Flush, fsync, rename over the target and fsync its directory. On error
    /// the temporary file is removed and the target is untouched.
    pub fn commit(self) -> Result<(), DurableError> {
        let target = self.target;
        let err = DurableError::new;
        let tmp = self
            .out
            .into_inner()
            .map_err(|e| err("write", &target)(e.into_error()))?;
        tmp.as_file().sync_all().map_err(err("write", &target))?;
        crash_point("atomic:before-rename");
        tmp.persist(&target)
            .map_err(|e| err("replace", &target)(e.error))?;
        crash_point("atomic:after-rename");
        sync_dir(parent_of(&target))
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(limit) = self.fail_after {
            if self.written + buf.len() as u64 > limit {
                return Err(io::Error::from_raw_os_error(28));
            }
        }
        let n = self.out.write(buf)?;
        self.written += n as u64;
        if self.written == n as u64 && n > 0 && crash_armed("atomic:mid-write") {
            // Part of the file is on disk (in the temporary file) when the crash comes.
            self.out.flush()?;
            crash_point("atomic:mid-write");
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Write `bytes` to `path` atomically (see [`AtomicFile`]).
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> Result<(), DurableError> {
    let mut file = AtomicFile::create(path)?;
    file.write_all(bytes.as_ref())
        .map_err(DurableError::new("write", path))?;
    file.commit()
}

/// Wrap an I/O error from writing `path` (for callers that stream with
/// `write_all` on an [`AtomicFile`]).
pub fn write_error(path: &Path) -> impl FnOnce(io::Error) -> DurableError + '_ {
    DurableError::new("write", path)
}

pub mod testing {
    //! Helpers for tests of code that writes files.

    use std::path::Path;
    use std::process::{Command, Stdio};

    /// A tmpfs of a given size mounted on a new temporary directory (a real
    /// full disk), unmounted on drop.
    pub struct Tmpfs(tempfile::TempDir);

    impl Tmpfs {
        /// Mount one of `size` (as `mount -o size=`, e.g. `64k`); `None`, with
        /// a message on stderr, where this process may not mount (not root, or
        /// no `mount`), so the caller falls back to [`FAIL_ENV`](crate::FAIL_ENV).
        pub fn mount(size: &str) -> Option<Self> {
            let dir = tempfile::tempdir().ok()?;
            let mounted = Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(dir.path())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !mounted {
                eprintln!(
                    "cannot mount a tmpfs here (needs root): the real full-disk check is skipped; the injected ENOSPC covers the same path"
                );
                return None;
            }
            Some(Self(dir))
        }

        /// Where it is mounted.
        pub fn path(&self) -> &Path {
            self.0.path()
        }
    }

    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0.path()).status();
        }
    }
}
