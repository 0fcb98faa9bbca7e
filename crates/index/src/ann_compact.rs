//! A compact HNSW graph: its links as fixed-degree `u32` rows (layer 0: `2 M`
//! per point; upper layers: `M` per point on them), searched by a plain beam
//! search with the graph's distance ([`crate::ann_space`]). Made from an
//! [`Ann`] (its links copied, the hnsw_rs structure, an allocation per link,
//! dropped) or built directly ([`CompactAnn::build`]: HNSW insertion as in
//! Malkov & Yashunin, with their neighbour-selection heuristic, on one thread).
//! Experimental and in memory only (no file): measured in
//! `benchmarks/index-ann.md`; the front ends search [`Ann`].

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::ann_space::{AnnMetric, Space};
use crate::{Ann, AnnParams, Index, IndexError};

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
    upper: Vec<HashMap<u32, Vec<u32>>>,
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
        let mut upper: Vec<HashMap<u32, Vec<u32>>> = vec![HashMap::new(); top];
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
        let q = self.index.unit_query(query, Some(rescore))?;
        let k = top_k.min(self.points);
        if k == 0 {
            return Ok(Vec::new());
        }
        let want = if self.metric.on_codes() {
            k.saturating_mul(rescore).min(self.points)
        } else {
            k
        };
        let point = self.space.query(&self.index, &q);
        let dist = |row: u32| self.space.eval(&self.index, &point, &[row]);
        let mut at = (dist(self.entry), self.entry);
        for layer in (1..=self.upper.len()).rev() {
            at = self.greedy(&dist, at, layer);
        }
        let mut seen = vec![0u64; self.layer0.len() / self.degree0.max(1) / 64 + 1];
        let mut visit = |row: u32| {
            let (w, b) = (row as usize / 64, row % 64);
            let new = seen[w] & (1 << b) == 0;
            seen[w] |= 1 << b;
            new
        };
        let found = self.beam(&dist, at, ef.max(want), 0, &mut visit);
        let mut ranked = found;
        ranked.truncate(want);
        let ids: Vec<usize> = ranked.iter().map(|r| r.1 as usize).collect();
        self.index.rescore_exact(ids, &q, k)
    }

    /// The links of `row` in `layer` (none if it is not on that layer).
    fn links(&self, layer: usize, row: u32) -> &[u32] {
        if layer == 0 {
            let all = &self.layer0[row as usize * self.degree0..(row as usize + 1) * self.degree0];
            let n = all.iter().position(|&x| x == NONE).unwrap_or(all.len());
            &all[..n]
        } else {
            self.upper[layer - 1].get(&row).map_or(&[], Vec::as_slice)
        }
    }

    fn set_links(&mut self, layer: usize, row: u32, links: &[u32]) {
        if layer == 0 {
            let slots =
                &mut self.layer0[row as usize * self.degree0..(row as usize + 1) * self.degree0];
            slots.fill(NONE);
            slots.iter_mut().zip(links).for_each(|(s, &x)| *s = x);
        } else {
            self.upper[layer - 1].insert(row, links.to_vec());
        }
    }

    /// From `at` (with its distance), the closest point of `layer` reached by
    /// moving to a closer link while there is one.
    fn greedy(&self, dist: &dyn Fn(u32) -> f32, mut at: (f32, u32), layer: usize) -> (f32, u32) {
        loop {
            let mut moved = false;
            for &n in self.links(layer, at.1) {
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
    fn beam(
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
        while let Some(Reverse((Dist(dc), c))) = todo.pop() {
            if found.len() >= ef && found.peek().is_some_and(|w| dc > w.0 .0) {
                break;
            }
            for &n in self.links(layer, c) {
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

    /// The distance between two rows.
    fn between(&self, a: u32, b: u32) -> f32 {
        self.space.eval(&self.index, &[a], &[b])
    }

    /// At most `m` of `candidates` (closest first, with their distances to
    /// the point being linked): each kept only if it is closer to that point
    /// than to every one kept before it (the HNSW paper's heuristic).
    fn select(&self, candidates: &[(f32, u32)], m: usize) -> Vec<u32> {
        let mut kept: Vec<u32> = Vec::with_capacity(m);
        for &(d, c) in candidates {
            if kept.len() >= m {
                break;
            }
            if kept.iter().all(|&k| self.between(c, k) >= d) {
                kept.push(c);
            }
        }
        kept
    }

    /// An HNSW graph over every row of `index` (over its codes if it has any,
    /// as [`Ann::build`]), built here on one thread with `params`. `progress`
    /// is called with the rows inserted so far.
    pub fn build(
        index: std::sync::Arc<Index>,
        params: AnnParams,
        progress: &dyn Fn(usize),
    ) -> Result<Self, IndexError> {
        crate::ann_space::check_params(&index, params)?;
        let metric = AnnMetric::of(&index);
        let space = Space::new(metric, &index)?;
        let n = index.len();
        let (m, m0) = (params.m, 2 * params.m);
        let mut g = CompactAnn {
            index,
            space,
            metric,
            degree0: m0,
            layer0: vec![NONE; n * m0],
            upper: Vec::new(),
            entry: 0,
            points: 0,
        };
        // Levels: floor(-ln(u) / ln(M)), from a fixed seed (splitmix64).
        let mut state = 0x5eed_u64;
        let mut uniform = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        let scale = 1.0 / (m as f64).ln();
        // Visited marks: the stamp of the search that saw each row.
        let mut stamps = vec![0u32; n];
        let mut stamp = 0u32;
        for i in 0..n as u32 {
            let level = ((-(1.0 - uniform()).ln() * scale) as usize).min(15);
            if g.points == 0 {
                g.upper.resize(level, HashMap::new());
                (1..=level).for_each(|l| g.set_links(l, i, &[]));
                (g.entry, g.points) = (i, 1);
                continue;
            }
            let top = g.upper.len();
            let dist = |r: u32| g.between(i, r);
            let mut at = (dist(g.entry), g.entry);
            for l in (level + 1..=top).rev() {
                at = g.greedy(&dist, at, l);
            }
            let mut chosen_per_layer = Vec::new();
            for l in (0..=level.min(top)).rev() {
                stamp += 1;
                let mut visit = |r: u32| std::mem::replace(&mut stamps[r as usize], stamp) != stamp;
                let near = g.beam(&dist, at, params.ef_construction, l, &mut visit);
                at = near[0];
                chosen_per_layer.push((l, g.select(&near, m)));
            }
            for (l, chosen) in chosen_per_layer {
                g.set_links(l, i, &chosen);
                let cap = if l == 0 { m0 } else { m };
                for &c in &chosen {
                    let mut links = g.links(l, c).to_vec();
                    if links.len() < cap {
                        links.push(i);
                    } else {
                        let mut near: Vec<(f32, u32)> = links
                            .iter()
                            .chain([&i])
                            .map(|&x| (g.between(c, x), x))
                            .collect();
                        near.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                        links = g.select(&near, cap);
                    }
                    g.set_links(l, c, &links);
                }
            }
            if level > top {
                g.upper.resize(level, HashMap::new());
                (top + 1..=level).for_each(|l| g.set_links(l, i, &[]));
                g.entry = i;
            }
            g.points += 1;
            if g.points.is_multiple_of(16_384) {
                progress(g.points);
            }
        }
        progress(g.points);
        Ok(g)
    }
}
