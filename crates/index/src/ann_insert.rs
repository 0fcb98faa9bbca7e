//! The parallel insertion of [`crate::CompactAnn::build`]: hnswlib's scheme, a
//! lock per point guarding its link rows while they are rewritten (a reader
//! sees each slot whole, as atomics, and a list being rewritten at worst
//! partly: any row it holds is a real row), a point's own rows all written
//! before any link back to it (so no search enters a half-linked point), and
//! a point above the top layer holding the graph's entry lock until it is linked.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

use crate::ann_compact::{View, NONE};
use crate::AnnParams;

/// What every inserting thread shares.
pub(crate) struct Shared<'a> {
    pub(crate) view: View<'a, AtomicU32>,
    pub(crate) between: &'a (dyn Fn(u32, u32) -> f32 + Sync),
    /// Whether two rows have the same code (or vector).
    pub(crate) same: &'a (dyn Fn(u32, u32) -> bool + Sync),
    pub(crate) params: AnnParams,
    /// One lock per point: held while its link rows are rewritten.
    pub(crate) locks: Vec<Mutex<()>>,
    /// The entry point and the top layer.
    pub(crate) entry: Mutex<(u32, usize)>,
}

impl Shared<'_> {
    /// At most `m` of `candidates` (closest first, with their distances to
    /// the point being linked): each kept only if it is closer to that point
    /// than to every one kept before it (the HNSW paper's heuristic), and is
    /// not a copy (the same code) of one kept. Without that last rule rows of
    /// one code (zero vectors, repeated sentences: all as far from each other
    /// as from themselves) linked only to each other once there were more
    /// than `m` of them: a closed clique, where a search that entered it stayed.
    fn select(&self, candidates: &[(f32, u32)], m: usize) -> Vec<u32> {
        let mut kept: Vec<u32> = Vec::with_capacity(m);
        for &(d, c) in candidates {
            if kept.len() >= m {
                break;
            }
            if kept.iter().all(|&k| {
                let apart = (self.between)(c, k);
                apart > d || (apart == d && !(self.same)(c, k))
            }) {
                kept.push(c);
            }
        }
        kept
    }

    fn write(&self, layer: usize, row: u32, links: &[u32]) {
        let slots = self.view.slots(layer, row);
        for (k, s) in slots.iter().enumerate() {
            s.store(links.get(k).copied().unwrap_or(NONE), Relaxed);
        }
    }

    fn lock(&self, row: u32) -> std::sync::MutexGuard<'_, ()> {
        self.locks[row as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Link row `i` (not the first point) into the graph; `stamps` and
    /// `stamp` mark the points each of its searches has seen.
    pub(crate) fn insert(&self, i: u32, stamps: &mut [u32], stamp: &mut u32) {
        let (m, m0) = (self.params.m, 2 * self.params.m);
        let level = usize::from(self.view.levels[i as usize]);
        let mut held = Some(self.entry.lock().unwrap_or_else(PoisonError::into_inner));
        let (entry, top) = held.as_deref().copied().unwrap_or((0, 0));
        if level <= top {
            held = None;
        }
        let dist = |r: u32| (self.between)(i, r);
        let mut at = (dist(entry), entry);
        for l in (level + 1..=top).rev() {
            at = self.view.greedy(&dist, at, l);
        }
        // First i's own rows, every layer, then the links back to it: another
        // thread reaches i only through a link back, and by then every row
        // of i is whole (a search that entered i with its lower rows still
        // empty was stuck there, and linked its point to i alone).
        let mut chosen_by_layer = Vec::with_capacity(level.min(top) + 1);
        for l in (0..=level.min(top)).rev() {
            *stamp = stamp.wrapping_add(1);
            if *stamp == 0 {
                stamps.fill(0);
                *stamp = 1;
            }
            let s = *stamp;
            let mut visit = |r: u32| std::mem::replace(&mut stamps[r as usize], s) != s;
            let near = self
                .view
                .beam(&dist, at, self.params.ef_construction, l, &mut visit);
            at = near[0];
            let chosen = self.select(&near, m);
            {
                let _own = self.lock(i);
                self.write(l, i, &chosen);
            }
            chosen_by_layer.push((l, chosen));
        }
        let mut links = Vec::new();
        for (l, chosen) in chosen_by_layer {
            let cap = if l == 0 { m0 } else { m };
            for &c in &chosen {
                let _theirs = self.lock(c);
                self.view.read(l, c, &mut links);
                if links.len() < cap {
                    links.push(i);
                } else {
                    let mut near: Vec<(f32, u32)> = links
                        .iter()
                        .chain([&i])
                        .map(|&x| ((self.between)(c, x), x))
                        .collect();
                    near.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    links = self.select(&near, cap);
                }
                self.write(l, c, &links);
            }
        }
        if let Some(mut g) = held {
            *g = (i, level);
        }
    }
}

pub(crate) fn to_atomic(v: Vec<u32>) -> Vec<AtomicU32> {
    v.into_iter().map(AtomicU32::new).collect()
}

pub(crate) fn from_atomic(v: Vec<AtomicU32>) -> Vec<u32> {
    v.into_iter().map(AtomicU32::into_inner).collect()
}
