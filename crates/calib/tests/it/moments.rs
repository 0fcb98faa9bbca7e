//! Streaming, mergeable moment statistics and the fits made from them.

use crate::common;

use bertflow_calib::{
    fit, fit_from_moments, CalibError, CalibSpec, Calibrator, FitOptions, Fitted, MomentStats,
    MOMENT_BLOCK,
};
use common::*;
use ndarray::{s, Array1, Array2, ArrayView2, Axis};

fn spec(s: &str) -> CalibSpec {
    s.parse().unwrap()
}

fn one_shot(s: &str, x: &Array2<f32>) -> Fitted {
    fit(&spec(s), x.view(), &mut FitOptions::new()).unwrap()
}

fn stats_of(x: ArrayView2<f32>) -> MomentStats {
    MomentStats::from_data(x).unwrap()
}

/// Statistics of consecutive row ranges of `x` with the given sizes.
fn partials(x: &Array2<f32>, sizes: &[usize]) -> Vec<MomentStats> {
    assert_eq!(sizes.iter().sum::<usize>(), x.nrows());
    let mut start = 0;
    sizes
        .iter()
        .map(|&len| {
            let part = stats_of(x.slice(s![start..start + len, ..]));
            start += len;
            part
        })
        .collect()
}

fn merged<'a>(parts: impl IntoIterator<Item = &'a MomentStats>, dim: usize) -> MomentStats {
    let mut all = MomentStats::new(dim);
    for p in parts {
        all.merge(p).unwrap();
    }
    all
}

/// max |a - b| / max(|b|max, tiny) over all entries.
fn rel_diff<'a>(
    a: impl IntoIterator<Item = &'a f64>,
    b: impl IntoIterator<Item = &'a f64> + Clone,
) -> f64 {
    let scale = b
        .clone()
        .into_iter()
        .fold(1e-300_f64, |m, v| m.max(v.abs()));
    a.into_iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / scale)
        .fold(0.0, f64::max)
}

fn max_abs_diff_f32(a: &Array2<f32>, b: &Array2<f32>) -> f32 {
    assert_eq!(a.dim(), b.dim());
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn same_bits(a: &MomentStats, b: &MomentStats) -> bool {
    a.dim() == b.dim()
        && a.count() == b.count()
        && a.mean()
            .iter()
            .zip(b.mean())
            .all(|(x, y)| x.to_bits() == y.to_bits())
        && a.comoment()
            .iter()
            .zip(b.comoment())
            .all(|(x, y)| x.to_bits() == y.to_bits())
}

const SIZES: [usize; 8] = [1, 700, 0, 13, 512, 300, 2, 472];

#[test]
fn merged_partials_equal_the_one_shot_statistics_and_fits() {
    let x = embeddings(2000, 24, &[5], 11);
    let parts = partials(&x, &SIZES);
    let all = merged(&parts, 24);
    let whole = stats_of(x.view());
    assert_eq!((all.count(), all.dim()), (2000, 24));

    // against an independent naive computation
    let (mean, cov) = moments(&x);
    assert!(rel_diff(all.mean(), &mean) < 1e-9);
    assert!(rel_diff(&all.covariance().unwrap(), &cov) < 1e-9);
    assert!(rel_diff(whole.mean(), &mean) < 1e-9);
    assert!(rel_diff(&whole.covariance().unwrap(), &cov) < 1e-9);
    let var: Array1<f64> = cov.diag().mapv(|v| v * 1999.0 / 2000.0);
    assert!(rel_diff(&all.variance().unwrap(), &var) < 1e-9);
    // the constant column stays exactly constant through the merges
    assert!(all.comoment().column(5).iter().all(|&v| v == 0.0));

    for s in [
        "whiten",
        "whiten:k=7",
        "sn",
        "natsv:k=5",
        "sn+natsv:k=5",
        "none",
    ] {
        let a = fit_from_moments(&spec(s), &all).unwrap();
        let b = one_shot(s, &x);
        assert_eq!(a.output_dim(), b.output_dim(), "{s}");
        let d = max_abs_diff_f32(
            &a.transform(x.view()).unwrap(),
            &b.transform(x.view()).unwrap(),
        );
        assert!(d < 1e-5, "{s}: transforms differ by {d}");
        assert_eq!(a.describe(), b.describe(), "{s}");
    }
    let (Fitted::Sn(a), Fitted::Sn(b)) = (all.fit(&spec("sn")).unwrap(), one_shot("sn", &x)) else {
        panic!()
    };
    assert_eq!(
        (a.zero_variance.clone(), b.zero_variance),
        (vec![5], vec![5])
    );
}

#[test]
fn merge_order_does_not_matter() {
    let x = embeddings(2000, 16, &[], 12);
    let parts = partials(&x, &SIZES);
    let forward = merged(&parts, 16);
    let backward = merged(parts.iter().rev(), 16);
    // a pairwise tree: ((0 1) (2 3)) ((4 5) (6 7))
    let mut level = parts.clone();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|pair| {
                let mut a = pair[0].clone();
                a.merge(&pair[1]).unwrap();
                a
            })
            .collect();
    }
    for other in [&backward, &level[0]] {
        assert_eq!(other.count(), forward.count());
        assert!(rel_diff(other.mean(), forward.mean()) < 1e-12);
        assert!(rel_diff(other.comoment(), forward.comoment()) < 1e-12);
    }
}

#[test]
fn merging_with_an_empty_side_is_exact() {
    let x = embeddings(300, 7, &[], 13);
    let a = stats_of(x.view());
    let mut left = MomentStats::new(7);
    left.merge(&a).unwrap();
    assert!(same_bits(&left, &a));
    let mut right = a.clone();
    right.merge(&MomentStats::new(7)).unwrap();
    assert!(same_bits(&right, &a));
    // an empty batch is a no-op
    right.update(Array2::<f32>::zeros((0, 7)).view()).unwrap();
    assert!(same_bits(&right, &a));
}

#[test]
fn chunked_updates_in_whole_blocks_equal_one_update_bit_for_bit() {
    let n = 3 * MOMENT_BLOCK + 123;
    let x = embeddings(n, 10, &[2], 14);
    let whole = stats_of(x.view());
    let mut chunked = MomentStats::new(10).with_threads(1);
    for (lo, hi) in [
        (0, MOMENT_BLOCK),
        (MOMENT_BLOCK, 3 * MOMENT_BLOCK),
        (3 * MOMENT_BLOCK, n),
    ] {
        chunked.update(x.slice(s![lo..hi, ..])).unwrap();
    }
    assert!(same_bits(&chunked, &whole));
    for threads in [1, 2, 3, 8] {
        let mut t = MomentStats::new(10).with_threads(threads);
        t.update(x.view()).unwrap();
        assert!(same_bits(&t, &whole), "{threads} threads");
    }
    // f64 input of the same values gives the same statistics
    let mut f = MomentStats::new(10);
    f.update_f64(x.mapv(f64::from).view()).unwrap();
    assert!(same_bits(&f, &whole));
}

#[test]
fn bytes_round_trip_exactly() {
    let x = embeddings(500, 9, &[4], 15);
    for s in [stats_of(x.view()), MomentStats::new(9), MomentStats::new(0)] {
        let bytes = s.to_bytes();
        let d = s.dim();
        assert_eq!(bytes.len(), 32 + 8 * d + 8 * d * (d + 1) / 2 + 4);
        let back = MomentStats::from_bytes(&bytes).unwrap();
        assert!(same_bits(&back, &s));
        assert_eq!(back.to_bytes(), bytes);
    }
    assert_eq!(&MomentStats::new(1).to_bytes()[..8], b"BFMOMENT");
}

fn moments_error(buf: &[u8]) -> String {
    match MomentStats::from_bytes(buf) {
        Err(e @ CalibError::Moments(_)) => e.to_string(),
        Err(e) => panic!("wrong error kind: {e}"),
        Ok(_) => panic!("accepted {} bad bytes", buf.len()),
    }
}

#[test]
fn corrupted_truncated_or_foreign_bytes_are_errors() {
    let x = embeddings(40, 3, &[], 16);
    let good = stats_of(x.view()).to_bytes();
    // every truncation, and one byte too many
    for len in 0..good.len() {
        moments_error(&good[..len]);
    }
    let mut long = good.clone();
    long.push(0);
    assert!(moments_error(&long).contains("needs"));
    // every single-bit flip
    for i in 0..good.len() {
        for bit in 0..8 {
            let mut bad = good.clone();
            bad[i] ^= 1 << bit;
            moments_error(&bad);
        }
    }
    assert!(moments_error(b"PK\x03\x04 not statistics at all, but long enough").contains("magic"));
    let mut v2 = good.clone();
    v2[8] = 2;
    assert!(moments_error(&v2).contains("version 2"));
    let mut flipped = good.clone();
    flipped[40] ^= 0x10;
    assert!(moments_error(&flipped).contains("checksum"));
    // a header claiming a huge dimension does not allocate or panic
    let mut huge = good[..32].to_vec();
    huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    huge.extend_from_slice(&[0; 4]);
    assert!(moments_error(&huge).contains("too large"));
}

#[test]
fn wrong_width_and_non_finite_rows_are_errors_that_change_nothing() {
    let x = embeddings(20, 4, &[], 17);
    let mut st = stats_of(x.view());
    let before = st.clone();
    assert!(matches!(
        st.update(Array2::<f32>::zeros((3, 5)).view()),
        Err(CalibError::DimMismatch {
            expected: 4,
            found: 5
        })
    ));
    let mut nan = x.clone();
    nan[[3, 1]] = f32::NAN;
    assert!(matches!(
        st.update(nan.view()),
        Err(CalibError::NonFiniteInput { row: 3, col: 1, .. })
    ));
    let mut inf = x.mapv(f64::from);
    inf[[7, 2]] = f64::NEG_INFINITY;
    assert!(matches!(
        st.update_f64(inf.view()),
        Err(CalibError::NonFiniteInput { row: 7, col: 2, .. })
    ));
    // finite f64 values whose squares overflow
    let mut big = x.mapv(f64::from);
    big[[0, 0]] = 1e300;
    assert!(matches!(
        st.update_f64(big.view()),
        Err(CalibError::Numerical(_))
    ));
    assert!(matches!(
        st.merge(&MomentStats::new(3)),
        Err(CalibError::DimMismatch {
            expected: 4,
            found: 3
        })
    ));
    assert!(same_bits(&st, &before));
}

#[test]
fn zero_variance_and_rank_deficiency_behave_as_the_one_shot_fits() {
    // a constant column, and fewer rows than dimensions (rank n - 1 = 7)
    let x = embeddings(8, 20, &[3], 18);
    let parts = partials(&x, &[3, 0, 5]);
    let all = merged(&parts, 20);
    for s in [
        "whiten",
        "whiten:k=3",
        "sn",
        "natsv:k=5",
        "natsv:k=12",
        "sn+natsv:k=5",
    ] {
        let a = all.fit(&spec(s)).unwrap();
        let b = one_shot(s, &x);
        assert_eq!(a.output_dim(), b.output_dim(), "{s}");
        assert_eq!(a.describe(), b.describe(), "{s}");
        let ya = a.transform(x.view()).unwrap();
        assert!(ya.iter().all(|v| v.is_finite()));
        let d = max_abs_diff_f32(&ya, &b.transform(x.view()).unwrap());
        assert!(d < 1e-5, "{s}: {d}");
    }
    let Fitted::Whiten(w) = all.fit(&spec("whiten")).unwrap() else {
        panic!()
    };
    assert_eq!((w.rank, w.out_dim), (7, 7));
    let Fitted::Natsv(n) = all.fit(&spec("natsv:k=12")).unwrap() else {
        panic!()
    };
    assert_eq!(n.removed, 7);
    let Fitted::SnNatsv(sn) = all.fit(&spec("sn+natsv:k=5")).unwrap() else {
        panic!()
    };
    assert_eq!(sn.sn.zero_variance, vec![3]);

    // nothing varies: the same error as the one-shot fit
    let c = Array2::<f32>::from_elem((10, 4), 2.0);
    let err = stats_of(c.view()).fit(&spec("whiten")).unwrap_err();
    let one = fit(&spec("whiten"), c.view(), &mut FitOptions::new()).unwrap_err();
    assert_eq!(err.to_string(), one.to_string());
}

#[test]
fn too_few_rows_and_flow_are_errors() {
    let x = embeddings(1, 4, &[], 19);
    let one = stats_of(x.view());
    for s in ["whiten", "sn", "natsv:k=1", "sn+natsv:k=1"] {
        let e = one.fit(&spec(s)).unwrap_err();
        assert!(
            e.to_string().contains("needs at least 2 rows, got 1"),
            "{s}: {e}"
        );
    }
    assert!(one.fit(&spec("none")).is_ok());
    assert!(matches!(
        MomentStats::new(4).fit(&spec("none")),
        Err(CalibError::BadData { .. })
    ));
    assert!(MomentStats::new(0)
        .fit(&spec("sn"))
        .unwrap_err()
        .to_string()
        .contains("no columns"));
    assert!(one.covariance().is_err() && MomentStats::new(4).variance().is_err());
    let e = stats_of(embeddings(50, 4, &[], 20).view())
        .fit(&spec("flow"))
        .unwrap_err();
    assert!(
        e.to_string().contains("flow needs the sample itself"),
        "{e}"
    );
}

#[test]
fn moment_stats_can_be_shared_between_threads() {
    fn check<T: Clone + Send + Sync + std::fmt::Debug>() {}
    check::<MomentStats>();
    // per-thread statistics merged afterwards equal the statistics of the union
    let x = embeddings(4000, 8, &[], 21);
    let halves: Vec<MomentStats> = std::thread::scope(|scope| {
        let hs: Vec<_> = [0, 2000]
            .map(|lo| {
                let x = &x;
                scope.spawn(move || stats_of(x.slice(s![lo..lo + 2000, ..])))
            })
            .into_iter()
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all = merged(&halves, 8);
    assert!(rel_diff(all.comoment(), stats_of(x.view()).comoment()) < 1e-12);
}

/// Goldens from NumPy (scripts/reference/moments_numpy.py).
#[test]
fn numpy_golden() {
    let doc: serde_json::Value =
        serde_json::from_str(include_str!("../fixtures/moments_numpy.json")).unwrap();
    let vec = |key: &str| -> Vec<f64> {
        doc[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let mat = |key: &str| -> Array2<f64> {
        let rows: Vec<Vec<f64>> = doc[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect()
            })
            .collect();
        Array2::from_shape_fn((rows.len(), rows[0].len()), |(i, j)| rows[i][j])
    };
    let x = mat("x").mapv(|v| v as f32);
    assert_eq!(x.dim(), (50, 6));
    let all = merged(&partials(&x, &[17, 0, 33]), 6);
    assert!(rel_diff(all.mean(), &vec("mean")) < 1e-12);
    assert!(rel_diff(&all.covariance().unwrap(), &mat("cov")) < 1e-12);
    assert!(rel_diff(&all.variance().unwrap(), &vec("var")) < 1e-12);

    let Fitted::Whiten(w) = all.fit(&spec("whiten")).unwrap() else {
        panic!()
    };
    assert!(rel_diff(w.eigenvalues(), &vec("eigenvalues")) < 1e-10);
    let y = w.transform_f64(x.slice(s![..8, ..])).unwrap();
    assert!(rel_diff(&y.dot(&y.t()), &mat("whiten_gram_first8")) < 1e-9);

    let k = doc["k"].as_u64().unwrap();
    for (s, key) in [
        ("sn".to_string(), "sn"),
        (format!("natsv:k={k}"), "natsv"),
        (format!("sn+natsv:k={k}"), "sn_natsv"),
    ] {
        let y = all.fit(&spec(&s)).unwrap().transform(x.view()).unwrap();
        let d = max_abs_diff_f32(&y, &mat(key).mapv(|v| v as f32));
        assert!(d < 1e-5, "{s}: {d}");
    }
    // the mean of the sn output is 0 per column
    let sn = all.fit(&spec("sn")).unwrap().transform(x.view()).unwrap();
    assert!(sn
        .mean_axis(Axis(0))
        .unwrap()
        .iter()
        .all(|m| m.abs() < 1e-5));
}
