//! The links file of a compact graph ([`crate::CompactAnn`]),
//! `corpus.idx.gN.links`, little-endian:
//!
//! ```text
//! magic      8 bytes   "BFLINKS\0"
//! version    u32       1
//! m          u32       M: links per point in the upper layers, 2 M in layer 0
//! rows       u64       points in the graph: rows 0..rows of the index
//! entry      u32       where searches start: a point on the top layer
//! top        u32       the top layer (the highest level of any point, <= 15)
//! upper      u64       rows of the upper layers: the sum of the levels
//! levels     rows x u8           each point's top layer
//! layer 0    rows x 2M x u32     each point's links, u32::MAX past the last
//! upper      upper x M x u32     each point's links in layers 1..=level, in
//!                                the order of the points
//! ```
//!
//! Its size and CRC-32 are in the metadata (`.hnsw.json`, version 3). The
//! reader checks the structure as well ([`read`]): the sizes against the
//! file's length before anything is allocated, every link a row of the graph
//! (or none, and none only past the last), every link of layer `l` to a point
//! on layer `l`, the levels against the top layer and the entry point.

use std::io::{BufReader, Read, Write};
use std::path::Path;

use crate::ann_compact::{CompactAnn, MAX_LEVEL, NONE};
use crate::ann_files::io;
use crate::IndexError;

const MAGIC: &[u8; 8] = b"BFLINKS\0";
const VERSION: u32 = 1;
const HEADER: u64 = 40;

/// Writes `w` through a CRC-32 and a byte count.
struct Summed<W> {
    inner: W,
    crc: crc32fast::Hasher,
    bytes: u64,
}

impl<W: Write> Write for Summed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn put_u32s<W: Write>(out: &mut W, v: &[u32]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1 << 16);
    for chunk in v.chunks(1 << 14) {
        buf.clear();
        chunk
            .iter()
            .for_each(|x| buf.extend_from_slice(&x.to_le_bytes()));
        out.write_all(&buf)?;
    }
    Ok(())
}

/// Write the links of `g` to `path` (atomically, fsynced); its size and CRC-32.
pub(crate) fn write(path: &Path, g: &CompactAnn) -> Result<(u64, u32), IndexError> {
    let file = bertflow_durable::AtomicFile::create(path)?;
    let mut out = Summed {
        inner: file,
        crc: crc32fast::Hasher::new(),
        bytes: 0,
    };
    let upper_rows = (g.upper.len() / g.params.m) as u64;
    let mut put = || -> std::io::Result<()> {
        out.write_all(MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        out.write_all(&(g.params.m as u32).to_le_bytes())?;
        out.write_all(&(g.len() as u64).to_le_bytes())?;
        out.write_all(&g.entry.to_le_bytes())?;
        out.write_all(&(g.top as u32).to_le_bytes())?;
        out.write_all(&upper_rows.to_le_bytes())?;
        out.write_all(&g.levels)?;
        put_u32s(&mut out, &g.layer0)?;
        put_u32s(&mut out, &g.upper)
    };
    put().map_err(bertflow_durable::write_error(path))?;
    let (bytes, crc) = (out.bytes, out.crc.finalize());
    out.inner.commit()?;
    Ok((bytes, crc))
}

/// The links read back: what [`CompactAnn`] holds of them.
pub(crate) struct Links {
    pub levels: Vec<u8>,
    pub layer0: Vec<u32>,
    pub upper: Vec<u32>,
    pub entry: u32,
    pub top: usize,
}

fn u32s(r: &mut impl Read, n: usize) -> std::io::Result<Vec<u32>> {
    let mut v = vec![0u32; n];
    r.read_exact(bytemuck::cast_slice_mut(&mut v))?;
    v.iter_mut().for_each(|x| *x = u32::from_le(*x));
    Ok(v)
}

/// Read the links file at `path` of a graph of `rows` points and `m`, and
/// check its structure (see the module's documentation): `Err` says what is
/// wrong. Its CRC-32 is checked by the caller beforehand.
pub(crate) fn read(path: &Path, rows: usize, m: usize) -> Result<Links, IndexError> {
    let bad = |what: String| IndexError::Corrupt(format!("{}: {what}", path.display()));
    if !(2..=255).contains(&m) {
        return Err(bad(format!("M {m} is out of range")));
    }
    let (file, len) = bertflow_durable::open_regular(path, u64::MAX)?;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut head = [0u8; HEADER as usize];
    if len < HEADER {
        return Err(bad("truncated".into()));
    }
    r.read_exact(&mut head).map_err(io(path))?;
    let u32_at = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap_or([0; 8]));
    if &head[..8] != MAGIC {
        return Err(bad("not a links file".into()));
    }
    if u32_at(8) != VERSION {
        return Err(bad(format!("links format version {}", u32_at(8))));
    }
    if u32_at(12) as usize != m || u64_at(16) != rows as u64 {
        return Err(bad(format!(
            "M {} and {} points, the metadata says {m} and {rows}",
            u32_at(12),
            u64_at(16)
        )));
    }
    let (entry, top, upper_rows) = (u32_at(24), u32_at(28) as usize, u64_at(32));
    if top > MAX_LEVEL || (rows > 0 && entry as usize >= rows) || (rows == 0 && top > 0) {
        return Err(bad(
            "the entry point or the top layer is out of range".into()
        ));
    }
    let want = (rows as u64)
        .checked_mul(1 + 8 * m as u64)
        .zip(upper_rows.checked_mul(4 * m as u64))
        .and_then(|(a, b)| a.checked_add(b))
        .and_then(|s| s.checked_add(HEADER));
    if want != Some(len) {
        return Err(bad(format!(
            "{len} bytes, not what {rows} points and {upper_rows} upper rows take"
        )));
    }
    let mut levels = vec![0u8; rows];
    r.read_exact(&mut levels).map_err(io(path))?;
    let sum: u64 = levels.iter().map(|&l| u64::from(l)).sum();
    if sum != upper_rows {
        return Err(bad("the levels do not add up to the upper rows".into()));
    }
    if levels.iter().any(|&l| usize::from(l) > top)
        || (rows > 0 && usize::from(levels[entry as usize]) != top)
    {
        return Err(bad(
            "a level is above the top layer, or the entry point is not on it".into(),
        ));
    }
    let layer0 = u32s(&mut r, rows * 2 * m).map_err(io(path))?;
    let upper = u32s(&mut r, upper_rows as usize * m).map_err(io(path))?;
    // Every list: rows on its layer, then none.
    let check = |list: &[u32], layer: usize| {
        let n = list.iter().position(|&x| x == NONE).unwrap_or(list.len());
        list[..n]
            .iter()
            .all(|&x| (x as usize) < rows && usize::from(levels[x as usize]) >= layer)
            && list[n..].iter().all(|&x| x == NONE)
    };
    if !layer0.chunks_exact(2 * m).all(|l| check(l, 0)) {
        return Err(bad("a link of layer 0 is out of range".into()));
    }
    let mut lists = upper.chunks_exact(m);
    for &level in &levels {
        for layer in 1..=usize::from(level) {
            if !lists.next().is_some_and(|l| check(l, layer)) {
                return Err(bad(format!("a link of layer {layer} is out of range")));
            }
        }
    }
    Ok(Links {
        levels,
        layer0,
        upper,
        entry,
        top,
    })
}
