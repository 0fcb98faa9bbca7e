//! [`SparseVector`]: one weight per vocabulary entry, stored as the entries
//! that are not zero.
use serde::{Deserialize, Serialize};

/// A sparse vector over a vocabulary: `indices` strictly increasing, one
/// `values` entry each (never zero as the encoders make them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SparseVector {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

impl SparseVector {
    /// The entries of `dense` that are not zero.
    pub fn from_dense(dense: &[f32]) -> Self {
        let mut v = Self::default();
        for (i, &x) in dense.iter().enumerate() {
            if x != 0.0 {
                v.indices.push(i as u32);
                v.values.push(x);
            }
        }
        v
    }

    /// From `(index, value)` pairs in any order (an index given twice keeps
    /// the larger value; zeros are dropped).
    pub fn from_pairs(mut pairs: Vec<(u32, f32)>) -> Self {
        pairs.sort_by_key(|p| p.0);
        let mut v = Self::default();
        for (i, x) in pairs {
            if x == 0.0 {
                continue;
            }
            if v.indices.last() == Some(&i) {
                let last = v.values.last_mut().expect("values follow indices");
                *last = last.max(x);
            } else {
                v.indices.push(i);
                v.values.push(x);
            }
        }
        v
    }

    /// Checks the invariants: as many values as indices, indices strictly
    /// increasing and below `dim` (if given), values finite.
    pub fn validate(&self, dim: Option<usize>) -> Result<(), String> {
        if self.indices.len() != self.values.len() {
            return Err(format!(
                "{} indices but {} values",
                self.indices.len(),
                self.values.len()
            ));
        }
        if let Some(w) = self.indices.windows(2).find(|w| w[0] >= w[1]) {
            return Err(format!(
                "indices are not strictly increasing ({} then {})",
                w[0], w[1]
            ));
        }
        if let (Some(d), Some(&last)) = (dim, self.indices.last()) {
            if last as usize >= d {
                return Err(format!("index {last} is outside the dimension {d}"));
            }
        }
        if let Some(x) = self.values.iter().find(|x| !x.is_finite()) {
            return Err(format!("value {x} is not finite"));
        }
        Ok(())
    }

    /// How many entries are stored.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// Keeps the `k` entries of largest absolute value (sentence-transformers'
    /// `max_active_dims`; of equal values the lower index), still sorted by index.
    pub fn top_k(&mut self, k: usize) {
        if self.indices.len() <= k {
            return;
        }
        let mut order: Vec<usize> = (0..self.indices.len()).collect();
        order.sort_by(|&a, &b| {
            self.values[b]
                .abs()
                .total_cmp(&self.values[a].abs())
                .then(a.cmp(&b))
        });
        order.truncate(k);
        order.sort_unstable();
        self.indices = order.iter().map(|&i| self.indices[i]).collect();
        self.values = order.iter().map(|&i| self.values[i]).collect();
    }

    /// The entries by decreasing value (of equal values the lower index
    /// first), at most `k` of them: what `SparseEncoder.decode` lists.
    pub fn top(&self, k: usize) -> Vec<(u32, f32)> {
        let mut pairs: Vec<(u32, f32)> = self
            .indices
            .iter()
            .copied()
            .zip(self.values.iter().copied())
            .collect();
        pairs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        pairs.truncate(k);
        pairs
    }

    /// The dot product with `other` (both sorted by index).
    pub fn dot(&self, other: &SparseVector) -> f32 {
        let (mut i, mut j, mut s) = (0, 0, 0f32);
        while i < self.indices.len() && j < other.indices.len() {
            match self.indices[i].cmp(&other.indices[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    s += self.values[i] * other.values[j];
                    i += 1;
                    j += 1;
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_pairs_top_k_and_dot() {
        let v = SparseVector::from_dense(&[0.0, 2.0, 0.0, -3.0, 1.0]);
        assert_eq!(v.indices, [1, 3, 4]);
        assert_eq!(v.values, [2.0, -3.0, 1.0]);
        v.validate(Some(5)).unwrap();
        assert!(v.validate(Some(4)).is_err());
        let mut k = v.clone();
        k.top_k(2);
        assert_eq!(
            (k.indices.as_slice(), k.values.as_slice()),
            (&[1, 3][..], &[2.0, -3.0][..])
        );
        assert_eq!(v.top(2), [(1, 2.0), (4, 1.0)]);
        let p = SparseVector::from_pairs(vec![(4, 1.0), (1, 0.5), (4, 2.0), (2, 0.0)]);
        assert_eq!(p.indices, [1, 4]);
        assert_eq!(p.values, [0.5, 2.0]);
        assert_eq!(v.dot(&p), 1.0 + 2.0);
        let bad = SparseVector {
            indices: vec![2, 2],
            values: vec![1.0, 1.0],
        };
        assert!(bad.validate(None).is_err());
    }
}
