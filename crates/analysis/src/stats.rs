//! Small statistics helpers: tie-aware ranks, Pearson and Spearman correlation.
//! One implementation serves the whole workspace: these wrap
//! [`bertflow_eval::metrics`] and turn its errors (lengths differ, fewer than two
//! values, a constant or non-finite input) into `None`.

/// 1-based ranks of `values`; tied values all get the average of the ranks
/// they span (the "fractional" ranking used by Spearman's rho).
pub fn average_ranks(values: &[f64]) -> Vec<f64> {
    bertflow_eval::metrics::rank_average(values)
}

/// Pearson correlation of two equally long slices; `None` when undefined.
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    bertflow_eval::metrics::pearson(x, y).ok()
}

/// Spearman's rank correlation with tie-aware average ranks; `None` when undefined.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    bertflow_eval::metrics::spearman(x, y).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn ranks_average_ties() {
        assert_eq!(
            average_ranks(&[10.0, 20.0, 20.0, 5.0]),
            vec![2.0, 3.5, 3.5, 1.0]
        );
        assert_eq!(average_ranks(&[1.0, 1.0, 1.0]), vec![2.0, 2.0, 2.0]);
        assert!(average_ranks(&[]).is_empty());
    }

    #[test]
    fn spearman_with_ties_hand_worked() {
        // x = [1, 2, 2, 3] -> ranks [1, 2.5, 2.5, 4]; y = [1, 3, 2, 4] -> ranks [1, 3, 2, 4].
        // Both rank vectors have mean 2.5.
        // deviations: dx = [-1.5, 0, 0, 1.5], dy = [-1.5, 0.5, -0.5, 1.5]
        // sum dx*dy = 2.25 + 0 + 0 + 2.25 = 4.5
        // sum dx^2 = 4.5, sum dy^2 = 2.25 + 0.25 + 0.25 + 2.25 = 5
        // rho = 4.5 / sqrt(4.5 * 5) = sqrt(0.9) = 0.9486832980505138
        let rho = spearman(&[1.0, 2.0, 2.0, 3.0], &[1.0, 3.0, 2.0, 4.0]).unwrap();
        assert!(close(rho, 0.9_f64.sqrt()), "{rho}");
        // Note: the untied formula 1 - 6 sum d^2 / (n(n^2-1)) would give
        // 1 - 6 * 0.5 / 60 = 0.95 here, so this checks the tie handling.
        assert!((rho - 0.95).abs() > 1e-3);
    }

    #[test]
    fn spearman_monotone_and_reversed() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let y = [1.0, 4.0, 9.0, 16.0, 25.0];
        assert!(close(spearman(&x, &y).unwrap(), 1.0));
        let r: Vec<f64> = y.iter().map(|v| -v).collect();
        assert!(close(spearman(&x, &r).unwrap(), -1.0));
    }

    #[test]
    fn undefined_cases_are_none() {
        assert_eq!(spearman(&[1.0], &[2.0]), None);
        assert_eq!(spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
        assert_eq!(spearman(&[1.0, 2.0], &[1.0, 2.0, 3.0]), None);
        assert_eq!(pearson(&[], &[]), None);
    }

    #[test]
    fn pearson_hand_computed() {
        // x = [1,2,3], y = [2,4,5]: mx = 2, my = 11/3
        // dx = [-1,0,1], dy = [-5/3, 1/3, 4/3]; sxy = 5/3 + 4/3 = 3
        // sxx = 2, syy = (25 + 1 + 16)/9 = 42/9 -> r = 3 / sqrt(2 * 42/9) = 3 / sqrt(84/9)
        let r = pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 5.0]).unwrap();
        assert!(close(r, 3.0 / (84.0_f64 / 9.0).sqrt()));
    }
}
