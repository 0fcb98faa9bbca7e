//! On-disk cache of encoded embeddings.
//!
//! An entry is keyed by the model fingerprint, the pooling's hidden-state source,
//! `max_len` and the exact list of texts; it holds the matrix, the truncation
//! count and a SHA-256 of its payload. A damaged entry (bad magic, wrong size,
//! checksum mismatch) is ignored and recomputed, never trusted.
use ndarray::Array2;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"BFEMB01\n";
const HEADER: usize = 8 + 8 + 8 + 8 + 32;

/// A directory of cached embedding matrices.
#[derive(Debug, Clone)]
pub struct EmbeddingCache {
    dir: PathBuf,
}

/// One cached matrix and what was truncated when it was computed.
#[derive(Debug, Clone)]
pub struct CachedEntry {
    pub embeddings: Array2<f32>,
    pub truncated: usize,
}

impl EmbeddingCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// `$BERTFLOW_CACHE`, else `$XDG_CACHE_HOME/bertflow`, else `~/.cache/bertflow`.
    pub fn default_dir() -> PathBuf {
        if let Ok(p) = std::env::var("BERTFLOW_CACHE") {
            return PathBuf::from(p);
        }
        if let Ok(p) = std::env::var("XDG_CACHE_HOME") {
            return PathBuf::from(p).join("bertflow");
        }
        match std::env::var("HOME") {
            Ok(h) => PathBuf::from(h).join(".cache/bertflow"),
            Err(_) => PathBuf::from(".bertflow-cache"),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key of an entry.
    pub fn key<S: AsRef<str>>(
        model_fingerprint: &str,
        source_key: &str,
        max_len: usize,
        texts: &[S],
    ) -> String {
        let mut h = Sha256::new();
        h.update(format!(
            "{model_fingerprint}\n{source_key}\n{max_len}\n{}\n",
            texts.len()
        ));
        for t in texts {
            let t = t.as_ref().as_bytes();
            h.update((t.len() as u64).to_le_bytes());
            h.update(t);
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.bfemb"))
    }

    /// The entry, if present and intact with `rows` rows. A damaged entry is removed.
    pub fn get(&self, key: &str, rows: usize) -> Option<CachedEntry> {
        let path = self.path(key);
        let bytes = std::fs::read(&path).ok()?;
        match decode(&bytes, rows) {
            Some(e) => Some(e),
            None => {
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Store an entry atomically (write to a temporary file, then rename).
    pub fn put(&self, key: &str, entry: &CachedEntry) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let (rows, cols) = entry.embeddings.dim();
        let mut payload = Vec::with_capacity(rows * cols * 4);
        for v in entry.embeddings.iter() {
            payload.extend_from_slice(&v.to_le_bytes());
        }
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(rows as u64).to_le_bytes());
        out.extend_from_slice(&(cols as u64).to_le_bytes());
        out.extend_from_slice(&(entry.truncated as u64).to_le_bytes());
        out.extend_from_slice(&Sha256::digest(&payload));
        out.extend_from_slice(&payload);
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(&out)?;
        tmp.1.sync_all()?;
        std::fs::rename(&tmp.0, self.path(key))
    }
}

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let name = format!(
        ".tmp-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    );
    let p = dir.join(name.replace(['(', ')'], ""));
    Ok((p.clone(), std::fs::File::create(p)?))
}

fn decode(bytes: &[u8], rows: usize) -> Option<CachedEntry> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return None;
    }
    let u = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap_or([0; 8])) as usize;
    let (r, c, truncated) = (u(8), u(16), u(24));
    let payload = &bytes[HEADER..];
    if r != rows || r.checked_mul(c)?.checked_mul(4)? != payload.len() {
        return None;
    }
    if Sha256::digest(payload).as_slice() != &bytes[32..64] {
        return None;
    }
    let data: Vec<f32> = payload
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Some(CachedEntry {
        embeddings: Array2::from_shape_vec((r, c), data).ok()?,
        truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage_detection() {
        let dir = tempfile::tempdir().unwrap();
        let cache = EmbeddingCache::new(dir.path());
        let texts = ["a b", "c"];
        let key = EmbeddingCache::key("fp", "mean@6", 512, &texts);
        assert_ne!(key, EmbeddingCache::key("fp", "mean@1,6", 512, &texts));
        assert_ne!(key, EmbeddingCache::key("fp", "mean@6", 512, &["a", "b c"]));
        assert!(cache.get(&key, 2).is_none());
        let m = Array2::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32 * 0.5 - 1.0);
        cache
            .put(
                &key,
                &CachedEntry {
                    embeddings: m.clone(),
                    truncated: 1,
                },
            )
            .unwrap();
        let got = cache.get(&key, 2).unwrap();
        assert_eq!(got.embeddings, m);
        assert_eq!(got.truncated, 1);
        assert!(
            cache.get(&key, 3).is_none(),
            "row count mismatch must not be trusted"
        );
        // Flip one payload byte: the entry must be rejected and removed.
        cache
            .put(
                &key,
                &CachedEntry {
                    embeddings: m,
                    truncated: 0,
                },
            )
            .unwrap();
        let path = cache.path(&key);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        assert!(cache.get(&key, 2).is_none());
        assert!(!path.exists());
        // Truncated file.
        std::fs::write(&path, &bytes[..20]).unwrap();
        assert!(cache.get(&key, 2).is_none());
    }
}
