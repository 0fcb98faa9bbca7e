//! `evaluate` on hand-made sets whose answers are worked out by hand.

use bertflow_eval::{
    average, evaluate, unique_sentences, Aggregate, EvalError, EvalSet, Pair, Subset, TaskResult,
};
use ndarray::{array, Array2};

fn pair(s1: &str, s2: &str, score: f64) -> Pair {
    Pair {
        s1: s1.to_string(),
        s2: s2.to_string(),
        score,
    }
}

/// Two subsets. Every pair is ("x", v) with x = (1, 0), so the cosine is the first
/// coordinate of v over its norm: "zero" (0, 1) -> 0, "six" (3, 4) -> 0.6,
/// "eight" (4, 3) -> 0.8 (norms are exactly 5).
///
/// A: gold [1, 2, 3], cos [0, 0.6, 0.8]  -> Spearman +1
/// B: gold [4, 5],    cos [0.8, 0.6]     -> Spearman -1
fn two_subsets() -> (EvalSet, Vec<String>, Array2<f32>) {
    let set = EvalSet {
        name: "toy".into(),
        subsets: vec![
            Subset {
                name: "A".into(),
                pairs: vec![
                    pair("x", "zero", 1.0),
                    pair("x", "six", 2.0),
                    pair("x", "eight", 3.0),
                ],
            },
            Subset {
                name: "B".into(),
                pairs: vec![pair("x", "eight", 4.0), pair("x", "six", 5.0)],
            },
        ],
    };
    let sentences = unique_sentences(&set);
    assert_eq!(sentences, ["x", "zero", "six", "eight"]);
    let emb = array![[1.0f32, 0.0], [0.0, 1.0], [3.0, 4.0], [4.0, 3.0]];
    (set, sentences, emb)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn run(agg: Aggregate) -> TaskResult {
    let (set, sentences, emb) = two_subsets();
    evaluate(&set, &sentences, emb.view(), agg).unwrap()
}

#[test]
fn per_subset_results() {
    let r = run(Aggregate::All);
    assert_eq!(r.pairs, 5);
    assert_eq!(r.subsets.len(), 2);
    assert_eq!((r.subsets[0].name.as_str(), r.subsets[0].pairs), ("A", 3));
    assert_eq!((r.subsets[1].name.as_str(), r.subsets[1].pairs), ("B", 2));
    assert!(close(r.subsets[0].spearman, 100.0));
    assert!(close(r.subsets[1].spearman, -100.0));
    // Pearson of A: cos mean 1.4/3; deviations [-1.4, 0.4, 1.0]/3 against gold
    // deviations [-1, 0, 1]: sum of products 2.4/3 = 0.8, sum of squares 3.12/9 and 2,
    // r = 0.8 / sqrt(2 * 3.12 / 9) = 0.960768922830...
    let pa = 0.8 / (2.0 * 3.12f64 / 9.0).sqrt();
    assert!(
        close(r.subsets[0].pearson, 100.0 * pa),
        "{}",
        r.subsets[0].pearson
    );
    // Two points always correlate perfectly; here the cosine falls as gold rises.
    assert!(close(r.subsets[1].pearson, -100.0));
}

#[test]
fn aggregations_differ_as_computed_by_hand() {
    // Mean: (1 + (-1)) / 2 = 0.
    let mean = run(Aggregate::Mean);
    assert!(close(mean.spearman, 0.0), "{}", mean.spearman);
    // WMean: (3 * 1 + 2 * (-1)) / 5 = 0.2.
    let wmean = run(Aggregate::WMean);
    assert!(close(wmean.spearman, 20.0), "{}", wmean.spearman);
    // All: gold [1, 2, 3, 4, 5] -> ranks [1, 2, 3, 4, 5], cos [0, .6, .8, .8, .6] ->
    // ranks [1, 2.5, 4.5, 4.5, 2.5]. Deviations from 3: [-2, -1, 0, 1, 2] and
    // [-2, -.5, 1.5, 1.5, -.5]; sum of products 4 + .5 + 0 + 1.5 - 1 = 5; sums of
    // squares 10 and 4 + .25 + 2.25 + 2.25 + .25 = 9. rho = 5 / sqrt(90) = sqrt(10) / 6.
    let all = run(Aggregate::All);
    assert!(
        close(all.spearman, 100.0 * 10f64.sqrt() / 6.0),
        "{}",
        all.spearman
    );

    // Pearson: A = pa, B = -1.
    let pa = 0.8 / (2.0 * 3.12f64 / 9.0).sqrt();
    assert!(close(mean.pearson, 100.0 * (pa - 1.0) / 2.0));
    assert!(close(wmean.pearson, 100.0 * (3.0 * pa - 2.0) / 5.0));
    // All: cos mean 2.8 / 5 = 0.56, deviations [-.56, .04, .24, .24, .04]; against gold
    // deviations [-2, -1, 0, 1, 2]: products sum 1.12 - .04 + 0 + .24 + .08 = 1.4,
    // squares .3136 + .0016 + .0576 + .0576 + .0016 = .432. r = 1.4 / sqrt(10 * .432).
    assert!(
        close(all.pearson, 100.0 * 1.4 / 4.32f64.sqrt()),
        "{}",
        all.pearson
    );
}

#[test]
fn one_subset_aggregations_agree() {
    let (mut set, _, emb) = two_subsets();
    set.subsets.truncate(1);
    let sentences = unique_sentences(&set);
    assert_eq!(sentences, ["x", "zero", "six", "eight"]);
    let rs: Vec<TaskResult> = [Aggregate::All, Aggregate::WMean, Aggregate::Mean]
        .into_iter()
        .map(|a| evaluate(&set, &sentences, emb.view(), a).unwrap())
        .collect();
    for r in &rs[1..] {
        assert!(close(r.spearman, rs[0].spearman) && close(r.pearson, rs[0].pearson));
    }
}

#[test]
fn zero_vector_gives_cosine_zero_and_rows_can_be_in_any_order() {
    // "zero" gets the zero vector: its pair has cosine 0, same as (0, 1) above, so the
    // results are unchanged. Sentences listed in another order with an extra sentence.
    let (set, _, _) = two_subsets();
    let sentences: Vec<String> = ["eight", "unused", "x", "six", "zero"]
        .map(String::from)
        .to_vec();
    let emb = array![
        [4.0f32, 3.0],
        [9.0, 9.0],
        [1.0, 0.0],
        [3.0, 4.0],
        [0.0, 0.0]
    ];
    let r = evaluate(&set, &sentences, emb.view(), Aggregate::All).unwrap();
    let expected = run(Aggregate::All);
    assert!(close(r.spearman, expected.spearman) && close(r.pearson, expected.pearson));
}

#[test]
fn errors_instead_of_panics() {
    let (set, sentences, emb) = two_subsets();
    // A sentence of the set missing from the list.
    let err = evaluate(
        &set,
        &sentences[..3],
        emb.slice(ndarray::s![..3, ..]),
        Aggregate::All,
    )
    .unwrap_err();
    assert!(
        matches!(&err, EvalError::MissingSentence(s) if s == "eight"),
        "{err}"
    );
    // Row count differs from the sentence count.
    let err = evaluate(&set, &sentences[..3], emb.view(), Aggregate::All).unwrap_err();
    assert!(
        matches!(
            err,
            EvalError::RowCountMismatch {
                sentences: 3,
                rows: 4
            }
        ),
        "{err}"
    );
    // NaN in an embedding.
    let mut bad = emb.clone();
    bad[[2, 1]] = f32::NAN;
    let err = evaluate(&set, &sentences, bad.view(), Aggregate::All).unwrap_err();
    assert!(
        matches!(&err, EvalError::NonFiniteEmbedding(s) if s == "six"),
        "{err}"
    );
    // Constant cosines in a subset: the correlation is undefined, reported with its name.
    let same = array![[1.0f32, 0.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]];
    let err = evaluate(&set, &sentences, same.view(), Aggregate::Mean).unwrap_err();
    assert!(err.to_string().starts_with("toy/A: zero variance"), "{err}");
    // No pairs at all.
    let empty = EvalSet {
        name: "none".into(),
        subsets: vec![],
    };
    let err = evaluate(
        &empty,
        &[],
        Array2::<f32>::zeros((0, 2)).view(),
        Aggregate::All,
    );
    assert!(matches!(err, Err(EvalError::Empty(_))));
}

#[test]
fn average_row_and_serde() {
    let a = run(Aggregate::All);
    let m = run(Aggregate::Mean);
    let avg = average(&[a.clone(), m.clone()]).unwrap();
    assert_eq!(avg.tasks, 2);
    assert!(close(avg.spearman, (a.spearman + m.spearman) / 2.0));
    assert!(close(avg.pearson, (a.pearson + m.pearson) / 2.0));
    assert!(average(&[]).is_none());

    let json = serde_json::to_string(&a).unwrap();
    assert!(json.contains("\"subsets\":[{\"name\":\"A\""), "{json}");
    let back: TaskResult = serde_json::from_str(&json).unwrap();
    assert_eq!((back.pairs, back.subsets.len()), (5, 2));
    assert!(close(back.spearman, a.spearman) && close(back.pearson, a.pearson));
    assert_eq!(back.subsets[1].name, "B");
    assert!(close(back.subsets[1].spearman, -100.0));
}
