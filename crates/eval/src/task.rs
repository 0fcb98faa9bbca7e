//! The seven evaluation tasks and the fit-corpus conventions.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// One of the seven STS evaluation tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Task {
    Sts12,
    Sts13,
    Sts14,
    Sts15,
    Sts16,
    StsB,
    SickR,
}

impl Task {
    /// All tasks in the canonical reporting order.
    pub const ALL: [Task; 7] = [
        Task::Sts12,
        Task::Sts13,
        Task::Sts14,
        Task::Sts15,
        Task::Sts16,
        Task::StsB,
        Task::SickR,
    ];

    /// Display name: "STS12" … "STS16", "STS-B", "SICK-R".
    pub fn name(self) -> &'static str {
        match self {
            Task::Sts12 => "STS12",
            Task::Sts13 => "STS13",
            Task::Sts14 => "STS14",
            Task::Sts15 => "STS15",
            Task::Sts16 => "STS16",
            Task::StsB => "STS-B",
            Task::SickR => "SICK-R",
        }
    }

    /// The year folder of an STS12–16 task, `None` for STS-B and SICK-R.
    pub(crate) fn sts_year_folder(self) -> Option<&'static str> {
        match self {
            Task::Sts12 => Some("STS12"),
            Task::Sts13 => Some("STS13"),
            Task::Sts14 => Some("STS14"),
            Task::Sts15 => Some("STS15"),
            Task::Sts16 => Some("STS16"),
            Task::StsB | Task::SickR => None,
        }
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of [`Task::from_str`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "unknown task '{input}'; valid names: STS12, STS13, STS14, STS15, STS16, STS-B, SICK-R \
     (case-insensitive; aliases: stsb, sts-b, stsbenchmark, sick, sick-r, sickr)"
)]
pub struct ParseTaskError {
    pub input: String,
}

impl FromStr for Task {
    type Err = ParseTaskError;

    /// Accepts the [`Task::name`]s case-insensitively, plus the aliases
    /// `stsb`, `sts-b`, `stsbenchmark` (STS-B) and `sick`, `sick-r`, `sickr` (SICK-R).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let task = match lower.as_str() {
            "sts12" => Task::Sts12,
            "sts13" => Task::Sts13,
            "sts14" => Task::Sts14,
            "sts15" => Task::Sts15,
            "sts16" => Task::Sts16,
            "sts-b" | "stsb" | "stsbenchmark" => Task::StsB,
            "sick-r" | "sick" | "sickr" => Task::SickR,
            _ => {
                return Err(ParseTaskError {
                    input: s.to_string(),
                })
            }
        };
        Ok(task)
    }
}

/// Which sentences an unsupervised calibrator is fitted on (labels are never used).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FitCorpus {
    /// Every sentence of the task: all splits of STS-B (train+dev+test), SICK
    /// train+trial+test, and every pair of every subset of an STS year, including the
    /// pairs that have no gold score.
    Target,
    /// Like [`FitCorpus::Target`], but STS12–16 contribute only their scored pairs.
    TargetScored,
    /// The train split (STS-B train, SICK train); an error for STS12–16.
    Train,
}

impl FitCorpus {
    /// Name accepted by [`FitCorpus::from_str`]: "target", "target-scored", "train".
    pub fn name(self) -> &'static str {
        match self {
            FitCorpus::Target => "target",
            FitCorpus::TargetScored => "target-scored",
            FitCorpus::Train => "train",
        }
    }
}

impl fmt::Display for FitCorpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of [`FitCorpus::from_str`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown fit corpus '{input}'; valid names: target, target-scored, train")]
pub struct ParseFitCorpusError {
    pub input: String,
}

impl FromStr for FitCorpus {
    type Err = ParseFitCorpusError;

    /// Case-insensitive; `target_scored` is accepted for `target-scored`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "target" => Ok(FitCorpus::Target),
            "target-scored" | "target_scored" => Ok(FitCorpus::TargetScored),
            "train" => Ok(FitCorpus::Train),
            _ => Err(ParseFitCorpusError {
                input: s.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_canonical_order() {
        let names: Vec<&str> = Task::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(
            names,
            ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R"]
        );
        assert_eq!(Task::StsB.to_string(), "STS-B");
    }

    #[test]
    fn parse_names_and_aliases() {
        for t in Task::ALL {
            assert_eq!(t.name().parse::<Task>(), Ok(t));
            assert_eq!(t.name().to_lowercase().parse::<Task>(), Ok(t));
        }
        for a in ["stsb", "STSB", "sts-b", "STSBenchmark"] {
            assert_eq!(a.parse::<Task>(), Ok(Task::StsB), "{a}");
        }
        for a in ["sick", "SICK", "sick-r", "SickR"] {
            assert_eq!(a.parse::<Task>(), Ok(Task::SickR), "{a}");
        }
    }

    #[test]
    fn parse_unknown_lists_valid_names() {
        let err = "sts17".parse::<Task>().unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("'sts17'"), "{msg}");
        for t in Task::ALL {
            assert!(msg.contains(t.name()), "{msg}");
        }
    }

    #[test]
    fn parse_fit_corpus() {
        for c in [FitCorpus::Target, FitCorpus::TargetScored, FitCorpus::Train] {
            assert_eq!(c.name().parse::<FitCorpus>(), Ok(c));
        }
        assert_eq!("TARGET".parse::<FitCorpus>(), Ok(FitCorpus::Target));
        let msg = "dev".parse::<FitCorpus>().unwrap_err().to_string();
        assert!(
            msg.contains("'dev'") && msg.contains("target-scored"),
            "{msg}"
        );
    }
}
