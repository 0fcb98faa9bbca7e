//! A compact HNSW graph: its links as fixed-degree `u32` rows (layer 0: `2 M`
//! per point; each upper layer a point is on: `M`), searched by a plain beam
//! search with the graph's distance ([`crate::ann_space`]). Built directly
//! ([`CompactAnn::build`]: HNSW insertion as in Malkov & Yashunin, with their
//! neighbour-selection heuristic, on any number of threads) or made from an
//! hnsw_rs graph ([`CompactAnn::from_ann`]: its links copied, the hnsw_rs
//! structure, an allocation per link, dropped). [`crate::Ann`] holds one for
//! an index with codes; stored as a links file ([`crate::ann_links`]).
//!
//! The parallel build is hnswlib's: a lock per point guards its link rows
//! while they are rewritten (a reader sees each slot whole, as atomics, and a
//! list being rewritten at worst partly: any row it holds is a real row), and
//! a point above the top layer holds the graph's entry lock until it is linked.
//! One thread inserts the rows in order: the same graph every time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

use crate::ann_insert::{from_atomic, to_atomic, Shared};
use crate::ann_space::{AnnMetric, Space};
use crate::{AnnParams, Index, IndexError};

/// No link in this slot.
pub(crate) const NONE: u32 = u32::MAX;
/// The highest layer a point is put on.
pub(crate) const MAX_LEVEL: usize = 15;

/// A distance ordered totally (distances are finite and >= 0).
#[derive(Debug, Clone, Copy)]
struct Dist(f32);
impl PartialEq for Dist {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Dist {}
impl PartialOrd for Dist {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Dist {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A link slot: a plain `u32` (searching) or an atomic one (building).
pub(crate) trait Slot: Sync {
    fn get(&self) -> u32;
}
impl Slot for u32 {
    fn get(&self) -> u32 {
        *self
    }
}
impl Slot for AtomicU32 {
    fn get(&self) -> u32 {
        self.load(Relaxed)
    }
}

/// The level of row `row`: `floor(-ln(u) / ln(M))`, `u` the row's draw of
/// splitmix64 from a fixed seed (a function of the row alone, so that a graph
/// extended later draws the levels it would have drawn built at once).
pub(crate) fn level_of(row: usize, m: usize) -> u8 {
    let mut z = 0x5eed_u64.wrapping_add((row as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    let u = ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64;
    let scale = 1.0 / (m as f64).ln();
    ((-(1.0 - u).ln() * scale) as usize).min(MAX_LEVEL) as u8
}

/// The links of a graph over an index, and its distance.
pub struct CompactAnn {
    pub(crate) index: Arc<Index>,
    pub(crate) space: Space,
    pub(crate) metric: AnnMetric,
    pub(crate) params: AnnParams,
    /// The top layer of every point (rows `0..points`).
    pub(crate) levels: Vec<u8>,
    /// Where each point's upper-layer rows start in `upper`, in rows of `M`.
    pub(crate) upper_at: Vec<u32>,
    /// `points x 2 M` row numbers, [`NONE`] past a point's links.
    pub(crate) layer0: Vec<u32>,
    /// For each point, its `M` links in layers `1..=level`, one row each.
    pub(crate) upper: Vec<u32>,
    /// Where every search starts: a point of the top layer.
    pub(crate) entry: u32,
    /// The highest level of any point.
    pub(crate) top: usize,
}

/// The links seen through slots of type `S`, and their shape.
pub(crate) struct View<'a, S> {
    /// The codes the distance reads (their cache lines fetched ahead).
    pub(crate) index: &'a Index,
    pub(crate) space: Space,
    pub(crate) m: usize,
    pub(crate) levels: &'a [u8],
    pub(crate) upper_at: &'a [u32],
    pub(crate) layer0: &'a [S],
    pub(crate) upper: &'a [S],
}

impl<S: Slot> View<'_, S> {
    /// The slots of `row` in `layer` (none if it is not on that layer).
    pub(crate) fn slots(&self, layer: usize, row: u32) -> &[S] {
        let r = row as usize;
        if layer == 0 {
            &self.layer0[r * 2 * self.m..(r + 1) * 2 * self.m]
        } else if usize::from(self.levels[r]) < layer {
            &[]
        } else {
            let at = (self.upper_at[r] as usize + layer - 1) * self.m;
            &self.upper[at..at + self.m]
        }
    }

    /// The links of `row` in `layer`, into `out`.
    pub(crate) fn read(&self, layer: usize, row: u32, out: &mut Vec<u32>) {
        out.clear();
        out.extend(
            self.slots(layer, row)
                .iter()
                .map(Slot::get)
                .take_while(|&x| x != NONE),
        );
    }

    /// From `at` (with its distance), the closest point of `layer` reached by
    /// moving to a closer link while there is one.
    pub(crate) fn greedy(
        &self,
        dist: &dyn Fn(u32) -> f32,
        mut at: (f32, u32),
        layer: usize,
    ) -> (f32, u32) {
        let mut links = Vec::new();
        loop {
            let mut moved = false;
            self.read(layer, at.1, &mut links);
            for &n in &links {
                let d = dist(n);
                if d < at.0 {
                    (at, moved) = ((d, n), true);
                }
            }
            if !moved {
                return at;
            }
        }
    }

    /// The `ef` closest points of `layer` found from `start`, closest first;
    /// `visit` says whether a point is seen for the first time (and marks it).
    pub(crate) fn beam(
        &self,
        dist: &dyn Fn(u32) -> f32,
        start: (f32, u32),
        ef: usize,
        layer: usize,
        visit: &mut dyn FnMut(u32) -> bool,
    ) -> Vec<(f32, u32)> {
        visit(start.1);
        let mut todo = BinaryHeap::from([Reverse((Dist(start.0), start.1))]);
        let mut found = BinaryHeap::from([(Dist(start.0), start.1)]);
        let mut links = Vec::new();
        while let Some(Reverse((Dist(dc), c))) = todo.pop() {
            if found.len() >= ef && found.peek().is_some_and(|w| dc > w.0 .0) {
                break;
            }
            self.read(layer, c, &mut links);
            for &n in &links {
                self.space.prefetch(self.index, n);
            }
            for &n in &links {
                if !visit(n) {
                    continue;
                }
                let dn = dist(n);
                if found.len() < ef || found.peek().is_some_and(|w| dn < w.0 .0) {
                    todo.push(Reverse((Dist(dn), n)));
                    found.push((Dist(dn), n));
                    if found.len() > ef {
                        found.pop();
                    }
                }
            }
        }
        found
            .into_sorted_vec()
            .into_iter()
            .map(|(d, n)| (d.0, n))
            .collect()
    }
}

impl CompactAnn {
    /// An empty graph over `index` (its rows inserted by [`Self::insert_rows`]).
    fn empty(index: Arc<Index>, params: AnnParams) -> Result<Self, IndexError> {
        crate::ann_space::check_params(&index, params)?;
        let metric = AnnMetric::of(&index);
        let space = Space::new(metric, &index)?;
        Ok(CompactAnn {
            index,
            space,
            metric,
            params,
            levels: Vec::new(),
            upper_at: Vec::new(),
            layer0: Vec::new(),
            upper: Vec::new(),
            entry: 0,
            top: 0,
        })
    }

    /// An HNSW graph over every row of `index` (over its codes if it has any,
    /// as [`crate::Ann::build`]), built with `params` on `threads` threads
    /// (1: the rows inserted in order, the same graph every time). `progress`
    /// is called, on the calling thread, with the rows inserted so far.
    pub fn build(
        index: Arc<Index>,
        params: AnnParams,
        threads: usize,
        progress: &dyn Fn(usize),
    ) -> Result<Self, IndexError> {
        let mut g = Self::empty(index, params)?;
        g.insert_rows(threads, progress)?;
        Ok(g)
    }

    /// The graph of `hnsw` (hnsw_rs's), its links copied.
    pub(crate) fn from_hnsw(
        hnsw: &hnsw_rs::prelude::Hnsw<'static, u32, crate::ann::RowCosine>,
        index: Arc<Index>,
        params: AnnParams,
        metric: AnnMetric,
    ) -> Result<Self, IndexError> {
        let rows = hnsw.get_nb_point();
        let m = params.m;
        let corrupt = |what: String| IndexError::Corrupt(format!("the HNSW graph {what}"));
        if rows > index.len() {
            return Err(corrupt(format!("holds {rows} points")));
        }
        let mut levels = vec![0u8; rows];
        let mut seen = vec![false; rows];
        let mut lists = Vec::new();
        for point in hnsw.get_point_indexation() {
            let row = point.get_origin_id();
            let level = point.get_point_id().0;
            if row >= rows || usize::from(level) > MAX_LEVEL || seen[row] {
                return Err(corrupt(format!(
                    "holds a point of row {row} at level {level}"
                )));
            }
            seen[row] = true;
            levels[row] = level;
            let ids: Vec<Vec<u32>> = point
                .get_neighborhood_id()
                .iter()
                .take(usize::from(level) + 1)
                .map(|l| l.iter().map(|n| n.get_origin_id() as u32).collect())
                .collect();
            lists.push((row, ids));
        }
        if seen.iter().any(|&s| !s) {
            return Err(corrupt("misses rows".into()));
        }
        let mut g = CompactAnn {
            space: hnsw.get_distance().space,
            index,
            metric,
            params,
            upper_at: Vec::new(),
            layer0: vec![NONE; rows * 2 * m],
            upper: Vec::new(),
            levels,
            entry: 0,
            top: 0,
        };
        g.place_upper(rows)?;
        let top = g.levels.iter().copied().max().unwrap_or(0);
        g.top = usize::from(top);
        g.entry = g.levels.iter().position(|&l| l == top).unwrap_or(0) as u32;
        for (row, ids) in lists {
            for (l, links) in ids.iter().enumerate() {
                if links.iter().any(|&x| x as usize >= rows) {
                    return Err(corrupt(format!("links row {row} to a row out of range")));
                }
                let cap = if l == 0 { 2 * m } else { m };
                let slots: &mut [u32] = if l == 0 {
                    &mut g.layer0[row * 2 * m..(row + 1) * 2 * m]
                } else {
                    let at = (g.upper_at[row] as usize + l - 1) * m;
                    &mut g.upper[at..at + m]
                };
                slots
                    .iter_mut()
                    .zip(&links[..links.len().min(cap)])
                    .for_each(|(s, &x)| *s = x);
            }
        }
        Ok(g)
    }

    /// The links of `ann` (an hnsw_rs graph, which is dropped; a compact one
    /// is returned as it is).
    pub fn from_ann(ann: crate::Ann) -> Result<Self, IndexError> {
        ann.into_compact()
    }

    /// `upper_at` for points `0..rows` (from `levels`), and `upper` grown to
    /// hold their rows ([`NONE`] in the new ones).
    pub(crate) fn place_upper(&mut self, rows: usize) -> Result<(), IndexError> {
        let mut at = match self.upper_at.len() {
            0 => 0,
            p => u64::from(self.upper_at[p - 1]) + u64::from(self.levels[p - 1]),
        };
        for p in self.upper_at.len()..rows {
            self.upper_at.push(u32::try_from(at).map_err(|_| {
                IndexError::Invalid("too many points on the upper layers of the graph".into())
            })?);
            at += u64::from(self.levels[p]);
        }
        self.upper.resize(at as usize * self.params.m, NONE);
        Ok(())
    }

    /// Insert rows `self.len()..` of the index on `threads` threads.
    pub(crate) fn insert_rows(
        &mut self,
        threads: usize,
        progress: &dyn Fn(usize),
    ) -> Result<(), IndexError> {
        let (from, n, m) = (self.len(), self.index.len(), self.params.m);
        if n >= NONE as usize {
            return Err(IndexError::Invalid(format!(
                "{n} rows: the HNSW graph holds at most 2^32 - 2"
            )));
        }
        if from >= n {
            return Ok(());
        }
        self.levels.extend((from..n).map(|r| level_of(r, m)));
        self.place_upper(n)?;
        self.layer0.resize(n * 2 * m, NONE);
        let mut first = from;
        if from == 0 {
            // The first point: the entry, with no links.
            (self.entry, self.top, first) = (0, usize::from(self.levels[0]), 1);
        }
        let (layer0, upper) = (
            to_atomic(std::mem::take(&mut self.layer0)),
            to_atomic(std::mem::take(&mut self.upper)),
        );
        let (index, space) = (&self.index, self.space);
        let between = move |a: u32, b: u32| space.eval(index, &[a], &[b]);
        let same = move |a: u32, b: u32| space.same(index, a, b);
        let shared = Shared {
            view: View {
                index,
                space,
                m,
                levels: &self.levels,
                upper_at: &self.upper_at,
                layer0: &layer0,
                upper: &upper,
            },
            between: &between,
            same: &same,
            params: self.params,
            locks: (0..n).map(|_| Mutex::new(())).collect(),
            entry: Mutex::new((self.entry, self.top)),
        };
        let next = AtomicUsize::new(first);
        let done = AtomicUsize::new(first);
        let work = |report: Option<&dyn Fn(usize)>| {
            let mut stamps = vec![0u32; n];
            let mut stamp = 0u32;
            let mut reported = first / 16_384;
            loop {
                let i = next.fetch_add(1, Relaxed);
                if i >= n {
                    break;
                }
                shared.insert(i as u32, &mut stamps, &mut stamp);
                let d = done.fetch_add(1, Relaxed) + 1;
                if let Some(report) = report {
                    if d / 16_384 > reported {
                        reported = d / 16_384;
                        report(reported * 16_384);
                    }
                }
            }
        };
        std::thread::scope(|s| {
            for _ in 1..threads.max(1) {
                s.spawn(|| work(None));
            }
            work(Some(progress));
        });
        (self.entry, self.top) = *shared.entry.lock().unwrap_or_else(PoisonError::into_inner);
        drop(shared);
        (self.layer0, self.upper) = (from_atomic(layer0), from_atomic(upper));
        progress(n);
        Ok(())
    }

    /// Insert the rows its index gained since the graph was made (by `index
    /// add`) on `threads` threads (1: as [`Self::build`] would have inserted
    /// them). Returns how many were inserted.
    pub fn extend(
        &mut self,
        threads: usize,
        progress: &dyn Fn(usize),
    ) -> Result<usize, IndexError> {
        let from = self.len();
        self.insert_rows(threads, progress)?;
        Ok(self.len() - from)
    }

    /// Points in the graph.
    pub fn len(&self) -> usize {
        self.levels.len()
    }

    /// Whether the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// Its parameters.
    pub fn params(&self) -> AnnParams {
        self.params
    }

    /// Bytes the links take in memory (layer 0's rows, the upper layers' rows,
    /// a level and an offset per point).
    pub fn link_bytes(&self) -> usize {
        4 * (self.layer0.len() + self.upper.len() + self.upper_at.len()) + self.levels.len()
    }

    fn view(&self) -> View<'_, u32> {
        View {
            index: &self.index,
            space: self.space,
            m: self.params.m,
            levels: &self.levels,
            upper_at: &self.upper_at,
            layer0: &self.layer0,
            upper: &self.upper,
        }
    }

    /// As [`crate::Ann::search_rescored`], by a beam search of `ef` over the
    /// links.
    pub fn search_rescored(
        &self,
        query: &[f32],
        top_k: usize,
        ef: usize,
        rescore: usize,
    ) -> Result<Vec<(usize, f32)>, IndexError> {
        let q = self.index.unit_query(query, Some(rescore))?;
        let points = self.len();
        let k = top_k.min(points);
        if k == 0 {
            return Ok(Vec::new());
        }
        let want = if self.metric.on_codes() {
            k.saturating_mul(rescore).min(points)
        } else {
            k
        };
        let point = self.space.query(&self.index, &q);
        let dist = |row: u32| self.space.eval(&self.index, &point, &[row]);
        let view = self.view();
        let mut at = (dist(self.entry), self.entry);
        for layer in (1..=self.top).rev() {
            at = view.greedy(&dist, at, layer);
        }
        let mut seen = vec![0u64; points / 64 + 1];
        let mut visit = |row: u32| {
            let (w, b) = (row as usize / 64, row % 64);
            let new = seen[w] & (1 << b) == 0;
            seen[w] |= 1 << b;
            new
        };
        let mut ranked = view.beam(&dist, at, ef.max(want), 0, &mut visit);
        ranked.truncate(want);
        let ids: Vec<usize> = ranked.iter().map(|r| r.1 as usize).collect();
        self.index.rescore_exact(ids, &q, k)
    }
}
