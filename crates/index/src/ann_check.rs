//! A structural check of an hnsw_rs dump (the `.hnsw.graph` and `.hnsw.data`
//! files) before hnsw_rs reads it.
//!
//! hnsw_rs 0.3 trusts its files: a length read from them becomes an
//! allocation (`vec![0; len]`: a damaged length aborts the process on a
//! failed allocation), a dimension becomes the length of a slice made with
//! `from_raw_parts` over a shorter buffer (reads past it), an unknown format
//! calls `std::process::exit(1)`, and inconsistent ranks panic. CRC-32s in
//! the metadata catch damage, not files written by anything else, so
//! [`check_dump`] walks both files exactly as hnsw_rs 0.3.5 will
//! (`HnswIo::load_hnsw_with_dist`), and refuses any file whose counts,
//! lengths, ranks, magic numbers or types differ from what bertflow's graphs
//! hold: version 3 or 4 descriptions with 16 layers, full dump mode, points
//! of one `u32` (a row of the index) each, neighbours that exist.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

const MAGICPOINT: u32 = 0x000a_678f;
const MAGICDESCR_3: u32 = 0x002a_6771;
const MAGICDESCR_4: u32 = 0x002a_6779;
const MAGICLAYER: u32 = 0x000a_676f;
const MAGICDATAP: u32 = 0xa67f_0000;
/// hnsw_rs's `NB_LAYER_MAX`: the dump always describes this many layers.
const NB_LAYER_MAX: usize = 16;
/// Longest distance and type names hnsw_rs accepts.
const MAX_NAME: usize = 256;

/// What the dump must match.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected {
    /// Rows of the index (every point is one of them).
    pub rows: usize,
    /// Points in the graph (the metadata's count).
    pub points: usize,
    /// `M` of the metadata's parameters.
    pub m: usize,
    /// `efConstruction` of the metadata's parameters.
    pub ef_construction: usize,
}

/// A file read with every length checked against the bytes left.
struct Bytes {
    inner: BufReader<File>,
    left: u64,
    what: &'static str,
}

impl Bytes {
    fn open(path: &Path, what: &'static str) -> Result<Self, String> {
        let (file, left) =
            bertflow_durable::open_regular(path, u64::MAX).map_err(|e| format!("{what}: {e}"))?;
        Ok(Bytes {
            inner: BufReader::new(file),
            left,
            what,
        })
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        if self.left < N as u64 {
            return Err(format!("{}: truncated", self.what));
        }
        let mut b = [0u8; N];
        self.inner
            .read_exact(&mut b)
            .map_err(|e| format!("{}: {e}", self.what))?;
        self.left -= N as u64;
        Ok(b)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.array::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_ne_bytes)
    }
    fn i32(&mut self) -> Result<i32, String> {
        self.array().map(i32::from_ne_bytes)
    }
    fn u64(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_ne_bytes)
    }
    fn f32(&mut self) -> Result<f32, String> {
        self.array().map(f32::from_ne_bytes)
    }
    fn f64(&mut self) -> Result<f64, String> {
        self.array().map(f64::from_ne_bytes)
    }

    /// A count (a `usize` in the file), at most `max`.
    fn count(&mut self, max: u64, what: &str) -> Result<usize, String> {
        let n = self.u64()?;
        if n > max {
            return Err(format!("{}: {what} {n} is out of range", self.what));
        }
        usize::try_from(n).map_err(|_| format!("{}: {what} {n} is out of range", self.what))
    }

    fn magic(&mut self, expected: u32, at: &str) -> Result<(), String> {
        let got = self.u32()?;
        if got != expected {
            return Err(format!("{}: bad magic number at {at}", self.what));
        }
        Ok(())
    }

    fn name(&mut self) -> Result<String, String> {
        let len = self.count(MAX_NAME as u64, "name length")?;
        let mut b = vec![0u8; len];
        if self.left < len as u64 {
            return Err(format!("{}: truncated", self.what));
        }
        self.inner
            .read_exact(&mut b)
            .map_err(|e| format!("{}: {e}", self.what))?;
        self.left -= len as u64;
        String::from_utf8(b).map_err(|_| format!("{}: a name is not UTF-8", self.what))
    }
}

/// Checks the dump `graph` + `data` against `expected` without allocating
/// more than a few bytes per layer; `Err` says what is wrong.
pub(crate) fn check_dump(graph: &Path, data: &Path, expected: Expected) -> Result<(), String> {
    let mut g = Bytes::open(graph, "graph")?;
    let mut d = Bytes::open(data, "data")?;
    // Description.
    let version = g.u32()?;
    if version != MAGICDESCR_3 && version != MAGICDESCR_4 {
        return Err("graph: not an hnsw_rs dump of format 3 or 4".into());
    }
    if g.u8()? != 1 {
        return Err("graph: not a full dump".into());
    }
    let m = usize::from(g.u8()?);
    if m != expected.m {
        return Err(format!("graph: M {m}, the metadata says {}", expected.m));
    }
    if version == MAGICDESCR_4 {
        let scale = g.f64()?;
        if !(scale.is_finite() && scale > 0.0) {
            return Err("graph: bad level scale".into());
        }
    }
    if usize::from(g.u8()?) != NB_LAYER_MAX {
        return Err("graph: bad number of layers in the description".into());
    }
    let ef = g.count(u64::MAX, "ef")?;
    if ef != expected.ef_construction {
        return Err(format!(
            "graph: ef_construction {ef}, the metadata says {}",
            expected.ef_construction
        ));
    }
    let nb_point = g.count(expected.points as u64, "point count")?;
    if nb_point != expected.points {
        return Err(format!(
            "graph: {nb_point} points, the metadata says {}",
            expected.points
        ));
    }
    if g.count(1, "dimension")? != 1 {
        return Err("graph: points are not one row number each".into());
    }
    g.name()?;
    if g.name()? != std::any::type_name::<u32>() {
        return Err("graph: points are not of type u32".into());
    }
    // Data header.
    d.magic(MAGICDATAP, "the start")?;
    if d.u64()? != 1 {
        return Err("data: points are not one row number each".into());
    }
    // Layers.
    let layers = usize::from(g.u8()?);
    if layers > NB_LAYER_MAX {
        return Err("graph: too many layers".into());
    }
    let mut sizes = [0usize; NB_LAYER_MAX];
    // The highest rank a neighbour refers to, per layer (+1; 0: none).
    let mut referred = [0usize; NB_LAYER_MAX];
    let mut loaded = 0usize;
    for (l, size) in sizes.iter_mut().enumerate().take(layers) {
        g.magic(MAGICLAYER, "a layer")?;
        // A point takes at least 17 bytes of the graph.
        let n = g.count(g.left / 17, "layer size")?;
        for r in 0..n {
            loaded += 1;
            if loaded > nb_point {
                return Err("graph: more points than the description says".into());
            }
            g.magic(MAGICPOINT, "a point")?;
            let origin = g.u64()?;
            if origin >= expected.rows as u64 {
                return Err(format!("graph: point of row {origin} is not in the index"));
            }
            let (layer, rank) = (g.u8()?, g.i32()?);
            if usize::from(layer) != l || usize::try_from(rank).ok() != Some(r) {
                return Err("graph: a point's layer or rank is inconsistent".into());
            }
            for _ in 0..NB_LAYER_MAX {
                // Each neighbour takes 17 bytes (id, layer, rank, distance).
                let k = g.count(g.left / 17, "neighbour count")?;
                for _ in 0..k {
                    let id = g.u64()?;
                    let (nl, nr) = (usize::from(g.u8()?), g.i32()?);
                    let distance = g.f32()?;
                    if id >= expected.rows as u64
                        || nl >= NB_LAYER_MAX
                        || nr < 0
                        || !distance.is_finite()
                    {
                        return Err("graph: a neighbour is out of range".into());
                    }
                    referred[nl] = referred[nl].max(nr as usize + 1);
                }
            }
            // The point's data.
            d.magic(MAGICDATAP, "a point")?;
            if d.u64()? != origin {
                return Err("data: the points are not those of the graph".into());
            }
            if d.u64()? != 4 {
                return Err("data: a point is not one u32".into());
            }
            if u64::from(d.u32()?) >= expected.rows as u64 {
                return Err("data: a point's row is not in the index".into());
            }
        }
        *size = n;
    }
    if loaded != nb_point {
        return Err(format!(
            "graph: {loaded} points, the description says {nb_point}"
        ));
    }
    if referred.iter().zip(&sizes).any(|(&r, &s)| r > s) {
        return Err("graph: a neighbour refers to a point that does not exist".into());
    }
    // Entry point.
    let origin = g.u64()?;
    let (layer, rank) = (usize::from(g.u8()?), g.i32()?);
    let rank_ok = usize::try_from(rank).is_ok_and(|r| layer < layers && r < sizes[layer]);
    if origin >= expected.rows as u64 || !rank_ok {
        return Err("graph: the entry point is out of range".into());
    }
    Ok(())
}
