//! Core's modules import each other without a circle (issue 34): each
//! top-level module may use the ones below it, never one that uses it back.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// `crate::NAME` paths in every file of `src/` (a folder module counts as its
/// top-level name), as a map from module to the modules it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let deps = g.entry(module.clone()).or_default();
        for (i, _) in text.match_indices("crate::") {
            let name: String = text[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                deps.insert(name);
            }
        }
    }
    let known: BTreeSet<String> = g.keys().cloned().collect();
    for deps in g.values_mut() {
        // Macros and the error type are leaves every module may use.
        deps.retain(|d| known.contains(d) && d != "error");
    }
    g
}

fn cycle_from(
    g: &BTreeMap<String, BTreeSet<String>>,
    node: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(i) = path.iter().position(|p| p == node) {
        let mut c = path[i..].to_vec();
        c.push(node.to_string());
        return Some(c);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.to_string());
    for d in g.get(node).into_iter().flatten() {
        if let Some(c) = cycle_from(g, d, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(node.to_string());
    None
}

#[test]
fn core_modules_import_each_other_without_a_circle() {
    let g = graph();
    assert!(g.len() > 10, "read only {} modules", g.len());
    assert!(g["pipeline"].contains("calibration"), "{:?}", g["pipeline"]);
    let mut done = BTreeSet::new();
    for node in g.keys() {
        if let Some(c) = cycle_from(&g, node, &mut Vec::new(), &mut done) {
            panic!("import circle in bertflow-core: {}", c.join(" -> "));
        }
    }
}
