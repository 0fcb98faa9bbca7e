//! Lexical bias of sentence similarities (Li et al. 2020, section 2 and
//! Table 6): do similarities follow surface overlap (edit distance) rather
//! than meaning?

use serde::{Deserialize, Serialize};

use crate::error::{check_finite_f64, AnalysisError, Result};
use crate::stats::spearman;

/// Levenshtein distance (unit-cost insertions, deletions, substitutions)
/// between two sequences. `O(len(a) * len(b))` time, two rows of memory.
pub fn edit_distance<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    if a.is_empty() {
        return b.len();
    }
    if b.is_empty() {
        return a.len();
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0usize; b.len() + 1];
    for (i, ai) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, bj) in b.iter().enumerate() {
            let substitution = prev[j] + usize::from(ai != bj);
            let deletion = prev[j + 1] + 1;
            let insertion = cur[j] + 1;
            cur[j + 1] = substitution.min(deletion).min(insertion);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The characters of `s` (Unicode scalar values), for a character-level
/// edit distance.
pub fn char_tokens(s: &str) -> Vec<char> {
    s.chars().collect()
}

/// The whitespace-separated words of `s`, for a word-level edit distance.
pub fn word_tokens(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

/// Character-level edit distance of two strings.
pub fn char_edit_distance(a: &str, b: &str) -> usize {
    edit_distance(&char_tokens(a), &char_tokens(b))
}

/// Word-level (whitespace tokens) edit distance of two strings.
pub fn word_edit_distance(a: &str, b: &str) -> usize {
    edit_distance(&word_tokens(a), &word_tokens(b))
}

/// Spearman correlations (x100) between model similarity, gold score and
/// edit distance over sentence pairs. `None` where a correlation is
/// undefined (fewer than 2 pairs, or a constant input).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LexicalBias {
    /// Number of pairs.
    pub n_pairs: usize,
    /// Spearman(similarity, edit distance) x100; strongly negative values
    /// mean similarity mostly tracks surface overlap.
    pub spearman_sim_vs_edit: Option<f64>,
    /// Spearman(similarity, gold) x100 over all pairs.
    pub spearman_sim_vs_gold: Option<f64>,
    /// Spearman(gold, edit distance) x100 (how lexical the data set itself is).
    pub spearman_gold_vs_edit: Option<f64>,
    /// The edit-distance threshold of the "small" subset.
    pub threshold: usize,
    /// Number of pairs with edit distance `<= threshold`.
    pub n_small: usize,
    /// Spearman(similarity, gold) x100 over pairs with edit distance
    /// `<= threshold` (where lexical overlap cannot tell pairs apart).
    pub spearman_sim_vs_gold_small: Option<f64>,
}

fn x100(v: Option<f64>) -> Option<f64> {
    v.map(|r| r * 100.0)
}

/// Lexical-bias correlations for pairs with model similarity `sims[i]`, gold
/// score `gold[i]` and edit distance `edit_dist[i]`; `threshold` (the paper
/// uses 4, on words) selects the small-edit-distance subset.
///
/// Errors: the three slices differ in length, or a similarity or gold score is
/// not finite.
pub fn lexical_bias(
    sims: &[f64],
    gold: &[f64],
    edit_dist: &[usize],
    threshold: usize,
) -> Result<LexicalBias> {
    if sims.len() != gold.len() {
        return Err(AnalysisError::LengthMismatch {
            what: "lexical_bias: similarities vs gold scores",
            left: sims.len(),
            right: gold.len(),
        });
    }
    if sims.len() != edit_dist.len() {
        return Err(AnalysisError::LengthMismatch {
            what: "lexical_bias: similarities vs edit distances",
            left: sims.len(),
            right: edit_dist.len(),
        });
    }
    check_finite_f64("lexical_bias: similarities", sims)?;
    check_finite_f64("lexical_bias: gold scores", gold)?;
    let edits: Vec<f64> = edit_dist.iter().map(|&e| e as f64).collect();

    let (small_sims, small_gold): (Vec<f64>, Vec<f64>) = sims
        .iter()
        .zip(gold)
        .zip(edit_dist)
        .filter(|(_, &e)| e <= threshold)
        .map(|((&s, &g), _)| (s, g))
        .unzip();

    Ok(LexicalBias {
        n_pairs: sims.len(),
        spearman_sim_vs_edit: x100(spearman(sims, &edits)),
        spearman_sim_vs_gold: x100(spearman(sims, gold)),
        spearman_gold_vs_edit: x100(spearman(gold, &edits)),
        threshold,
        n_small: small_sims.len(),
        spearman_sim_vs_gold_small: x100(spearman(&small_sims, &small_gold)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_edit_distances() {
        assert_eq!(char_edit_distance("kitten", "sitting"), 3);
        assert_eq!(char_edit_distance("sitting", "kitten"), 3);
        assert_eq!(char_edit_distance("flaw", "lawn"), 2);
        assert_eq!(char_edit_distance("", ""), 0);
        assert_eq!(char_edit_distance("", "abc"), 3);
        assert_eq!(char_edit_distance("abc", ""), 3);
        assert_eq!(char_edit_distance("same", "same"), 0);
        // Characters, not bytes: one substitution of a 2-byte character.
        assert_eq!(char_edit_distance("café", "cafe"), 1);
    }

    #[test]
    fn word_level_distances() {
        assert_eq!(
            word_edit_distance("a man is playing a guitar", "a man  is playing the\tflute"),
            2
        );
        assert_eq!(word_edit_distance("", "one two"), 2);
        assert_eq!(word_tokens("  x  y "), vec!["x", "y"]);
        // Generic over any PartialEq token type.
        assert_eq!(edit_distance(&[1, 2, 3, 4], &[2, 3, 4, 5]), 2);
        let empty: [u32; 0] = [];
        assert_eq!(edit_distance(&empty, &empty), 0);
    }

    #[test]
    fn lexical_bias_tiny_example() {
        // 5 pairs. Similarity decreases with edit distance exactly:
        //   edit = [0, 1, 2, 5, 8], sims = [0.9, 0.8, 0.7, 0.6, 0.5]
        //   -> Spearman(sim, edit) = -100.
        // gold = [1, 3, 2, 5, 4]: ranks [1, 3, 2, 5, 4]; sim ranks [5, 4, 3, 2, 1].
        //   d = rank(sim) - rank(gold) = [4, 1, 1, -3, -3], sum d^2 = 36,
        //   no ties: rho = 1 - 6*36/(5*24) = 1 - 1.8 = -0.8 -> -80.
        //   gold vs edit: edit ranks [1,2,3,4,5], d = [0, 1, -1, 1, -1],
        //   sum d^2 = 4, rho = 1 - 24/120 = 0.8 -> 80.
        // Small subset (edit <= 4): first three pairs, sims ranks [3,2,1],
        //   gold ranks [1,3,2]: d = [2,-1,-1], sum d^2 = 6,
        //   rho = 1 - 36/24 = -0.5 -> -50.
        let sims = [0.9, 0.8, 0.7, 0.6, 0.5];
        let gold = [1.0, 3.0, 2.0, 5.0, 4.0];
        let edit = [0, 1, 2, 5, 8];
        let lb = lexical_bias(&sims, &gold, &edit, 4).unwrap();
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
        assert_eq!(lb.n_pairs, 5);
        assert!(close(lb.spearman_sim_vs_edit, -100.0));
        assert!(close(lb.spearman_sim_vs_gold, -80.0));
        assert!(close(lb.spearman_gold_vs_edit, 80.0));
        assert_eq!(lb.n_small, 3);
        assert!(close(lb.spearman_sim_vs_gold_small, -50.0));
    }

    #[test]
    fn undefined_correlations_are_none() {
        // All edit distances equal -> correlations with edit distance undefined.
        let lb = lexical_bias(&[0.1, 0.5, 0.3], &[1.0, 2.0, 3.0], &[2, 2, 2], 1).unwrap();
        assert_eq!(lb.spearman_sim_vs_edit, None);
        assert_eq!(lb.spearman_gold_vs_edit, None);
        assert_eq!(lb.n_small, 0);
        assert_eq!(lb.spearman_sim_vs_gold_small, None);
        assert!(lb.spearman_sim_vs_gold.is_some());
        let empty = lexical_bias(&[], &[], &[], 4).unwrap();
        assert_eq!(empty.n_pairs, 0);
        assert_eq!(empty.spearman_sim_vs_gold, None);
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(matches!(
            lexical_bias(&[0.1], &[1.0, 2.0], &[1], 4),
            Err(AnalysisError::LengthMismatch { .. })
        ));
        assert!(matches!(
            lexical_bias(&[0.1, 0.2], &[1.0, 2.0], &[1], 4),
            Err(AnalysisError::LengthMismatch { .. })
        ));
        assert!(matches!(
            lexical_bias(&[f64::NAN, 0.2], &[1.0, 2.0], &[1, 2], 4),
            Err(AnalysisError::NonFinite(_))
        ));
    }
}
