//! Reading and parsing the data files: strict line decoding (`read_lines`),
//! sentence normalisation ([`normalize_sentence`]), user pair files
//! ([`load_pairs_file`]), the STS12–16 year folders (`STS.input.*.txt` with their
//! `STS.gs.*.txt` gold files), the STS Benchmark `.csv` and the SICK `.txt`
//! formats. Which files a task uses is decided by the parent module.
//!
//! # Text handling
//!
//! * Every file of the distributed data set is valid UTF-8 (checked file by file when this
//!   loader was written), so files are decoded strictly: a line that is not valid UTF-8 is
//!   an error naming the file and the 1-based line number, never silently replaced.
//! * A leading UTF-8 byte-order mark is skipped; lines end at `\n` and a trailing `\r` is
//!   dropped (`SICK_test_annotated.txt` has CRLF line ends, the other files LF).
//! * Fields are split on tab characters only; sentences contain quote characters, so no
//!   quoting CSV reader is used.
//! * Sentences are whitespace-normalised by [`normalize_sentence`]: leading and trailing
//!   whitespace is removed and every internal run of whitespace becomes one space. This is
//!   what SentEval (and SimCSE, which uses its loaders) does with `s.split()` followed by
//!   `' '.join(...)`; for a BERT tokenizer it changes nothing, but it makes sentences that
//!   differ only in spacing identical (the data has several hundred sentences with
//!   trailing or doubled spaces).

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{DataError, EvalSet, Pair, Subset};
use crate::task::Task;

/// Whitespace normalisation applied to every loaded sentence: trims, and replaces each run
/// of (Unicode) whitespace by one space.
pub fn normalize_sentence(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Loads a user pair file: lines `score<TAB>sentence1<TAB>sentence2`.
///
/// The first non-blank line is taken as a header and skipped when its first field is not
/// a number. Blank lines are skipped. A line with other than three fields, a score that is
/// not a finite number, or a sentence that is empty (after [`normalize_sentence`]) is an
/// error naming the file and the 1-based line number; so is a line that is not valid
/// UTF-8. A file with no pairs is an error. The set and its single subset are named after
/// the file stem.
pub fn load_pairs_file(path: &Path) -> Result<EvalSet, DataError> {
    let lines = read_lines(path, false)?;
    let mut pairs = Vec::new();
    let mut seen_first = false;
    for (i, line) in lines.iter().enumerate() {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        let first = !seen_first;
        seen_first = true;
        if first && fields[0].trim().parse::<f64>().is_err() {
            continue; // header
        }
        let malformed = |reason: String| DataError::Malformed {
            path: path.to_path_buf(),
            line: lineno,
            reason,
        };
        if fields.len() != 3 {
            return Err(malformed(format!(
                "expected 3 tab-separated fields (score, sentence1, sentence2), found {}",
                fields.len()
            )));
        }
        let score = parse_score(fields[0]).map_err(malformed)?;
        let s1 = parse_sentence(fields[1], "sentence1").map_err(malformed)?;
        let s2 = parse_sentence(fields[2], "sentence2").map_err(malformed)?;
        pairs.push(Pair { s1, s2, score });
    }
    if pairs.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "pairs".to_string());
    Ok(EvalSet {
        name: name.clone(),
        subsets: vec![Subset { name, pairs }],
    })
}

// ---------------------------------------------------------------------------------------
// Internals

/// A pair of an STS year file; `score` is `None` where the gold line is empty.
pub(super) struct RawPair {
    pub(super) s1: String,
    pub(super) s2: String,
    pub(super) score: Option<f64>,
}

/// Reads one split file of STS-B or SICK (by `task`).
pub(super) fn read_split(path: &Path, task: Task) -> Result<Vec<Pair>, DataError> {
    if task == Task::SickR {
        read_sick(path)
    } else {
        read_stsb(path)
    }
}

/// Reads a file as lines (see the module docs). `data` selects the "missing data file"
/// error (with its `--data` hint) for a file that does not exist.
pub(super) fn read_lines(path: &Path, data: bool) -> Result<Vec<String>, DataError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if data && e.kind() == io::ErrorKind::NotFound => {
            return Err(DataError::MissingFile {
                path: path.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(DataError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    let mut raw: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
    if raw.last().is_some_and(|l| l.is_empty()) {
        raw.pop(); // the final line end, or an empty file
    }
    raw.into_iter()
        .enumerate()
        .map(|(i, l)| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            std::str::from_utf8(l)
                .map(str::to_string)
                .map_err(|_| DataError::InvalidUtf8 {
                    path: path.to_path_buf(),
                    line: i + 1,
                })
        })
        .collect()
}

fn parse_score(field: &str) -> Result<f64, String> {
    let t = field.trim();
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(format!("score '{t}' is not finite")),
        Err(_) => Err(format!("cannot parse score '{t}'")),
    }
}

fn parse_sentence(field: &str, what: &str) -> Result<String, String> {
    let s = normalize_sentence(field);
    if s.is_empty() {
        Err(format!("{what} is empty"))
    } else {
        Ok(s)
    }
}

/// The `(subset name, input file, gold file)` of an STS year folder, sorted by file name.
pub(super) fn sts_subset_files(
    year_dir: &Path,
) -> Result<Vec<(String, PathBuf, PathBuf)>, DataError> {
    let entries = match fs::read_dir(year_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(DataError::MissingDir {
                path: year_dir.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(DataError::Io {
                path: year_dir.to_path_buf(),
                source,
            })
        }
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| DataError::Io {
            path: year_dir.to_path_buf(),
            source,
        })?;
        let file_name = entry.file_name();
        if let Some(name) = OsStr::to_str(&file_name) {
            if let Some(subset) = name
                .strip_prefix("STS.input.")
                .and_then(|r| r.strip_suffix(".txt"))
            {
                if !subset.is_empty() {
                    names.push(name.to_string());
                }
            }
        }
    }
    names.sort();
    if names.is_empty() {
        return Err(DataError::NoSubsets {
            path: year_dir.to_path_buf(),
        });
    }
    let mut out = Vec::with_capacity(names.len());
    for file in names {
        let subset = file["STS.input.".len()..file.len() - ".txt".len()].to_string();
        let gold = year_dir.join(format!("STS.gs.{subset}.txt"));
        if !gold.is_file() {
            return Err(DataError::MissingFile { path: gold });
        }
        out.push((subset, year_dir.join(file), gold));
    }
    Ok(out)
}

pub(super) type StsSubsetRaw = (String, PathBuf, PathBuf, Vec<RawPair>);

/// Every pair (scored or not) of every subset of an STS year folder.
pub(super) fn read_sts_year(year_dir: &Path) -> Result<Vec<StsSubsetRaw>, DataError> {
    let mut out = Vec::new();
    for (name, input, gold) in sts_subset_files(year_dir)? {
        let in_lines = read_lines(&input, true)?;
        let gs_lines = read_lines(&gold, true)?;
        if in_lines.len() != gs_lines.len() {
            return Err(DataError::LineCountMismatch {
                input,
                gold,
                input_lines: in_lines.len(),
                gold_lines: gs_lines.len(),
            });
        }
        let mut pairs = Vec::with_capacity(in_lines.len());
        for (i, (line, gs)) in in_lines.iter().zip(&gs_lines).enumerate() {
            let malformed = |path: &Path, reason: String| DataError::Malformed {
                path: path.to_path_buf(),
                line: i + 1,
                reason,
            };
            let fields: Vec<&str> = line.split('\t').collect();
            if fields.len() < 2 {
                return Err(malformed(
                    &input,
                    format!(
                        "expected at least 2 tab-separated fields, found {}",
                        fields.len()
                    ),
                ));
            }
            let s1 = parse_sentence(fields[0], "sentence1").map_err(|r| malformed(&input, r))?;
            let s2 = parse_sentence(fields[1], "sentence2").map_err(|r| malformed(&input, r))?;
            let score = if gs.trim().is_empty() {
                None
            } else {
                Some(parse_score(gs).map_err(|r| malformed(&gold, r))?)
            };
            pairs.push(RawPair { s1, s2, score });
        }
        out.push((name, input, gold, pairs));
    }
    Ok(out)
}

/// STS Benchmark: genre, file, year, id, score, sentence1, sentence2[, extra columns].
fn read_stsb(path: &Path) -> Result<Vec<Pair>, DataError> {
    let lines = read_lines(path, true)?;
    let mut pairs = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let malformed = |reason: String| DataError::Malformed {
            path: path.to_path_buf(),
            line: i + 1,
            reason,
        };
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() < 7 {
            return Err(malformed(format!(
                "expected at least 7 tab-separated fields, found {}",
                fields.len()
            )));
        }
        pairs.push(Pair {
            score: parse_score(fields[4]).map_err(malformed)?,
            s1: parse_sentence(fields[5], "sentence1").map_err(malformed)?,
            s2: parse_sentence(fields[6], "sentence2").map_err(malformed)?,
        });
    }
    Ok(pairs)
}

/// SICK: a header line naming the columns (pair_ID, sentence_A, sentence_B,
/// relatedness_score, entailment_judgment); columns are located by name.
fn read_sick(path: &Path) -> Result<Vec<Pair>, DataError> {
    let lines = read_lines(path, true)?;
    let header: Vec<&str> = lines
        .first()
        .map(|h| h.split('\t').map(str::trim).collect())
        .unwrap_or_default();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (Some(ca), Some(cb), Some(cs)) = (
        col("sentence_A"),
        col("sentence_B"),
        col("relatedness_score"),
    ) else {
        return Err(DataError::Malformed {
            path: path.to_path_buf(),
            line: 1,
            reason: "expected a header naming sentence_A, sentence_B and relatedness_score"
                .to_string(),
        });
    };
    let need = ca.max(cb).max(cs) + 1;
    let mut pairs = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let malformed = |reason: String| DataError::Malformed {
            path: path.to_path_buf(),
            line: i + 1,
            reason,
        };
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() < need {
            return Err(malformed(format!(
                "expected at least {need} tab-separated fields, found {}",
                fields.len()
            )));
        }
        pairs.push(Pair {
            score: parse_score(fields[cs]).map_err(malformed)?,
            s1: parse_sentence(fields[ca], "sentence_A").map_err(malformed)?,
            s2: parse_sentence(fields[cb], "sentence_B").map_err(malformed)?,
        });
    }
    Ok(pairs)
}
