//! What a quantized search reads, without the map: each segment's codes,
//! read once into memory of the process's own (the kernel cannot evict them
//! under pressure, and they are all the scan touches), and the few f32 rows
//! it rescores, by positioned reads (so that resident memory is the codes and
//! small buffers, not the touched pages of a file of many gigabytes).

use crate::{Index, IndexError};

impl Index {
    /// Segment number and row within it of sentence `i`.
    fn row_of(&self, i: usize) -> Option<(usize, usize)> {
        let segments = self.segment_list();
        let k = segments.partition_point(|s| s.first + s.count <= i);
        let s = segments.get(k).filter(|s| i >= s.first)?;
        Some((k, i - s.first))
    }

    /// The codes of segment `k`, row-major (empty without a quantizer): read
    /// from the file on first use, then kept.
    pub(crate) fn segment_codes(&self, k: usize) -> Result<&[u8], IndexError> {
        let (Some(s), Some(cell)) = (self.segment_list().get(k), self.loaded_codes.get(k)) else {
            return Err(IndexError::Invalid(format!("no segment {k}")));
        };
        if let Some(codes) = cell.get() {
            return Ok(codes);
        }
        let mut codes = vec![0u8; s.codes.len()];
        self.read_at(&mut codes, s.codes.start as u64)
            .map_err(|e| e.context(&format!("codes of segment {k}")))?;
        // Another thread may have read them meanwhile: either copy will do.
        let _ = cell.set(codes);
        cell.get()
            .map(Vec::as_slice)
            .ok_or_else(|| IndexError::Invalid(format!("codes of segment {k} not kept")))
    }

    /// The code of sentence `i` (its segment's codes read if they were not).
    pub(crate) fn code_of(&self, i: usize, width: usize) -> Result<&[u8], IndexError> {
        let (k, j) = self.row_of(i).ok_or_else(|| {
            IndexError::Invalid(format!("no sentence {i} in an index of {}", self.len()))
        })?;
        self.segment_codes(k)?
            .get(j * width..(j + 1) * width)
            .ok_or_else(|| IndexError::Corrupt(format!("sentence {i}: no code")))
    }

    /// Bytes of codes held in memory (read by quantized searches so far).
    pub fn resident_code_bytes(&self) -> usize {
        self.loaded_codes
            .iter()
            .filter_map(|c| c.get().map(Vec::len))
            .sum()
    }

    /// The vectors of sentences `ids`, in that order, into `out` (cleared;
    /// `ids.len() x dimension` floats), each by one positioned read of the
    /// file (not through the map). Every row is first announced to the
    /// kernel (`POSIX_FADV_WILLNEED`: reads of rows not in the page cache are
    /// all sent to the disk at once, not one after the other); give `ids`
    /// sorted, so that they are read in file order.
    pub(crate) fn read_vectors(&self, ids: &[usize], out: &mut Vec<f32>) -> Result<(), IndexError> {
        let d = self.identity().dimension;
        out.clear();
        out.resize(ids.len() * d, 0.0);
        let at = |i: usize| -> Result<u64, IndexError> {
            let (k, j) = self.row_of(i).ok_or_else(|| {
                IndexError::Invalid(format!("no sentence {i} in an index of {}", self.len()))
            })?;
            Ok((self.segment_list()[k].vectors.start + j * d * 4) as u64)
        };
        if ids.len() > 1 {
            for &i in ids {
                self.will_need(at(i)?, d * 4);
            }
        }
        for (&i, row) in ids.iter().zip(out.chunks_exact_mut(d)) {
            self.read_at(bytemuck::cast_slice_mut(row), at(i)?)
                .map_err(|e| e.context(&format!("vector of sentence {i}")))?;
        }
        Ok(())
    }

    /// Tell the kernel that `len` bytes at `at` will be read soon (a hint:
    /// errors are ignored, the read that follows reports them).
    /// (Linux only: macOS has no `posix_fadvise`.)
    fn will_need(&self, at: u64, len: usize) {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let (Ok(at), Ok(len)) = (libc::off_t::try_from(at), libc::off_t::try_from(len)) else {
                return;
            };
            // SAFETY: a hint on a descriptor this index holds open; no memory
            // is passed.
            unsafe {
                libc::posix_fadvise(self.file.as_raw_fd(), at, len, libc::POSIX_FADV_WILLNEED)
            };
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (at, len);
    }

    /// Fill `buf` from the file at offset `at`: a short read (the file was
    /// cut under the reader) or an I/O error is an error.
    fn read_at(&self, buf: &mut [u8], at: u64) -> Result<(), IndexError> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.file
                .read_exact_at(buf, at)
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::UnexpectedEof => IndexError::Changed(format!(
                    "{} bytes at offset {at} are past the end of the file (it was cut while open)",
                    buf.len()
                )),
                    _ => IndexError::Io(format!("reading {} bytes at offset {at}: {e}", buf.len())),
                })
        }
        #[cfg(not(unix))]
        {
            let from = usize::try_from(at).unwrap_or(usize::MAX);
            let src = self
                .map_bytes()
                .get(from..from.saturating_add(buf.len()))
                .ok_or_else(|| IndexError::Changed(format!("offset {at} past the end")))?;
            buf.copy_from_slice(src);
            Ok(())
        }
    }
}

impl IndexError {
    /// The same error, its message prefixed with what was being read.
    fn context(self, what: &str) -> Self {
        match self {
            IndexError::Io(m) => IndexError::Io(format!("{what}: {m}")),
            IndexError::Corrupt(m) => IndexError::Corrupt(format!("{what}: {m}")),
            IndexError::Changed(m) => IndexError::Changed(format!("{what}: {m}")),
            IndexError::Mismatch(m) => IndexError::Mismatch(format!("{what}: {m}")),
            IndexError::Invalid(m) => IndexError::Invalid(format!("{what}: {m}")),
        }
    }
}
