//! Counts and spot checks on the real STS data. The data folder is `BERTFLOW_DATA` if set,
//! else `<repo>/../shared/data/sts`. These tests fail (they do not skip) without the data.

use std::path::PathBuf;

use bertflow_eval::{
    check_data_dir, dedup_preserving_order, fit_sentences, load_task, unique_sentences, EvalSet,
    FitCorpus, Pair, Task,
};

fn data_dir() -> PathBuf {
    match std::env::var_os("BERTFLOW_DATA") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/sts"
        )),
    }
}

fn load(task: Task) -> EvalSet {
    match load_task(&data_dir(), task) {
        Ok(set) => set,
        Err(e) => panic!("loading {task}: {e}"),
    }
}

fn subset_counts(set: &EvalSet) -> Vec<(&str, usize)> {
    set.subsets
        .iter()
        .map(|s| (s.name.as_str(), s.pairs.len()))
        .collect()
}

fn pair(s1: &str, s2: &str, score: f64) -> Pair {
    Pair {
        s1: s1.to_string(),
        s2: s2.to_string(),
        score,
    }
}

#[test]
fn data_dir_is_complete() {
    check_data_dir(&data_dir(), &Task::ALL).unwrap();
}

#[test]
fn test_pair_counts() {
    let expected = [
        (Task::Sts12, 3108),
        (Task::Sts13, 1500),
        (Task::Sts14, 3750),
        (Task::Sts15, 3000),
        (Task::Sts16, 1186),
        (Task::StsB, 1379),
        (Task::SickR, 4927),
    ];
    for (task, n) in expected {
        let set = load(task);
        assert_eq!(set.name, task.name());
        assert_eq!(set.num_pairs(), n, "{task}");
    }
}

#[test]
fn subset_counts_per_year() {
    // Scored lines per gold file, counted independently with
    // `grep -c . STS*/STS.gs.*.txt` / awk.
    assert_eq!(
        subset_counts(&load(Task::Sts12)),
        [
            ("MSRpar", 750),
            ("MSRvid", 750),
            ("SMTeuroparl", 459),
            ("surprise.OnWN", 750),
            ("surprise.SMTnews", 399)
        ]
    );
    assert_eq!(
        subset_counts(&load(Task::Sts13)),
        [("FNWN", 189), ("OnWN", 561), ("headlines", 750)]
    );
    assert_eq!(
        subset_counts(&load(Task::Sts14)),
        [
            ("OnWN", 750),
            ("deft-forum", 450),
            ("deft-news", 300),
            ("headlines", 750),
            ("images", 750),
            ("tweet-news", 750)
        ]
    );
    assert_eq!(
        subset_counts(&load(Task::Sts15)),
        [
            ("answers-forums", 375),
            ("answers-students", 750),
            ("belief", 375),
            ("headlines", 750),
            ("images", 750)
        ]
    );
    assert_eq!(
        subset_counts(&load(Task::Sts16)),
        [
            ("answer-answer", 254),
            ("headlines", 249),
            ("plagiarism", 230),
            ("postediting", 244),
            ("question-question", 209)
        ]
    );
    assert_eq!(subset_counts(&load(Task::StsB)), [("test", 1379)]);
    assert_eq!(subset_counts(&load(Task::SickR)), [("test", 4927)]);
}

#[test]
fn first_pair_of_each_task() {
    let first = |t| load(t).subsets[0].pairs[0].clone();
    assert_eq!(
        first(Task::Sts12),
        pair(
            "The problem likely will mean corrective changes before the shuttle fleet starts flying again.",
            "He said the problem needs to be corrected before the space shuttle fleet is cleared to fly again.",
            4.4
        )
    );
    let p = first(Task::Sts13);
    assert!(
        p.s1.starts_with("there exist a number of different possible events"),
        "{p:?}"
    );
    assert_eq!(
        (p.s2.as_str(), p.score),
        ("doing as one pleases or chooses;", 0.6)
    );
    assert_eq!(
        first(Task::Sts14),
        pair(
            "the activity of learning or being trained",
            "the gradual process of acquiring knowledge.",
            4.0
        )
    );
    // The first scored pair of STS15 answers-forums is on line 1 of the file.
    assert_eq!(
        first(Task::Sts15),
        pair(
            "You'll need to check the particular policies of each publisher to see what is allowed and what is not allowed.",
            "If you need to publish the book and you have found one publisher that allows it.",
            3.0
        )
    );
    // STS16 answer-answer: the 8 unscored lines before this one (line 9) are skipped.
    assert_eq!(
        first(Task::Sts16),
        pair(
            "I remained under the banyan tree, exhausted by my daily ritual of dragooning the men every two hours.",
            "I remained under the banyan tree, exhausted by my daily ritual of herding the cats every two hours.",
            3.0
        )
    );
    assert_eq!(
        first(Task::StsB),
        pair(
            "A girl is styling her hair.",
            "A girl is brushing her hair.",
            2.5
        )
    );
    // SICK_test_annotated.txt has CRLF line ends: nothing of the \r may leak.
    assert_eq!(
        first(Task::SickR),
        pair(
            "There is no boy playing outdoors and there is no man smiling",
            "A group of kids is playing in a yard and an old man is standing in the background",
            3.3
        )
    );
    let sick = load(Task::SickR);
    let last = sick.subsets[0].pairs.last().unwrap();
    assert!(!last.s2.contains('\r') && !last.s1.contains('\r'));
}

#[test]
fn sentences_are_whitespace_normalised() {
    // STS14 deft-news has a trailing space on every sentence 2 in the file.
    for task in Task::ALL {
        for s in unique_sentences(&load(task)) {
            assert!(!s.is_empty(), "{task}");
            assert_eq!(s.trim(), s, "{task}: {s:?}");
            assert!(!s.contains("  ") && !s.contains('\t'), "{task}: {s:?}");
        }
    }
}

#[test]
fn train_and_dev_split_sizes() {
    let dir = data_dir();
    // Train corpora hold s1 and s2 of every pair: 2 x 5749 (STS-B) and 2 x 4500 (SICK).
    let stsb = fit_sentences(&dir, Task::StsB, FitCorpus::Train).unwrap();
    assert_eq!(stsb.len(), 2 * 5749);
    let sick = fit_sentences(&dir, Task::SickR, FitCorpus::Train).unwrap();
    assert_eq!(sick.len(), 2 * 4500);
    // Target = train + dev + test (STS-B) / train + trial + test (SICK), so the dev and
    // trial sizes follow: STS-B dev 1500, SICK trial 500.
    let stsb_all = fit_sentences(&dir, Task::StsB, FitCorpus::Target).unwrap();
    assert_eq!(stsb_all.len(), 2 * (5749 + 1500 + 1379));
    let sick_all = fit_sentences(&dir, Task::SickR, FitCorpus::Target).unwrap();
    assert_eq!(sick_all.len(), 2 * (4500 + 500 + 4927));
    // Train comes first, in file order.
    assert_eq!(stsb[0], "A plane is taking off.");
    assert_eq!(stsb_all[..stsb.len()], stsb[..]);
    for t in [
        Task::Sts12,
        Task::Sts13,
        Task::Sts14,
        Task::Sts15,
        Task::Sts16,
    ] {
        let err = fit_sentences(&dir, t, FitCorpus::Train).unwrap_err();
        assert!(err.to_string().contains("has no train split"), "{err}");
    }
}

/// (task, Target sentences, Target unique, TargetScored sentences, TargetScored unique),
/// counted independently with a Python script over the raw files (after the same
/// whitespace normalisation, `' '.join(s.split())`).
const CORPUS_SIZES: [(Task, usize, usize, usize, usize); 7] = [
    (Task::Sts12, 6216, 4959, 6216, 4959),
    (Task::Sts13, 3000, 2644, 3000, 2644),
    (Task::Sts14, 7500, 6354, 7500, 6354),
    (Task::Sts15, 17000, 14023, 6000, 5183),
    (Task::Sts16, 18366, 11241, 2372, 1870),
    (Task::StsB, 17256, 15455, 17256, 15455),
    (Task::SickR, 19854, 6077, 19854, 6077),
];

#[test]
fn target_corpus_sizes() {
    let dir = data_dir();
    let mut all_target = Vec::new();
    let mut all_scored = Vec::new();
    for (task, n, u, ns, us) in CORPUS_SIZES {
        let target = fit_sentences(&dir, task, FitCorpus::Target).unwrap();
        let scored = fit_sentences(&dir, task, FitCorpus::TargetScored).unwrap();
        assert_eq!(target.len(), n, "{task} target");
        assert_eq!(scored.len(), ns, "{task} target-scored");
        all_target.extend(target.iter().cloned());
        all_scored.extend(scored.iter().cloned());
        assert_eq!(
            dedup_preserving_order(target).len(),
            u,
            "{task} target unique"
        );
        assert_eq!(
            dedup_preserving_order(scored).len(),
            us,
            "{task} scored unique"
        );
    }
    assert_eq!(all_target.len(), 89192);
    assert_eq!(dedup_preserving_order(all_target).len(), 47408);
    assert_eq!(all_scored.len(), 62198);
    assert_eq!(dedup_preserving_order(all_scored).len(), 29511);
}

#[test]
fn test_sets_are_inside_target_corpora() {
    let dir = data_dir();
    for task in Task::ALL {
        let target: std::collections::HashSet<String> =
            fit_sentences(&dir, task, FitCorpus::TargetScored)
                .unwrap()
                .into_iter()
                .collect();
        for s in unique_sentences(&load(task)) {
            assert!(target.contains(&s), "{task}: {s}");
        }
    }
}
