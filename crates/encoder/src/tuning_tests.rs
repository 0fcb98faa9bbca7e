//! The kernel choice: deterministic given the cache file, damaged and foreign
//! entries ignored with a note, the environment above the cache, the rule when
//! measuring is off, an unwritable directory not an error.
use super::*;

fn small() -> Vec<Shape> {
    tune::layer_shapes(8, 32, 64, false)
}

fn opts(dir: &FsPath) -> TuneOptions {
    TuneOptions {
        dir: Some(dir.to_path_buf()),
        write: true,
        measure: true,
        fp32_override: None,
        int8_override: None,
        budget: Duration::ZERO,
    }
}

/// An entry for this CPU naming the given kernels, as `measure` writes it.
fn entry(fp32: Path, int8: Isa) -> Entry {
    Entry {
        cpu: tune::cpu_key(),
        version: tune::KERNELS_VERSION,
        fp32: fp32.name().into(),
        int8: int8.name().into(),
        fp32_candidates: names(&tune::fp32_candidates(), Path::name),
        int8_candidates: names(&tune::int8_candidates(), Isa::name),
        shapes: vec![],
        fp32_ms: BTreeMap::new(),
        int8_ms: BTreeMap::new(),
    }
}

/// The candidates other than the rule's where there is one: a cached choice
/// then cannot be mistaken for the rule.
fn not_the_rule() -> (Path, Isa) {
    let f = tune::fp32_candidates();
    let i = tune::int8_candidates();
    (
        *f.iter().find(|&&p| p != Path::best()).unwrap_or(&f[0]),
        *i.iter().find(|&&x| x != Isa::best()).unwrap_or(&i[0]),
    )
}

fn write(dir: &FsPath, entries: Vec<serde_json::Value>) {
    KernelFile { entries }
        .write_with(&dir.join(FILE_NAME), &entry(Path::best(), Isa::best()))
        .unwrap();
}

fn read_back(dir: &FsPath) -> KernelFile {
    let mut notes = Vec::new();
    let f = KernelFile::read(&dir.join(FILE_NAME), &mut notes);
    assert!(notes.is_empty(), "{notes:?}");
    f
}

#[test]
fn a_cached_choice_is_used_as_is_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let (p, i) = not_the_rule();
    KernelFile::default()
        .write_with(&dir.path().join(FILE_NAME), &entry(p, i))
        .unwrap();
    let before = std::fs::read(dir.path().join(FILE_NAME)).unwrap();
    for _ in 0..3 {
        let c = choose(&small(), &opts(dir.path())).unwrap();
        assert_eq!((c.fp32, c.int8), (p, i));
        assert_eq!(
            (c.fp32_source, c.int8_source),
            (Source::Cache, Source::Cache)
        );
        assert!(c.fp32_measurement.is_none() && c.int8_measurement.is_none());
        assert!(c.notes.is_empty(), "{:?}", c.notes);
    }
    assert_eq!(std::fs::read(dir.path().join(FILE_NAME)).unwrap(), before);
}

#[test]
fn first_use_measures_and_keeps_the_choice_for_this_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let c = choose(&small(), &opts(dir.path())).unwrap();
    assert_eq!(
        (c.fp32_source, c.int8_source),
        (Source::Measured, Source::Measured)
    );
    assert!(tune::fp32_candidates().contains(&c.fp32));
    assert!(tune::int8_candidates().contains(&c.int8));
    assert_eq!(
        c.fp32_measurement.is_some(),
        tune::fp32_candidates().len() > 1
    );
    assert!(
        c.notes.iter().any(|n| n.contains("kernels measured")),
        "{:?}",
        c.notes
    );
    let (e, p, i) = read_back(dir.path())
        .lookup(&tune::cpu_key())
        .unwrap()
        .unwrap();
    assert_eq!((p, i), (c.fp32, c.int8));
    assert_eq!(e.shapes.len(), 4);
    // The next process reads it.
    let again = choose(&small(), &opts(dir.path())).unwrap();
    assert_eq!((again.fp32, again.int8), (c.fp32, c.int8));
    assert_eq!(again.fp32_source, Source::Cache);
}

#[test]
fn a_damaged_file_is_ignored_with_a_note_and_replaced() {
    for bytes in [
        &b"{\"format\": \"bertflow-kernels\", \"vers"[..],
        b"\x00\xff not json",
        b"[1, 2, 3]",
        b"{\"format\": \"bertflow-kernels\", \"version\": 1, \"entries\": 7}",
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), bytes).unwrap();
        let c = choose(&small(), &opts(dir.path())).unwrap();
        assert_eq!(c.fp32_source, Source::Measured);
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("is damaged") && n.contains(FILE_NAME)),
            "{:?}",
            c.notes
        );
        assert!(read_back(dir.path())
            .lookup(&tune::cpu_key())
            .unwrap()
            .is_some());
    }
}

#[test]
fn foreign_and_damaged_entries_are_ignored_with_a_note() {
    let (p, i) = not_the_rule();
    let stale = |f: &dyn Fn(&mut Entry)| {
        let mut e = entry(p, i);
        f(&mut e);
        serde_json::to_value(e).unwrap()
    };
    let cases: Vec<(serde_json::Value, &str)> = vec![
        (stale(&|e| e.version += 1), "kernels version"),
        (
            stale(&|e| e.fp32_candidates.push("avx1024".into())),
            "other kernels",
        ),
        (
            stale(&|e| e.fp32 = "bogus".into()),
            "outside the candidates",
        ),
        (
            stale(&|e| e.int8 = "scalar".into()),
            "outside the candidates",
        ),
        (
            serde_json::json!({"cpu": tune::cpu_key(), "version": "one"}),
            "is damaged",
        ),
    ];
    for (bad, why) in cases {
        let dir = tempfile::tempdir().unwrap();
        let other = serde_json::to_value(Entry {
            cpu: "GenuineIntel family 6 model 143 [avx2 fma]".into(),
            ..entry(Path::Scalar, Isa::Scalar)
        })
        .unwrap();
        let file = KernelFile {
            entries: vec![other.clone(), bad],
        };
        let doc =
            serde_json::json!({"format": FORMAT, "version": FILE_VERSION, "entries": file.entries});
        std::fs::write(dir.path().join(FILE_NAME), doc.to_string()).unwrap();
        let c = choose(&small(), &opts(dir.path())).unwrap();
        assert_eq!(c.fp32_source, Source::Measured, "{why}");
        assert!(
            c.notes.iter().any(|n| n.contains(why)),
            "{why}: {:?}",
            c.notes
        );
        let back = read_back(dir.path());
        assert_eq!(back.entries.len(), 2, "{why}");
        assert_eq!(back.entries[0], other, "another CPU's entry is kept");
        assert!(back.lookup(&tune::cpu_key()).unwrap().is_some());
    }
}

#[test]
fn the_environment_beats_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (p, i) = not_the_rule();
    KernelFile::default()
        .write_with(&dir.path().join(FILE_NAME), &entry(p, i))
        .unwrap();
    let o = TuneOptions {
        fp32_override: Some(Path::Scalar),
        ..opts(dir.path())
    };
    let c = choose(&small(), &o).unwrap();
    assert_eq!((c.fp32, c.fp32_source), (Path::Scalar, Source::Env));
    assert_eq!((c.int8, c.int8_source), (i, Source::Cache));
    let o = TuneOptions {
        fp32_override: Some(Path::Scalar),
        int8_override: Some(Isa::Scalar),
        ..opts(dir.path())
    };
    let c = choose(&small(), &o).unwrap();
    assert_eq!((c.fp32, c.int8), (Path::Scalar, Isa::Scalar));
    assert_eq!((c.fp32_source, c.int8_source), (Source::Env, Source::Env));
    assert_eq!(c.describe(), "fp32 scalar (env), int8 scalar (env)");
}

#[test]
fn measuring_off_is_the_rule_and_touches_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("cache");
    let o = TuneOptions {
        measure: false,
        ..opts(&sub)
    };
    let c = choose(&small(), &o).unwrap();
    assert_eq!((c.fp32, c.int8), (Path::best(), Isa::best()));
    assert_eq!((c.fp32_source, c.int8_source), (Source::Rule, Source::Rule));
    assert!(!sub.exists());
    // Without a directory: measured, nothing written anywhere.
    let c = choose(
        &small(),
        &TuneOptions {
            dir: None,
            ..opts(&sub)
        },
    )
    .unwrap();
    assert_eq!(c.fp32_source, Source::Measured);
    assert!(!sub.exists());
}

#[test]
fn an_unwritable_directory_is_a_note_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let c = choose(&small(), &opts(&not_a_dir)).unwrap();
    assert_eq!(c.fp32_source, Source::Measured);
    assert!(
        c.notes.iter().any(|n| n.contains("not kept")),
        "{:?}",
        c.notes
    );
}

#[test]
fn a_rewrite_keeps_other_cpus() {
    let dir = tempfile::tempdir().unwrap();
    let other = serde_json::json!({"cpu": "elsewhere", "anything": [1, 2]});
    write(dir.path(), vec![other.clone()]);
    let back = read_back(dir.path());
    assert_eq!(back.entries.len(), 2);
    assert_eq!(back.entries[0], other);
    assert_eq!(
        back.lookup(&tune::cpu_key())
            .unwrap()
            .map(|(_, p, i)| (p, i)),
        Some((Path::best(), Isa::best()))
    );
}

#[test]
fn read_only_reads_a_cached_choice_and_writes_none() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("cache");
    let ro = |d: &FsPath| TuneOptions {
        write: false,
        ..opts(d)
    };
    let c = choose(&small(), &ro(&sub)).unwrap();
    assert_eq!(c.fp32_source, Source::Measured);
    assert!(
        c.notes.iter().any(|n| n.contains("not kept")),
        "{:?}",
        c.notes
    );
    assert!(!sub.exists(), "read-only must not create the directory");
    let (p, i) = not_the_rule();
    KernelFile::default()
        .write_with(&sub.join(FILE_NAME), &entry(p, i))
        .unwrap();
    let c = choose(&small(), &ro(&sub)).unwrap();
    assert_eq!((c.fp32, c.int8, c.fp32_source), (p, i, Source::Cache));
}

#[test]
fn cached_vectors_are_keyed_by_the_fp32_kernels_arithmetic() {
    // Kernels of one class give the same bits (fp32_bits tests), of two
    // classes different ones: the class is in the key, the kernel name not.
    assert_eq!(Path::Avx2.numerics(), Path::Avx512.numerics());
    assert_ne!(Path::Avx512.numerics(), Path::Avx512Pair.numerics());
    assert_ne!(Path::Avx512.numerics(), Path::Scalar.numerics());
    let dir = format!(
        "{}/tests/fixtures/tiny-distilbert",
        env!("CARGO_MANIFEST_DIR")
    );
    let enc = crate::Encoder::load(&dir, None).unwrap();
    let ran = enc.model().fp32_kernel();
    assert_eq!(ran, enc.kernels().fp32);
    assert_eq!(
        enc.vectors_fingerprint(),
        format!("{}-fp32-{}", enc.fingerprint(), ran.numerics())
    );
}

#[cfg(unix)]
#[test]
fn a_fifo_a_device_or_an_oversize_kernels_json_is_ignored_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    let read = || {
        let mut notes = Vec::new();
        let file = KernelFile::read(&path, &mut notes);
        assert!(file.entries.is_empty());
        notes.join("\n")
    };
    // A FIFO with no writer: refused at once, never waited on.
    assert!(std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap()
        .success());
    let n = read();
    assert!(n.contains("not a regular file (a FIFO)"), "{n}");
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
    let n = read();
    assert!(n.contains("not a regular file (a character device)"), "{n}");
    std::fs::remove_file(&path).unwrap();
    // Past the limit (a 69 MB file took 1.8 GB to parse): not read.
    std::fs::write(&path, vec![b' '; MAX_FILE_BYTES as usize + 1]).unwrap();
    let n = read();
    assert!(n.contains("more than the limit"), "{n}");
}
