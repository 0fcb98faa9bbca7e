//! The docs' traps (issue 48, item 5): what a newcomer reads must be true of
//! the binary and of the checkout. (Every block of the docs also runs:
//! `bindings/python/tests/test_docs.py`.)
use crate::common;

use common::{bertflow, ok, repo};
use std::path::Path;

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The rerank recipes use the checkout's plain relative path to the test
/// checkpoints (no link into another checkout) and say that no real
/// cross-encoder can be had offline.
#[test]
fn rerank_recipes_are_plain_and_honest() {
    for doc in ["docs/tei.md", "docs/models-and-poolings.md"] {
        let text = read(doc);
        assert!(!text.contains("readlink"), "{doc} resolves a link");
        assert!(
            text.contains("crates/encoder/tests/fixtures/tiny-roberta-cls"),
            "{doc} lacks the plain path"
        );
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("No real cross-encoder can be had offline")
                || flat.contains("No real one can be had offline"),
            "{doc} does not say that no real cross-encoder is offline"
        );
    }
    assert!(repo()
        .join("crates/encoder/tests/fixtures/tiny-roberta-cls/config.json")
        .is_file());
}

/// The README's command table names every command of `bertflow -h`, and
/// `index search`.
#[test]
fn the_command_table_lists_every_command() {
    let readme = read("README.md");
    let table: String = readme
        .lines()
        .skip_while(|l| !l.starts_with("## Commands"))
        .take_while(|l| !l.starts_with("## The manual"))
        .collect::<Vec<_>>()
        .join("\n");
    let help = ok(&bertflow(&["-h"], Path::new("/nonexistent-cache")));
    let mut names = Vec::new();
    for l in help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
    {
        match l.split_whitespace().next() {
            Some("help") => {}
            Some(name) if l.starts_with("  ") => names.push(name.to_string()),
            _ => break,
        }
    }
    assert!(names.len() > 10, "{help}");
    for name in names {
        assert!(
            table.contains(&format!("`{name}`")),
            "README lacks `{name}`"
        );
    }
    assert!(table.contains("`search`") && table.contains("index search"));
}

/// docs/development.md names files that exist and every crate of the
/// workspace in its layout.
#[test]
fn development_names_what_is_there() {
    let dev = read("docs/development.md");
    for word in dev.split('`') {
        let path = word.trim();
        let full = ["crates/", "scripts/", "bindings/", "fuzz/", "benchmarks/"]
            .iter()
            .any(|p| path.starts_with(p));
        if full && !path.contains(' ') && !path.contains('*') {
            assert!(
                repo().join(path.trim_end_matches('/')).exists(),
                "docs/development.md names {path}, which is not there"
            );
        }
    }
    let layout: String = dev
        .lines()
        .skip_while(|l| !l.starts_with("## Layout"))
        .collect::<Vec<_>>()
        .join("\n");
    for entry in std::fs::read_dir(repo().join("crates")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let krate = if name == "cli" {
            "bertflow (CLI binary)".to_string()
        } else {
            format!("bertflow-{name}")
        };
        let diagram = layout.split("```").nth(1).unwrap_or("");
        assert!(diagram.contains(&krate), "the layout diagram lacks {krate}");
    }
}

/// The docs have an index (docs/README.md naming every page), and the
/// quantized index's page is named for what it is.
#[test]
fn the_docs_have_an_index() {
    assert!(!repo().join("docs/index.md").exists());
    let index = read("docs/README.md");
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") && name != "README.md" {
            assert!(
                index.contains(&format!("({name})")),
                "docs/README.md lacks {name}"
            );
        }
    }
    assert!(read("docs/quantized-index.md").starts_with("# Quantized index"));
}

/// BENCHMARKS.md's tables hold short cells; the detail is in notes.
#[test]
fn benchmark_cells_are_short() {
    for (i, line) in read("BENCHMARKS.md").lines().enumerate() {
        if !line.starts_with('|') {
            continue;
        }
        for cell in line.split(" | ") {
            assert!(
                cell.chars().count() <= 160,
                "BENCHMARKS.md:{}: a cell of {} characters",
                i + 1,
                cell.chars().count()
            );
        }
    }
}

/// Nothing overrides rayon's threads: the forward pass runs on bertflow's
/// own kernels and batch workers (weights are read by its own readers), so the old
/// `RAYON_NUM_THREADS=1` guard had nothing left to guard.
#[test]
fn no_rayon_override() {
    for file in [
        "crates/cli/src/main.rs",
        "bindings/python/python/bertflow/__init__.py",
    ] {
        assert!(
            !read(file).contains("RAYON_NUM_THREADS"),
            "{file} sets RAYON_NUM_THREADS"
        );
    }
}
