//! Loading the STS benchmark data and user pair files.
//!
//! This module owns the public face of the loader: the data folder (`--data`,
//! `BERTFLOW_DATA`), the error type, the loaded types ([`Pair`], [`Subset`],
//! [`EvalSet`]), where each [`Task`]'s files live and what is loaded for it
//! ([`load_task`], [`load_split`], [`fit_sentences`]). Reading and parsing the
//! files themselves (text decoding, the STS year, STS-B, SICK and user pair-file
//! formats) is in `formats`, whose public items are re-exported here.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::task::{FitCorpus, Task};

mod formats;

pub use formats::{load_pairs_file, normalize_sentence};
use formats::{read_split, read_sts_year, sts_subset_files};

/// Environment variable naming the data folder (see [`resolve_data_dir`]).
pub const DATA_ENV: &str = "BERTFLOW_DATA";
/// Default data folder, relative to the working directory (the repository root).
pub const DEFAULT_DATA_DIR: &str = "../shared/data/sts";

const HINT: &str =
    "give the data folder (the CLI's --data DIR, Python's data=DIR) or set BERTFLOW_DATA";

/// Errors of loading data.
#[derive(Debug, Error)]
pub enum DataError {
    /// The data folder, or a task's folder inside it, does not exist.
    #[error("STS data folder {} not found ({HINT})", path.display())]
    MissingDir { path: PathBuf },
    /// A file the task needs does not exist.
    #[error("STS data file {} not found ({HINT})", path.display())]
    MissingFile { path: PathBuf },
    /// An STS year folder holds no `STS.input.*.txt` file.
    #[error("no STS.input.*.txt files in {} ({HINT})", path.display())]
    NoSubsets { path: PathBuf },
    /// Reading a file or folder failed.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A line is not valid UTF-8.
    #[error("{}:{line}: invalid UTF-8", path.display())]
    InvalidUtf8 { path: PathBuf, line: usize },
    /// A line does not have the expected form.
    #[error("{}:{line}: {reason}", path.display())]
    Malformed {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// An STS input file and its gold file differ in their number of lines.
    #[error(
        "{} has {input_lines} lines but its gold file {} has {gold_lines}",
        input.display(),
        gold.display()
    )]
    LineCountMismatch {
        input: PathBuf,
        gold: PathBuf,
        input_lines: usize,
        gold_lines: usize,
    },
    /// A file (or an STS subset) yields no scored pairs.
    #[error("{}: no scored pairs", path.display())]
    Empty { path: PathBuf },
    /// [`FitCorpus::Train`] was asked for a task without a train split.
    #[error("{task} has no train split (use the target corpus instead)")]
    NoTrainSplit { task: Task },
}

/// A sentence pair with its gold similarity score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    pub s1: String,
    pub s2: String,
    pub score: f64,
}

/// A named group of pairs (an STS year's source file, or the single "test" subset of
/// STS-B and SICK-R).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subset {
    pub name: String,
    pub pairs: Vec<Pair>,
}

/// An evaluation set: one task's scored test pairs, grouped in subsets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalSet {
    pub name: String,
    pub subsets: Vec<Subset>,
}

impl EvalSet {
    /// Total number of pairs over all subsets.
    pub fn num_pairs(&self) -> usize {
        self.subsets.iter().map(|s| s.pairs.len()).sum()
    }
}

/// The data folder: `flag` if given, else the environment variable `BERTFLOW_DATA` if set
/// and non-empty, else [`DEFAULT_DATA_DIR`] (`../shared/data/sts`) as it stands, relative
/// to the working directory. bertflow's front ends (the CLI, Python) use
/// `bertflow_core::defaults::data_dir` instead, the one rule that also looks for the
/// default above where bertflow is installed.
pub fn resolve_data_dir(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    match std::env::var_os(DATA_ENV) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_DATA_DIR),
    }
}

/// Checks that `data_dir` holds every file that [`load_task`] and [`fit_sentences`] need
/// for `tasks`. The error names the missing path and says to pass `--data` or set
/// `BERTFLOW_DATA`.
pub fn check_data_dir(data_dir: &Path, tasks: &[Task]) -> Result<(), DataError> {
    if !data_dir.is_dir() {
        return Err(DataError::MissingDir {
            path: data_dir.to_path_buf(),
        });
    }
    for &task in tasks {
        match task.sts_year_folder() {
            Some(year) => {
                // Lists the subsets and checks each has its gold file.
                sts_subset_files(&data_dir.join(year))?;
            }
            None => {
                for f in split_files(data_dir, task) {
                    if !f.is_file() {
                        return Err(DataError::MissingFile { path: f });
                    }
                }
            }
        }
    }
    Ok(())
}

/// Loads the scored test pairs of `task` from `data_dir`.
///
/// STS12–16 have one subset per `STS.input.X.txt` file (sorted by file name, the subset
/// named `X`), keeping only the pairs whose gold line is not empty. STS-B (`sts-test.csv`)
/// and SICK-R (`SICK_test_annotated.txt`) have a single subset named "test".
pub fn load_task(data_dir: &Path, task: Task) -> Result<EvalSet, DataError> {
    let subsets = match task.sts_year_folder() {
        Some(year) => {
            let mut subsets = Vec::new();
            for (name, _input, gold, raw) in read_sts_year(&data_dir.join(year))? {
                let pairs: Vec<Pair> = raw
                    .into_iter()
                    .filter_map(|r| {
                        r.score.map(|score| Pair {
                            s1: r.s1,
                            s2: r.s2,
                            score,
                        })
                    })
                    .collect();
                if pairs.is_empty() {
                    return Err(DataError::Empty { path: gold });
                }
                subsets.push(Subset { name, pairs });
            }
            subsets
        }
        None => {
            let test = test_file(data_dir, task);
            let pairs = read_split(&test, task)?;
            if pairs.is_empty() {
                return Err(DataError::Empty { path: test });
            }
            vec![Subset {
                name: "test".to_string(),
                pairs,
            }]
        }
    };
    Ok(EvalSet {
        name: task.name().to_string(),
        subsets,
    })
}

/// A split of STS-B or SICK-R (STS12–16 have only their test pairs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Split {
    /// `sts-train.csv` / `SICK_train.txt`.
    Train,
    /// `sts-dev.csv` / `SICK_trial.txt`.
    Dev,
    /// `sts-test.csv` / `SICK_test_annotated.txt` (what [`load_task`] loads).
    Test,
}

impl Split {
    /// "train", "dev" or "test".
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Dev => "dev",
            Split::Test => "test",
        }
    }
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Loads one split of STS-B or SICK-R as an [`EvalSet`] with a single subset named after
/// the split ("train", "dev", "test"). STS-B dev has 1500 pairs, train 5749, test 1379.
/// `Split::Test` gives the same pairs as [`load_task`]. For STS12–16, `Split::Test` is
/// [`load_task`] and the other splits are a [`DataError::NoTrainSplit`] error.
pub fn load_split(data_dir: &Path, task: Task, split: Split) -> Result<EvalSet, DataError> {
    if task.sts_year_folder().is_some() {
        return match split {
            Split::Test => load_task(data_dir, task),
            Split::Train | Split::Dev => Err(DataError::NoTrainSplit { task }),
        };
    }
    let files = split_files(data_dir, task);
    let path = match split {
        Split::Train => &files[0],
        Split::Dev => &files[1],
        Split::Test => &files[2],
    };
    let pairs = read_split(path, task)?;
    if pairs.is_empty() {
        return Err(DataError::Empty { path: path.clone() });
    }
    Ok(EvalSet {
        name: task.name().to_string(),
        subsets: vec![Subset {
            name: split.name().to_string(),
            pairs,
        }],
    })
}

/// Sentences (labels unused) to fit a calibrator on; see [`FitCorpus`].
///
/// Sentences come in file order (files in the order train, dev/trial, test; STS subsets
/// sorted by file name), `s1` then `s2` of each pair, with duplicates kept; use
/// [`dedup_preserving_order`] to drop them.
pub fn fit_sentences(
    data_dir: &Path,
    task: Task,
    corpus: FitCorpus,
) -> Result<Vec<String>, DataError> {
    let mut out = Vec::new();
    match (task.sts_year_folder(), corpus) {
        (Some(_), FitCorpus::Train) => return Err(DataError::NoTrainSplit { task }),
        (Some(year), FitCorpus::Target | FitCorpus::TargetScored) => {
            let scored_only = corpus == FitCorpus::TargetScored;
            for (_, _, _, raw) in read_sts_year(&data_dir.join(year))? {
                for r in raw {
                    if !scored_only || r.score.is_some() {
                        out.push(r.s1);
                        out.push(r.s2);
                    }
                }
            }
        }
        (None, FitCorpus::Train) => {
            push_pairs(&mut out, read_split(&split_files(data_dir, task)[0], task)?);
        }
        (None, FitCorpus::Target | FitCorpus::TargetScored) => {
            for f in split_files(data_dir, task) {
                push_pairs(&mut out, read_split(&f, task)?);
            }
        }
    }
    Ok(out)
}

/// Removes repeated strings, keeping the first appearance of each, in order.
pub fn dedup_preserving_order(v: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::with_capacity(v.len());
    let mut out = Vec::with_capacity(v.len());
    for s in v {
        if !seen.contains(s.as_str()) {
            seen.insert(s.clone());
            out.push(s);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Internals

fn push_pairs(out: &mut Vec<String>, pairs: Vec<Pair>) {
    for p in pairs {
        out.push(p.s1);
        out.push(p.s2);
    }
}

/// The split files of STS-B or SICK, train first, test last.
fn split_files(data_dir: &Path, task: Task) -> Vec<PathBuf> {
    match task {
        Task::SickR => [
            "SICK_train.txt",
            "SICK_trial.txt",
            "SICK_test_annotated.txt",
        ]
        .iter()
        .map(|f| data_dir.join("SICK").join(f))
        .collect(),
        _ => ["sts-train.csv", "sts-dev.csv", "sts-test.csv"]
            .iter()
            .map(|f| data_dir.join("STSBenchmark").join(f))
            .collect(),
    }
}

fn test_file(data_dir: &Path, task: Task) -> PathBuf {
    let mut files = split_files(data_dir, task);
    files.pop().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::formats::read_lines;
    use super::*;
    use std::fs;

    #[test]
    fn normalize_collapses_whitespace() {
        assert_eq!(normalize_sentence("  a \t b\u{a0}c  "), "a b c");
        assert_eq!(normalize_sentence(" \t "), "");
    }

    #[test]
    fn dedup_keeps_first_appearance() {
        let v = ["b", "a", "b", "c", "a"].map(String::from).to_vec();
        assert_eq!(dedup_preserving_order(v), ["b", "a", "c"]);
    }

    #[test]
    fn read_lines_handles_bom_crlf_and_final_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.txt");
        fs::write(&p, b"\xEF\xBB\xBFa\tb\r\n\r\nc\n").unwrap();
        assert_eq!(read_lines(&p, true).unwrap(), ["a\tb", "", "c"]);
        fs::write(&p, b"x\n\n").unwrap();
        assert_eq!(read_lines(&p, true).unwrap(), ["x", ""]);
        fs::write(&p, b"").unwrap();
        assert!(read_lines(&p, true).unwrap().is_empty());
        fs::write(&p, b"ok\nbad \xff\n").unwrap();
        let err = read_lines(&p, true).unwrap_err();
        assert!(
            matches!(err, DataError::InvalidUtf8 { line: 2, .. }),
            "{err}"
        );
    }

    #[test]
    fn sts_year_skips_unscored_and_checks_line_counts() {
        let dir = tempfile::tempdir().unwrap();
        let year = dir.path().join("STS12");
        fs::create_dir(&year).unwrap();
        fs::write(year.join("STS.input.b.txt"), "x  y\tz\nu\tv \n").unwrap();
        fs::write(year.join("STS.gs.b.txt"), "\n2.5\n").unwrap();
        fs::write(year.join("STS.input.a.txt"), "p\tq\textra\tcols\n").unwrap();
        fs::write(year.join("STS.gs.a.txt"), "4\n").unwrap();
        let set = load_task(dir.path(), Task::Sts12).unwrap();
        let names: Vec<&str> = set.subsets.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(set.subsets[1].pairs, vec![pair("u", "v", 2.5)]);
        assert_eq!(set.subsets[0].pairs, vec![pair("p", "q", 4.0)]);
        let all = fit_sentences(dir.path(), Task::Sts12, FitCorpus::Target).unwrap();
        assert_eq!(all, ["p", "q", "x y", "z", "u", "v"]);
        let scored = fit_sentences(dir.path(), Task::Sts12, FitCorpus::TargetScored).unwrap();
        assert_eq!(scored, ["p", "q", "u", "v"]);
        let err = fit_sentences(dir.path(), Task::Sts12, FitCorpus::Train).unwrap_err();
        assert!(
            err.to_string().contains("STS12 has no train split"),
            "{err}"
        );

        fs::write(year.join("STS.gs.a.txt"), "4\n3\n").unwrap();
        let err = load_task(dir.path(), Task::Sts12).unwrap_err();
        assert!(matches!(err, DataError::LineCountMismatch { .. }), "{err}");
        fs::write(year.join("STS.gs.a.txt"), "four\n").unwrap();
        let err = load_task(dir.path(), Task::Sts12).unwrap_err().to_string();
        assert!(err.contains("STS.gs.a.txt:1:"), "{err}");
        fs::remove_file(year.join("STS.gs.a.txt")).unwrap();
        let err = load_task(dir.path(), Task::Sts12).unwrap_err().to_string();
        assert!(
            err.contains("STS.gs.a.txt") && err.contains("BERTFLOW_DATA"),
            "{err}"
        );
    }

    #[test]
    fn missing_folder_error_names_path_and_hint() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let err = check_data_dir(&missing, &Task::ALL)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&missing.display().to_string()), "{err}");
        assert!(
            err.contains("--data") && err.contains("BERTFLOW_DATA"),
            "{err}"
        );
        let err = check_data_dir(dir.path(), &[Task::StsB])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sts-train.csv") && err.contains("--data"),
            "{err}"
        );
        let err = load_task(dir.path(), Task::Sts13).unwrap_err().to_string();
        assert!(err.contains("STS13") && err.contains("--data"), "{err}");
        fs::create_dir(dir.path().join("STS14")).unwrap();
        let err = check_data_dir(dir.path(), &[Task::Sts14])
            .unwrap_err()
            .to_string();
        assert!(err.contains("no STS.input.*.txt"), "{err}");
    }

    #[test]
    fn sick_columns_by_header_and_stsb_extra_columns() {
        let dir = tempfile::tempdir().unwrap();
        let sick = dir.path().join("SICK");
        fs::create_dir(&sick).unwrap();
        let h = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\r\n";
        fs::write(
            sick.join("SICK_train.txt"),
            format!("{h}1\ta\tb\t3.5\tNEUTRAL\r\n"),
        )
        .unwrap();
        fs::write(sick.join("SICK_trial.txt"), format!("{h}2\tc\td\t1\tX\n")).unwrap();
        fs::write(
            sick.join("SICK_test_annotated.txt"),
            format!("{h}3\te\tf\t5\tX\n4\tg\th\t2\tX\n"),
        )
        .unwrap();
        let set = load_task(dir.path(), Task::SickR).unwrap();
        assert_eq!(set.name, "SICK-R");
        assert_eq!(set.subsets[0].name, "test");
        assert_eq!(
            set.subsets[0].pairs,
            [pair("e", "f", 5.0), pair("g", "h", 2.0)]
        );
        let train = fit_sentences(dir.path(), Task::SickR, FitCorpus::Train).unwrap();
        assert_eq!(train, ["a", "b"]);
        let target = fit_sentences(dir.path(), Task::SickR, FitCorpus::Target).unwrap();
        assert_eq!(target, ["a", "b", "c", "d", "e", "f", "g", "h"]);
        fs::write(sick.join("SICK_trial.txt"), "no header\n").unwrap();
        let err = fit_sentences(dir.path(), Task::SickR, FitCorpus::Target).unwrap_err();
        assert!(err.to_string().contains("SICK_trial.txt:1:"), "{err}");

        let b = dir.path().join("STSBenchmark");
        fs::create_dir(&b).unwrap();
        fs::write(b.join("sts-train.csv"), "g\tf\ty\t1\t0.5\t\"a\tb\"\n").unwrap();
        fs::write(b.join("sts-dev.csv"), "g\tf\ty\t1\t1.0\tc\td\n").unwrap();
        fs::write(
            b.join("sts-test.csv"),
            "g\tf\ty\t1\t4.0\te \"q\"\tf\tsrc1\tsrc2\n",
        )
        .unwrap();
        let set = load_task(dir.path(), Task::StsB).unwrap();
        assert_eq!(set.subsets[0].pairs, [pair("e \"q\"", "f", 4.0)]);
        assert_eq!(
            fit_sentences(dir.path(), Task::StsB, FitCorpus::Train).unwrap(),
            ["\"a", "b\""]
        );
        fs::write(b.join("sts-dev.csv"), "g\tf\ty\t1\tx\tc\td\n").unwrap();
        let err = fit_sentences(dir.path(), Task::StsB, FitCorpus::Target).unwrap_err();
        assert!(err.to_string().contains("sts-dev.csv:1:"), "{err}");
    }

    fn pair(s1: &str, s2: &str, score: f64) -> Pair {
        Pair {
            s1: s1.into(),
            s2: s2.into(),
            score,
        }
    }
}
