//! A compact copy of an [`Ann`] graph for searching: its links as fixed-degree
//! `u32` rows (layer 0: `2 M` per point; upper layers: `M` per point on them),
//! searched by a plain beam search with the graph's own distance, after which
//! the hnsw_rs structure (an allocation per link) is dropped. Experimental:
//! measured in `benchmarks/index-ann.md` (resident memory and latency against
//! the hnsw_rs graph it comes from); the front ends search [`Ann`] itself.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::ann_space::{AnnMetric, Space};
use crate::{Ann, Index, IndexError};

/// No link in this slot.
const NONE: u32 = u32::MAX;

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

/// The links of an [`Ann`] graph, read-only, and its distance.
pub struct CompactAnn {
    index: std::sync::Arc<Index>,
    space: Space,
    metric: AnnMetric,
    /// Links per point in layer 0.
    degree0: usize,
    /// `rows x degree0` row numbers, [`NONE`] past a point's links.
    layer0: Vec<u32>,
    /// Layers 1 and up: each point on the layer and its links.
    upper: Vec<HashMap<u32, Box<[u32]>>>,
    /// Where every search starts: a point of the top layer.
    entry: u32,
    points: usize,
}

impl CompactAnn {
    /// The links of `ann`, which is dropped (with its hnsw_rs structure).
    pub fn from_ann(ann: Ann) -> Result<Self, IndexError> {
        let rows = ann.index.len();
        let degree0 = 2 * ann.params.m;
        let mut layer0 = vec![NONE; rows * degree0];
        let top = usize::from(ann.hnsw.get_max_level_observed());
        let mut upper: Vec<HashMap<u32, Box<[u32]>>> = vec![HashMap::new(); top];
        let mut entry = None;
        let mut points = 0usize;
        for point in ann.hnsw.get_point_indexation() {
            let row = point.get_origin_id();
            let level = usize::from(point.get_point_id().0);
            if row >= rows || level > top {
                return Err(IndexError::Corrupt(format!(
                    "the HNSW graph holds a point of row {row} at level {level}"
                )));
            }
            points += 1;
            if level == top {
                entry.get_or_insert(row as u32);
            }
            for (l, links) in point.get_neighborhood_id().iter().enumerate() {
                let ids = links.iter().map(|n| n.get_origin_id() as u32);
                if l == 0 {
                    let slots = &mut layer0[row * degree0..(row + 1) * degree0];
                    slots.iter_mut().zip(ids).for_each(|(s, id)| *s = id);
                } else if l <= level && l <= top {
                    upper[l - 1].insert(row as u32, ids.collect());
                }
            }
        }
        let entry = entry.ok_or_else(|| IndexError::Invalid("the HNSW graph is empty".into()))?;
        let space = ann.hnsw.get_distance().space;
        Ok(CompactAnn {
            index: ann.index,
            space,
            metric: ann.metric,
            degree0,
            layer0,
            upper,
            entry,
            points,
        })
    }

    /// Points in the graph.
    pub fn len(&self) -> usize {
        self.points
    }

    /// Whether the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.points == 0
    }

    /// Bytes the links take (layer 0's array and the upper layers' lists).
    pub fn link_bytes(&self) -> usize {
        let upper: usize = self
            .upper
            .iter()
            .flat_map(|l| l.values())
            .map(|v| 4 * v.len() + 4 + 16 + 8)
            .sum();
        4 * self.layer0.len() + upper
    }

    /// As [`Ann::search_rescored`], by a beam search of `ef` over the links.
    pub fn search_rescored(
        &self,
        query: &[f32],
        top_k: usize,
        ef: usize,
        rescore: usize,
    ) -> Result<Vec<(usize, f32)>, IndexError> {
        let d = self.index.identity().dimension;
        if query.len() != d {
            return Err(IndexError::Invalid(format!(
                "query of dimension {} for an index of dimension {d}",
                query.len()
            )));
        }
        if rescore == 0 {
            return Err(IndexError::Invalid(
                "rescore must be at least 1 (candidates rescored per result)".into(),
            ));
        }
        let k = top_k.min(self.points);
        if k == 0 {
            return Ok(Vec::new());
        }
        let mut q = Vec::with_capacity(d);
        crate::format::normalise_into(query, &mut q);
        let want = if self.metric.on_codes() {
            k.saturating_mul(rescore).min(self.points)
        } else {
            k
        };
        let point = self.space.query(&self.index, &q);
        let dist = |row: u32| self.space.eval(&self.index, &point, &[row]);
        // Greedy descent through the upper layers.
        let (mut at, mut best) = (self.entry, dist(self.entry));
        for layer in self.upper.iter().rev() {
            loop {
                let mut moved = false;
                for &n in layer.get(&at).map_or(&[][..], |l| &l[..]) {
                    let dn = dist(n);
                    if dn < best {
                        (at, best, moved) = (n, dn, true);
                    }
                }
                if !moved {
                    break;
                }
            }
        }
        // Beam search of layer 0.
        let ef = ef.max(want);
        let mut seen = vec![0u64; self.layer0.len() / self.degree0.max(1) / 64 + 1];
        let mut visit = |row: u32| {
            let (w, b) = (row as usize / 64, row % 64);
            let new = seen[w] & (1 << b) == 0;
            seen[w] |= 1 << b;
            new
        };
        visit(at);
        let mut todo = BinaryHeap::from([Reverse((Dist(best), at))]);
        let mut found = BinaryHeap::from([(Dist(best), at)]);
        while let Some(Reverse((Dist(dc), c))) = todo.pop() {
            if found.len() >= ef && found.peek().is_some_and(|w| dc > w.0 .0) {
                break;
            }
            let links = &self.layer0[c as usize * self.degree0..(c as usize + 1) * self.degree0];
            for &n in links.iter().take_while(|&&n| n != NONE) {
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
        let mut ranked = found.into_sorted_vec();
        ranked.truncate(want);
        let ids: Vec<usize> = ranked.iter().map(|r| r.1 as usize).collect();
        self.index.rescore_exact(ids, &q, k)
    }
}
