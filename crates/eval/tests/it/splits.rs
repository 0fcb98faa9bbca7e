//! `load_split` on the real data (fails, does not skip, without it): pair counts of the
//! STS-B and SICK-R splits, first dev pair, agreement with `load_task` and `fit_sentences`.

use std::path::PathBuf;

use bertflow_eval::{fit_sentences, load_split, load_task, FitCorpus, Split, Task};

fn data_dir() -> PathBuf {
    match std::env::var_os("BERTFLOW_DATA") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/sts"
        )),
    }
}

#[test]
fn split_pair_counts() {
    let dir = data_dir();
    let expected = [
        (Task::StsB, Split::Train, 5749),
        (Task::StsB, Split::Dev, 1500),
        (Task::StsB, Split::Test, 1379),
        (Task::SickR, Split::Train, 4500),
        (Task::SickR, Split::Dev, 500),
        (Task::SickR, Split::Test, 4927),
    ];
    for (task, split, n) in expected {
        let set = load_split(&dir, task, split).unwrap_or_else(|e| panic!("{task} {split}: {e}"));
        assert_eq!(set.num_pairs(), n, "{task} {split}");
        assert_eq!(set.subsets.len(), 1);
        assert_eq!(set.subsets[0].name, split.name());
        assert_eq!(set.name, task.name());
    }
}

#[test]
fn stsb_dev_first_pair_and_score_range() {
    let set = load_split(&data_dir(), Task::StsB, Split::Dev).unwrap();
    let pairs = &set.subsets[0].pairs;
    assert_eq!(pairs[0].s1, "A man with a hard hat is dancing.");
    assert_eq!(pairs[0].s2, "A man wearing a hard hat is dancing.");
    assert_eq!(pairs[0].score, 5.0);
    assert!(pairs.iter().all(|p| (0.0..=5.0).contains(&p.score)));
}

#[test]
fn test_split_is_load_task_and_splits_make_the_target_corpus() {
    let dir = data_dir();
    for task in [Task::StsB, Task::SickR] {
        let test = load_split(&dir, task, Split::Test).unwrap();
        assert_eq!(
            test.subsets[0].pairs,
            load_task(&dir, task).unwrap().subsets[0].pairs
        );
        let mut all = Vec::new();
        for split in [Split::Train, Split::Dev, Split::Test] {
            for p in &load_split(&dir, task, split).unwrap().subsets[0].pairs {
                all.push(p.s1.clone());
                all.push(p.s2.clone());
            }
        }
        assert_eq!(all, fit_sentences(&dir, task, FitCorpus::Target).unwrap());
    }
}

#[test]
fn sts_years_have_only_a_test_split() {
    let dir = data_dir();
    let test = load_split(&dir, Task::Sts13, Split::Test).unwrap();
    assert_eq!(test, load_task(&dir, Task::Sts13).unwrap());
    for split in [Split::Train, Split::Dev] {
        let err = load_split(&dir, Task::Sts13, split).unwrap_err();
        assert!(err.to_string().contains("STS13"), "{err}");
    }
}

#[test]
fn missing_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let err = load_split(dir.path(), Task::StsB, Split::Dev).unwrap_err();
    assert!(err.to_string().contains("sts-dev.csv"), "{err}");
}
