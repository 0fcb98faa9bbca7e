//! Which fp32 and int8 kernels the encoder runs, chosen once per process:
//!
//! 1. `BERTFLOW_FP32_KERNEL` / `BERTFLOW_INT8_KERNEL` name one (an error if this
//!    CPU lacks it);
//! 2. else `BERTFLOW_TUNE=0` (also `off`, `false`, `no`): the rule
//!    ([`Path::best`], [`Isa::best`]), nothing read, measured or written;
//! 3. else the choice cached for this CPU ([`tune::cpu_key`]) in
//!    `kernels.json` in the cache directory;
//! 4. else each eligible kernel ([`tune::fp32_candidates`],
//!    [`tune::int8_candidates`]) is timed on the model's layer shapes (a few
//!    tenths of a second at most), the fastest kept ([`Measurement::fastest`])
//!    and cached for this CPU (atomically, through bertflow-durable). Where the
//!    file cannot be written the choice holds for this process only.
//!
//! A damaged file, or an entry of another kernels version or candidate set, is
//! ignored with a note ([`KernelChoice::notes`]) and replaced; entries of other
//! CPUs are kept. The first model loaded in a process decides; later loads
//! reuse its choice ([`process_choice`]), so one process never mixes kernels.
use crate::config::ModelConfig;
use crate::error::{EncoderError, Result};
use crate::Architecture;
use bertflow_kernels::fp32::Path;
use bertflow_kernels::tune::{self, Measurement, Shape};
use bertflow_kernels::Isa;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// `BERTFLOW_TUNE=0` (or `off`, `false`, `no`): no measuring, the rule.
pub const TUNE_ENV: &str = "BERTFLOW_TUNE";
/// The cached choices, in the cache directory.
pub const FILE_NAME: &str = "kernels.json";
const FORMAT: &str = "bertflow-kernels";
const FILE_VERSION: u32 = 1;
/// Time for the rounds of one precision's measurement at first use.
pub const FIRST_USE_BUDGET: Duration = Duration::from_millis(120);

/// A choice measured on a model with fewer hidden features (a test's toy
/// model) is used but not kept.
pub const MIN_HIDDEN_TO_KEEP: usize = 256;

/// Where a kernel came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// `BERTFLOW_FP32_KERNEL` / `BERTFLOW_INT8_KERNEL`.
    Env,
    /// This CPU's entry in `kernels.json`.
    Cache,
    /// Timed just now.
    Measured,
    /// [`Path::best`] / [`Isa::best`].
    Rule,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Env => "env",
            Source::Cache => "cache",
            Source::Measured => "measured",
            Source::Rule => "rule",
        }
    }
}

/// The kernels chosen, where from, and what was noticed on the way.
#[derive(Clone, Debug)]
pub struct KernelChoice {
    pub fp32: Path,
    pub int8: Isa,
    pub fp32_source: Source,
    pub int8_source: Source,
    /// Damaged or foreign entries ignored, a measurement made, a file not
    /// written: for the front end to show (empty on a process's later loads).
    pub notes: Vec<String>,
    /// The measurements, when made now.
    pub fp32_measurement: Option<Measurement>,
    pub int8_measurement: Option<Measurement>,
}

impl KernelChoice {
    /// `fp32 avx512pair (measured), int8 avx512vnni (cache)`.
    pub fn describe(&self) -> String {
        format!(
            "fp32 {} ({}), int8 {} ({})",
            self.fp32.name(),
            self.fp32_source.name(),
            self.int8.name(),
            self.int8_source.name()
        )
    }
}

/// How to choose.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// The directory of `kernels.json`; `None`: neither read nor written.
    pub dir: Option<PathBuf>,
    /// Write a new measurement to `kernels.json` (false: read it only, e.g.
    /// with `--no-cache`, which writes nothing to the cache directory).
    pub write: bool,
    /// Read, measure and write (false: the rule).
    pub measure: bool,
    pub fp32_override: Option<Path>,
    pub int8_override: Option<Isa>,
    /// Time for each precision's rounds.
    pub budget: Duration,
}

impl TuneOptions {
    /// From `BERTFLOW_TUNE`, `BERTFLOW_FP32_KERNEL` and `BERTFLOW_INT8_KERNEL`,
    /// with `kernels.json` in `dir`; an error for a kernel name that is unknown
    /// or that this CPU lacks.
    pub fn from_env(dir: Option<PathBuf>) -> Result<Self> {
        let off = std::env::var(TUNE_ENV).is_ok_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "0" | "off" | "false" | "no"
            )
        });
        Ok(Self {
            dir,
            write: true,
            measure: !off,
            fp32_override: Path::env_override().map_err(fp32_err)?,
            int8_override: Isa::env_override()?,
            budget: FIRST_USE_BUDGET,
        })
    }
}

fn fp32_err(e: bertflow_kernels::Fp32Error) -> EncoderError {
    EncoderError::Precision(e.to_string())
}

/// The products of one layer of `cfg` on [`tune::TUNE_ROWS`] token rows.
pub fn shapes(cfg: &ModelConfig) -> Vec<Shape> {
    let gated = matches!(
        cfg.architecture,
        Architecture::ModernBert | Architecture::Gte | Architecture::NomicBert
    );
    tune::layer_shapes(
        tune::TUNE_ROWS,
        cfg.hidden_size,
        cfg.intermediate_size,
        gated,
    )
}

/// One CPU's cached choice in `kernels.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// [`tune::cpu_key`].
    pub cpu: String,
    /// [`tune::KERNELS_VERSION`] when measured.
    pub version: u32,
    pub fp32: String,
    pub int8: String,
    /// The kernels it chose among (a CPU that gains one is measured again).
    pub fp32_candidates: Vec<String>,
    pub int8_candidates: Vec<String>,
    /// The shapes measured, `[m, k, n]` each.
    #[serde(default)]
    pub shapes: Vec<[usize; 3]>,
    /// Milliseconds per layer (the shapes' best times summed), per kernel.
    #[serde(default)]
    pub fp32_ms: BTreeMap<String, f64>,
    #[serde(default)]
    pub int8_ms: BTreeMap<String, f64>,
}

fn names<T: Copy>(v: &[T], name: fn(T) -> &'static str) -> Vec<String> {
    v.iter().map(|&x| name(x).to_string()).collect()
}

impl Entry {
    /// The kernels of this entry if it is usable on this CPU, else why not.
    fn kernels(&self) -> std::result::Result<(Path, Isa), String> {
        if self.version != tune::KERNELS_VERSION {
            return Err(format!(
                "its entry for this CPU was measured with kernels version {}, not {}",
                self.version,
                tune::KERNELS_VERSION
            ));
        }
        let (f, i) = (tune::fp32_candidates(), tune::int8_candidates());
        if self.fp32_candidates != names(&f, Path::name)
            || self.int8_candidates != names(&i, Isa::name)
        {
            return Err("its entry for this CPU chose among other kernels".into());
        }
        match (Path::from_name(&self.fp32), Isa::from_name(&self.int8)) {
            (Some(p), Some(q)) if f.contains(&p) && i.contains(&q) => Ok((p, q)),
            _ => Err(format!(
                "its entry for this CPU names kernels outside the candidates here (fp32 '{}', int8 '{}')",
                self.fp32, self.int8
            )),
        }
    }

    fn ms(m: &Option<Measurement>, names: &[String]) -> BTreeMap<String, f64> {
        let Some(m) = m else {
            return BTreeMap::new();
        };
        names
            .iter()
            .filter_map(|n| m.total(n).map(|t| (n.clone(), t * 1e3)))
            .collect()
    }
}

/// The most bytes a `kernels.json` may have: an entry is about 2 KB, so room
/// for hundreds of CPUs.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// `kernels.json`: entries of any CPU (kept as read, so that entries of other
/// CPUs and newer versions survive a rewrite).
#[derive(Debug, Default)]
pub struct KernelFile {
    pub entries: Vec<serde_json::Value>,
}

impl KernelFile {
    /// The file at `path`: empty if absent; a damaged one is empty, with a note,
    /// and so is one that is not a regular file (a FIFO, a device: never read)
    /// or larger than [`MAX_FILE_BYTES`].
    pub fn read(path: &FsPath, notes: &mut Vec<String>) -> Self {
        let bytes = match bertflow_durable::read_regular(path, MAX_FILE_BYTES) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Self::default(),
            Err(e) => {
                notes.push(format!("{e}; ignored"));
                return Self::default();
            }
        };
        let damaged = |why: String| format!("{} is damaged ({why}); ignored", path.display());
        let v: serde_json::Value = match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => {
                notes.push(damaged(e.to_string()));
                return Self::default();
            }
        };
        if v["format"] != FORMAT || v["version"] != FILE_VERSION {
            notes.push(damaged(format!(
                "not a {FORMAT} file of version {FILE_VERSION}"
            )));
            return Self::default();
        }
        match v["entries"].as_array() {
            Some(e) => Self { entries: e.clone() },
            None => {
                notes.push(damaged("no list of entries".into()));
                Self::default()
            }
        }
    }

    /// The usable entry for CPU `key`; `Err(note)` for one that is there but
    /// damaged or foreign, `Ok(None)` for none.
    pub fn lookup(&self, key: &str) -> std::result::Result<Option<(Entry, Path, Isa)>, String> {
        let Some(v) = self.entries.iter().find(|e| e["cpu"] == key) else {
            return Ok(None);
        };
        let e: Entry = serde_json::from_value(v.clone())
            .map_err(|e| format!("its entry for this CPU is damaged ({e})"))?;
        let (p, i) = e.kernels()?;
        Ok(Some((e, p, i)))
    }

    /// The file with `entry` in place of any entry of its CPU, written
    /// atomically (the directory created if missing).
    pub fn write_with(mut self, path: &FsPath, entry: &Entry) -> Result<()> {
        let value =
            serde_json::to_value(entry).map_err(|e| EncoderError::Precision(e.to_string()))?;
        self.entries.retain(|e| e["cpu"] != entry.cpu.as_str());
        self.entries.push(value);
        let doc = serde_json::json!({
            "format": FORMAT,
            "version": FILE_VERSION,
            "entries": self.entries,
        });
        let text = serde_json::to_string_pretty(&doc)
            .map_err(|e| EncoderError::Precision(e.to_string()))?
            + "\n";
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(crate::error::io_err(dir))?;
        }
        bertflow_durable::write(path, text).map_err(|e| crate::error::io_err(path)(e.source))
    }
}

/// Measure the candidates on `shapes` (a precision with one candidate is not
/// timed) and pick.
pub fn measure(shapes: &[Shape], budget: Duration) -> Result<(Entry, KernelChoice)> {
    let (f, i) = (tune::fp32_candidates(), tune::int8_candidates());
    let fm = if f.len() > 1 {
        Some(tune::measure_fp32(&f, shapes, budget).map_err(fp32_err)?)
    } else {
        None
    };
    let im = if i.len() > 1 {
        Some(tune::measure_int8(&i, shapes, budget)?)
    } else {
        None
    };
    Ok(decide(shapes, fm, im))
}

/// The choice among the candidates from measurements of them (and perhaps
/// of other kernels, which are not chosen): the fastest, the rule's kernel
/// unless another beats it by [`tune::MARGIN`]; an unmeasured precision takes
/// its first candidate (its only one, where [`measure`] skips it).
pub fn decide(
    shapes: &[Shape],
    fm: Option<Measurement>,
    im: Option<Measurement>,
) -> (Entry, KernelChoice) {
    let (f, i) = (tune::fp32_candidates(), tune::int8_candidates());
    let (fnames, inames) = (names(&f, Path::name), names(&i, Isa::name));
    let fstat: Vec<&'static str> = f.iter().map(|p| p.name()).collect();
    let istat: Vec<&'static str> = i.iter().map(|p| p.name()).collect();
    let fp32 = fm
        .as_ref()
        .and_then(|m| m.fastest(&fstat, Path::best().name()))
        .and_then(Path::from_name)
        .unwrap_or(f[0]);
    let int8 = im
        .as_ref()
        .and_then(|m| m.fastest(&istat, Isa::best().name()))
        .and_then(Isa::from_name)
        .unwrap_or(i[0]);
    let entry = Entry {
        cpu: tune::cpu_key(),
        version: tune::KERNELS_VERSION,
        fp32: fp32.name().into(),
        int8: int8.name().into(),
        fp32_ms: Entry::ms(&fm, &fnames),
        int8_ms: Entry::ms(&im, &inames),
        fp32_candidates: fnames,
        int8_candidates: inames,
        shapes: shapes.iter().map(|s| [s.m, s.k, s.n]).collect(),
    };
    let choice = KernelChoice {
        fp32,
        int8,
        fp32_source: Source::Measured,
        int8_source: Source::Measured,
        notes: Vec::new(),
        fp32_measurement: fm,
        int8_measurement: im,
    };
    (entry, choice)
}

/// Choose the kernels for a model with layer `shapes` (see the module docs).
pub fn choose(shapes: &[Shape], opts: &TuneOptions) -> Result<KernelChoice> {
    let mut choice = KernelChoice {
        fp32: Path::best(),
        int8: Isa::best(),
        fp32_source: Source::Rule,
        int8_source: Source::Rule,
        notes: Vec::new(),
        fp32_measurement: None,
        int8_measurement: None,
    };
    let both_set = opts.fp32_override.is_some() && opts.int8_override.is_some();
    if opts.measure && !both_set {
        choose_tuned(shapes, opts, &mut choice)?;
    }
    if let Some(p) = opts.fp32_override {
        (choice.fp32, choice.fp32_source) = (p, Source::Env);
    }
    if let Some(i) = opts.int8_override {
        (choice.int8, choice.int8_source) = (i, Source::Env);
    }
    Ok(choice)
}

/// Steps 3 and 4 of the module docs, into `choice`.
fn choose_tuned(shapes: &[Shape], opts: &TuneOptions, choice: &mut KernelChoice) -> Result<()> {
    let key = tune::cpu_key();
    let path = opts.dir.as_ref().map(|d| d.join(FILE_NAME));
    if let Some(path) = &path {
        let file = KernelFile::read(path, &mut choice.notes);
        match file.lookup(&key) {
            Ok(Some((_, p, i))) => {
                (choice.fp32, choice.int8) = (p, i);
                (choice.fp32_source, choice.int8_source) = (Source::Cache, Source::Cache);
                return Ok(());
            }
            Ok(None) => {}
            Err(why) => choice.notes.push(format!(
                "{}: {why}; ignored, measuring again",
                path.display()
            )),
        }
    }
    let (entry, measured) = match measure(shapes, opts.budget) {
        Ok(m) => m,
        Err(e) => {
            choice.notes.push(format!(
                "cannot measure the kernels ({e}); the rule chooses"
            ));
            return Ok(());
        }
    };
    let secs = measured
        .fp32_measurement
        .iter()
        .chain(&measured.int8_measurement)
        .map(|m| m.seconds)
        .sum::<f64>();
    let notes = std::mem::take(&mut choice.notes);
    *choice = measured;
    choice.notes = notes;
    let Some(path) = path.filter(|_| opts.write) else {
        choice.notes.push(format!(
            "kernels measured on this CPU in {secs:.2} s: fp32 {}, int8 {} (not kept: no cache)",
            entry.fp32, entry.int8
        ));
        return Ok(());
    };
    // Another process may have measured meanwhile: its choice wins, so that
    // processes sharing the directory run the same kernels.
    let mut ignore = Vec::new();
    let file = KernelFile::read(&path, &mut ignore);
    if let Ok(Some((_, p, i))) = file.lookup(&key) {
        (choice.fp32, choice.int8) = (p, i);
        (choice.fp32_source, choice.int8_source) = (Source::Cache, Source::Cache);
        return Ok(());
    }
    match file.write_with(&path, &entry) {
        Ok(()) => choice.notes.push(format!(
            "kernels measured on this CPU in {secs:.2} s: fp32 {}, int8 {} (kept in {}; \
             `bertflow tune` measures again, {TUNE_ENV}=0 uses the rule)",
            entry.fp32,
            entry.int8,
            path.display()
        )),
        Err(e) => choice.notes.push(format!(
            "kernels measured on this CPU: fp32 {}, int8 {}; not kept ({e}): measured again next time",
            entry.fp32, entry.int8
        )),
    }
    Ok(())
}

static PROCESS: Mutex<Option<KernelChoice>> = Mutex::new(None);

/// The process's kernels: chosen by [`choose`] for `cfg` at the first call
/// and given to [`Path::choose`] / [`Isa::choose`], so that every layer built
/// afterwards runs them; the same at later calls (without notes). A choice
/// measured on a model of fewer than [`MIN_HIDDEN_TO_KEEP`] features is not
/// written.
pub fn process_choice(cfg: &ModelConfig, opts: &TuneOptions) -> Result<KernelChoice> {
    let mut guard = PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = guard.as_ref() {
        let mut c = c.clone();
        c.notes.clear();
        return Ok(c);
    }
    let mut opts = opts.clone();
    // A toy model's products say little about a real one's: measure, keep nothing.
    opts.write &= cfg.hidden_size >= MIN_HIDDEN_TO_KEEP;
    let c = choose(&shapes(cfg), &opts)?;
    c.fp32.choose().map_err(fp32_err)?;
    c.int8.choose()?;
    *guard = Some(c.clone());
    Ok(c)
}

/// The process's kernels, if a model was loaded.
pub fn current() -> Option<KernelChoice> {
    PROCESS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

#[cfg(test)]
#[path = "tuning_tests.rs"]
mod tests;
