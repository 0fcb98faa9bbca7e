//! Correlation metrics. Both return an error, never NaN, when the correlation is undefined.

use thiserror::Error;

/// Why a correlation could not be computed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum MetricError {
    #[error("length mismatch: {left} vs {right} values")]
    LengthMismatch { left: usize, right: usize },
    #[error("need at least 2 values, got {0}")]
    TooFew(usize),
    #[error("non-finite value at index {index} of the {side} input")]
    NonFinite { side: &'static str, index: usize },
    #[error("zero variance in the {side} input (all values equal)")]
    ZeroVariance { side: &'static str },
}

/// Pearson correlation coefficient of `a` and `b`, in [-1, 1].
///
/// Errors when the lengths differ, there are fewer than 2 values, any value is not
/// finite, or either input is constant.
pub fn pearson(a: &[f64], b: &[f64]) -> Result<f64, MetricError> {
    check(a, b)?;
    pearson_unchecked(a, b)
}

/// Spearman rank correlation of `a` and `b`: the Pearson correlation of their
/// [`rank_average`] ranks (so ties get their average rank).
///
/// Errors as [`pearson`] does.
pub fn spearman(a: &[f64], b: &[f64]) -> Result<f64, MetricError> {
    check(a, b)?;
    pearson_unchecked(&rank_average(a), &rank_average(b))
}

/// 1-based ranks with ties given the average of the ranks they span; e.g.
/// `[10, 20, 20, 5]` gives `[2, 3.5, 3.5, 1]`.
///
/// Values are ordered by [`f64::total_cmp`] and grouped as ties by `==`, so `-0.0` and
/// `0.0` tie; a NaN (which the correlations reject) never ties, and is ranked after every
/// number (before them if its sign bit is set).
pub fn rank_average(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
    let mut ranks = vec![0.0; v.len()];
    let mut start = 0;
    while start < idx.len() {
        let mut end = start + 1;
        while end < idx.len() && v[idx[end]] == v[idx[start]] {
            end += 1;
        }
        // Positions start..end hold ranks start+1 ..= end; their mean:
        let rank = (start + 1 + end) as f64 / 2.0;
        for &i in &idx[start..end] {
            ranks[i] = rank;
        }
        start = end;
    }
    ranks
}

fn check(a: &[f64], b: &[f64]) -> Result<(), MetricError> {
    if a.len() != b.len() {
        return Err(MetricError::LengthMismatch {
            left: a.len(),
            right: b.len(),
        });
    }
    if a.len() < 2 {
        return Err(MetricError::TooFew(a.len()));
    }
    for (side, v) in [("first", a), ("second", b)] {
        if let Some(index) = v.iter().position(|x| !x.is_finite()) {
            return Err(MetricError::NonFinite { side, index });
        }
    }
    for (side, v) in [("first", a), ("second", b)] {
        if v.iter().all(|&x| x == v[0]) {
            return Err(MetricError::ZeroVariance { side });
        }
    }
    Ok(())
}

/// Pearson for inputs that passed [`check`] (finite, equal length >= 2, non-constant).
fn pearson_unchecked(a: &[f64], b: &[f64]) -> Result<f64, MetricError> {
    let a = scaled(a);
    let b = scaled(b);
    let n = a.len() as f64;
    let ma = a.iter().sum::<f64>() / n;
    let mb = b.iter().sum::<f64>() / n;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b.iter()) {
        let (dx, dy) = (x - ma, y - mb);
        sab += dx * dy;
        saa += dx * dx;
        sbb += dy * dy;
    }
    // Defensive: a non-constant input whose spread is far below its magnitude could
    // still give a sum of squares that underflows to zero; report that, not NaN.
    if saa <= 0.0 || !saa.is_finite() {
        return Err(MetricError::ZeroVariance { side: "first" });
    }
    if sbb <= 0.0 || !sbb.is_finite() {
        return Err(MetricError::ZeroVariance { side: "second" });
    }
    // One square root of the product is exact for perfect correlations of small
    // integers (ranks); fall back to two roots should the product leave f64's range.
    let mut denom = (saa * sbb).sqrt();
    if !(denom.is_finite() && denom > 0.0) {
        denom = saa.sqrt() * sbb.sqrt();
    }
    Ok((sab / denom).clamp(-1.0, 1.0))
}

/// Scales `v` by a power of two (exact) when its magnitude is so large or small that
/// squares could overflow or underflow; ordinary values are returned unchanged.
fn scaled(v: &[f64]) -> Vec<f64> {
    let max = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    if max == 0.0 || (1e-100..=1e100).contains(&max) {
        return v.to_vec();
    }
    let exp = max.log2().round() as i32;
    // Two steps so that neither factor over/underflows for any finite `max`.
    let f1 = 2f64.powi(-exp / 2);
    let f2 = 2f64.powi(-(exp - exp / 2));
    v.iter().map(|x| x * f1 * f2).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn ranks_with_ties() {
        assert_eq!(rank_average(&[10.0, 20.0, 20.0, 5.0]), [2.0, 3.5, 3.5, 1.0]);
        assert_eq!(rank_average(&[1.0, 1.0, 1.0]), [2.0, 2.0, 2.0]);
        assert_eq!(rank_average(&[0.0, -0.0, 1.0]), [1.5, 1.5, 3.0]);
        assert_eq!(rank_average(&[]), Vec::<f64>::new());
    }

    #[test]
    fn spearman_with_ties_by_hand() {
        // a = [1, 2, 2, 3] -> ranks [1, 2.5, 2.5, 4]; b = [1, 3, 2, 4] -> ranks [1, 3, 2, 4].
        // Both rank means are 2.5; deviations da = [-1.5, 0, 0, 1.5],
        // db = [-1.5, 0.5, -0.5, 1.5]. sum da*db = 2.25 + 0 + 0 + 2.25 = 4.5,
        // sum da^2 = 4.5, sum db^2 = 2.25 + 0.25 + 0.25 + 2.25 = 5.
        // rho = 4.5 / sqrt(4.5 * 5) = sqrt(0.9) = 0.9486832980505138.
        let r = spearman(&[1.0, 2.0, 2.0, 3.0], &[1.0, 3.0, 2.0, 4.0]).unwrap();
        assert!(close(r, 0.9_f64.sqrt()), "{r}");
        // Spearman ignores monotone transforms; Pearson does not.
        let r = spearman(&[1.0, 2.0, 3.0, 4.0], &[1.0, 10.0, 100.0, 1000.0]).unwrap();
        assert!(close(r, 1.0), "{r}");
    }

    #[test]
    fn pearson_by_hand() {
        // x = [1, 2, 3], y = [2, 4, 5]: means 2 and 11/3; dx = [-1, 0, 1],
        // dy = [-5/3, 1/3, 4/3]; sum dx*dy = 3, sum dx^2 = 2, sum dy^2 = 42/9 = 14/3.
        // r = 3 / sqrt(2 * 14/3) = 3 * sqrt(3/28) = 0.9819805060619657.
        let r = pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 5.0]).unwrap();
        assert!(close(r, 3.0 * (3.0f64 / 28.0).sqrt()), "{r}");
        let r = pearson(&[1.0, 2.0, 3.0, 4.0], &[1.0, 10.0, 100.0, 1000.0]).unwrap();
        assert!(r < 0.9, "{r}");
    }

    #[test]
    fn matches_independent_python_computation() {
        // Reference values from Python 3.11 `statistics.correlation` (on the values, and
        // on average ranks computed as (2 * first_index_in_sorted + 1 + count) / 2).
        let a = [3.2, 1.0, 4.5, 1.0, 2.2, 4.5, 0.0, 3.2, 5.0, 2.2];
        let b = [0.31, 0.12, 0.77, 0.12, 0.5, 0.6, 0.05, 0.4, 0.9, 0.45];
        assert_eq!(
            rank_average(&a),
            [6.5, 2.5, 8.5, 2.5, 4.5, 8.5, 1.0, 6.5, 10.0, 4.5]
        );
        assert!(close(pearson(&a, &b).unwrap(), 0.9163064494415758));
        assert!(close(spearman(&a, &b).unwrap(), 0.8923457102129048));
    }

    #[test]
    fn perfect_correlations() {
        let a = [0.5, 1.5, 2.0, 7.0];
        let up: Vec<f64> = a.iter().map(|x| 3.0 * x + 1.0).collect();
        let down: Vec<f64> = a.iter().map(|x| -2.0 * x).collect();
        assert!(close(pearson(&a, &up).unwrap(), 1.0));
        assert!(close(pearson(&a, &down).unwrap(), -1.0));
        assert!(close(spearman(&a, &up).unwrap(), 1.0));
        assert!(close(spearman(&a, &down).unwrap(), -1.0));
    }

    #[test]
    fn extreme_magnitudes_do_not_overflow() {
        let a = [1e300, -1e300, 5e299];
        let b = [1.0, -1.0, 0.5];
        assert!(close(pearson(&a, &b).unwrap(), 1.0));
        let tiny = [1e-310, -1e-310, 5e-311];
        assert!(close(pearson(&tiny, &b).unwrap(), 1.0));
    }

    #[test]
    fn error_cases() {
        for f in [pearson, spearman] {
            assert_eq!(
                f(&[1.0, 2.0], &[1.0, 2.0, 3.0]),
                Err(MetricError::LengthMismatch { left: 2, right: 3 })
            );
            assert_eq!(f(&[1.0], &[2.0]), Err(MetricError::TooFew(1)));
            assert_eq!(f(&[], &[]), Err(MetricError::TooFew(0)));
            assert_eq!(
                f(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]),
                Err(MetricError::ZeroVariance { side: "first" })
            );
            assert_eq!(
                f(&[1.0, 2.0, 3.0], &[4.0, 4.0, 4.0]),
                Err(MetricError::ZeroVariance { side: "second" })
            );
            assert_eq!(
                f(&[1.0, f64::NAN, 3.0], &[1.0, 2.0, 3.0]),
                Err(MetricError::NonFinite {
                    side: "first",
                    index: 1
                })
            );
            assert_eq!(
                f(&[1.0, 2.0, 3.0], &[1.0, 2.0, f64::INFINITY]),
                Err(MetricError::NonFinite {
                    side: "second",
                    index: 2
                })
            );
        }
    }
}
