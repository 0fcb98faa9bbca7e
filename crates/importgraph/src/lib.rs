//! bertflow-importgraph: a test helper that keeps a crate's modules free of
//! import circles (issue 48). Each crate has a `tests/import_graph.rs` that calls
//! [`assert_no_circle`].
//!
//! The graph: one node per top-level module of `src/` (a file `name.rs`, or a
//! folder `name/` with everything in it); `lib.rs` and `main.rs`, which only
//! declare and re-export, are not nodes. A *group* folder (core's `runtime/` and
//! `experiments/`) is not one node but one per module in it (`runtime::pipeline`),
//! and its `mod.rs`, which only declares them, is none. A node imports another
//! when its code names `crate::OTHER` (or `crate::GROUP::OTHER`, or a sibling in
//! a group through `super::`); comments are not code. Test code is left out: files
//! named `tests.rs` or `*_tests.rs`, and a `#[cfg(test)] mod` to the end of its
//! file (test modules sit at the end). A circle is a node that reaches itself.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module name to the modules it imports.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// `text` without `//` and `/* */` comments and without string literals' contents.
fn code_of(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'"' && (i == 0 || b[i - 1] != b'\'') {
            // A plain string: skip to its unescaped closing quote.
            out.push('"');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            out.push('"');
            i += 1;
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8().max(1);
        }
    }
    // Test modules at the end of a file.
    let mut cut = out.len();
    for (at, _) in out.match_indices("#[cfg(test)]") {
        let after = out[at + 12..].trim_start();
        let after = after.strip_prefix("pub(crate) ").unwrap_or(after);
        let inline = after
            .strip_prefix("mod ")
            .map(|m| m.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_'))
            .is_some_and(|m| m.trim_start().starts_with('{'));
        if inline {
            cut = at;
            break;
        }
    }
    out.truncate(cut);
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            rust_files(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

/// The node a file at `rel` (relative to `src/`) belongs to, if any.
fn node_of(rel: &Path, groups: &[&str]) -> Option<String> {
    let parts: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    match parts.as_slice() {
        [root] if root == "lib" || root == "main" => None,
        [g, rest @ ..] if groups.contains(&g.as_str()) => match rest {
            [] => None,
            [m] if m == "mod" => None,
            [m, ..] => Some(format!("{g}::{m}")),
        },
        [m, ..] => Some(m.clone()),
        [] => None,
    }
}

/// The identifiers that start each item of a `{a::X, b, c::{..}}` list at `text`
/// (which starts with `{`).
fn brace_heads(text: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut at_item = true;
    for (i, c) in text.char_indices() {
        match c {
            '{' => {
                depth += 1;
                at_item = depth == 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => at_item = true,
            c if depth == 1 && at_item && (c.is_ascii_alphabetic() || c == '_') => {
                heads.push(ident_at(&text[i..]));
                at_item = false;
            }
            _ => {}
        }
    }
    heads
}

fn ident_at(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The node the path `segs` (after `crate::`) names, with `groups` as above.
fn resolve(segs: &[&str], groups: &[&str], g: &Graph) -> Option<String> {
    let first = *segs.first()?;
    let name = if groups.contains(&first) {
        format!("{first}::{}", segs.get(1)?)
    } else {
        first.to_string()
    };
    g.contains_key(&name).then_some(name)
}

/// The items the crate root (`lib.rs`, `main.rs`) re-exports from a module
/// (`pub use io::{save, load as read}`), as item name to module node: so that
/// `crate::save` counts as an import of `io`.
fn reexports(root: &str, groups: &[&str], g: &Graph) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (at, _) in root.match_indices("pub use ") {
        let stmt = &root[at + 8..];
        let stmt = &stmt[..stmt.find(';').unwrap_or(stmt.len())];
        let stmt: String = stmt.split_whitespace().collect::<Vec<_>>().join(" ");
        let stmt = stmt
            .strip_prefix("crate::")
            .or_else(|| stmt.strip_prefix("self::"))
            .unwrap_or(&stmt);
        // `a::b::{c, d as e}` or `a::b::c` or `a::b::c as d`.
        let (prefix, items): (&str, Vec<&str>) = match stmt.find('{') {
            Some(i) => {
                let inner = stmt[i + 1..].trim_end_matches('}');
                let items = if inner.contains('{') {
                    Vec::new()
                } else {
                    inner.split(',').map(str::trim).collect()
                };
                (stmt[..i].trim_end_matches("::"), items)
            }
            None => ("", vec![stmt]),
        };
        for item in items.into_iter().filter(|i| !i.is_empty() && *i != "*") {
            let (path, alias) = match item.split_once(" as ") {
                Some((p, a)) => (p.trim(), Some(a.trim())),
                None => (item, None),
            };
            let full: Vec<&str> = prefix
                .split("::")
                .chain(path.split("::"))
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            let name = alias.unwrap_or_else(|| full.last().copied().unwrap_or(""));
            if let Some(node) = resolve(&full, groups, g) {
                out.insert(name.to_string(), node);
            }
        }
    }
    out
}

/// The import graph of the crate whose `src/` is `src`, with `groups` as above.
pub fn graph(src: &Path, groups: &[&str]) -> std::io::Result<Graph> {
    let mut files = Vec::new();
    rust_files(src, &mut files)?;
    files.sort();
    let mut g = Graph::new();
    let mut texts = Vec::new();
    let mut root = String::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap_or(f).to_path_buf();
        if rel == Path::new("lib.rs") || rel == Path::new("main.rs") {
            root.push_str(&code_of(&std::fs::read_to_string(f)?));
        }
        let stem = f.file_stem().unwrap_or_default().to_string_lossy();
        if stem == "tests" || stem.ends_with("_tests") {
            continue;
        }
        if let Some(node) = node_of(&rel, groups) {
            g.entry(node.clone()).or_default();
            texts.push((node, rel, std::fs::read_to_string(f)?));
        }
    }
    let items = reexports(&root, groups, &g);
    for (node, rel, text) in texts {
        let code = code_of(&text);
        let mut deps = BTreeSet::new();
        // The group a sibling named through `super::` belongs to: a file directly
        // in a group folder (`runtime/io.rs`, `runtime/indexing/mod.rs`).
        let depth = rel.components().count();
        let is_mod = rel.file_stem().is_some_and(|s| s == "mod");
        let sibling_group = node
            .split_once("::")
            .filter(|_| depth == 2 || (depth == 3 && is_mod))
            .map(|(g, _)| g.to_string());
        let mut names = Vec::new();
        for (i, _) in code.match_indices("crate::") {
            // `$crate::` is a macro's own path.
            if i > 0 && code.as_bytes()[i - 1] == b'$' {
                continue;
            }
            let rest = &code[i + 7..];
            let first = ident_at(rest);
            if groups.contains(&first.as_str()) {
                let after = &rest[first.len()..];
                match after.strip_prefix("::") {
                    Some(tail) if tail.starts_with('{') => {
                        for h in brace_heads(tail) {
                            names.push(format!("{first}::{h}"));
                        }
                    }
                    Some(tail) => names.push(format!("{first}::{}", ident_at(tail))),
                    None => {}
                }
            } else {
                names.push(first);
            }
        }
        if let Some(grp) = &sibling_group {
            for (i, _) in code.match_indices("super::") {
                if i > 0 && code[..i].ends_with("::") {
                    continue;
                }
                let tail = &code[i + 7..];
                if tail.starts_with('{') {
                    for h in brace_heads(tail) {
                        names.push(format!("{grp}::{h}"));
                    }
                } else {
                    names.push(format!("{grp}::{}", ident_at(tail)));
                }
            }
        }
        for name in names {
            let name = match items.get(&name) {
                Some(module) if !g.contains_key(&name) => module.clone(),
                _ => name,
            };
            if name != node && g.contains_key(&name) {
                deps.insert(name);
            }
        }
        g.entry(node).or_default().extend(deps);
    }
    Ok(g)
}

/// A circle of `g` (its first node repeated at the end), if any.
pub fn find_circle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
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
            if let Some(c) = visit(g, d, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|n| visit(g, n, &mut Vec::new(), &mut done))
}

/// Panics, naming the circle, when the modules of the crate at `manifest_dir`
/// (pass `env!("CARGO_MANIFEST_DIR")`) import each other in a circle; returns
/// the graph for further checks. Also panics when fewer than `min_modules`
/// modules were read (a guard against reading the wrong folder).
pub fn assert_no_circle(manifest_dir: &str, min_modules: usize) -> Graph {
    assert_no_circle_in_groups(manifest_dir, min_modules, &[])
}

/// [`assert_no_circle`] with `groups`: folders whose modules are nodes of their
/// own (see the crate's documentation).
pub fn assert_no_circle_in_groups(
    manifest_dir: &str,
    min_modules: usize,
    groups: &[&str],
) -> Graph {
    let src = Path::new(manifest_dir).join("src");
    let g = graph(&src, groups).unwrap_or_else(|e| panic!("reading {}: {e}", src.display()));
    assert!(
        g.len() >= min_modules,
        "read only {} modules in {}",
        g.len(),
        src.display()
    );
    if let Some(c) = find_circle(&g) {
        let edges: Vec<String> = c
            .windows(2)
            .map(|w| format!("{} uses crate::{}", w[0], w[1]))
            .collect();
        panic!(
            "import circle in {manifest_dir}: {}\n({}); move the item both sides need into a module below both",
            c.join(" -> "),
            edges.join("; ")
        );
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(edges: &[(&str, &str)]) -> Graph {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    }

    #[test]
    fn finds_a_circle_and_only_a_circle() {
        assert_eq!(find_circle(&g(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
        let c = find_circle(&g(&[("a", "b"), ("b", "c"), ("c", "a")])).unwrap();
        assert_eq!(c.len(), 4);
        assert_eq!(c.first(), c.last());
    }

    #[test]
    fn group_paths_name_their_module() {
        assert_eq!(brace_heads("{a::X, b, c::{d, e}} x"), ["a", "b", "c"]);
        let rel = Path::new("runtime/io.rs");
        assert_eq!(node_of(rel, &["runtime"]).as_deref(), Some("runtime::io"));
        assert_eq!(node_of(Path::new("runtime/mod.rs"), &["runtime"]), None);
        assert_eq!(
            node_of(Path::new("arch/bert.rs"), &[]).as_deref(),
            Some("arch")
        );
        assert_eq!(node_of(Path::new("lib.rs"), &[]), None);
        let mut g = Graph::new();
        for n in ["io", "runtime::pipeline", "linear"] {
            g.insert(n.into(), BTreeSet::new());
        }
        let r = reexports(
            "pub use io::{save, load as read};\npub use linear::Whitening;\n\
             pub use runtime::{pipeline, other};\npub use std::fmt;",
            &["runtime"],
            &g,
        );
        assert_eq!(r["save"], "io");
        assert_eq!(r["read"], "io");
        assert_eq!(r["Whitening"], "linear");
        assert_eq!(r["pipeline"], "runtime::pipeline");
        assert!(!r.contains_key("load") && !r.contains_key("other") && !r.contains_key("fmt"));
    }

    #[test]
    fn comments_strings_and_test_modules_are_not_code() {
        let code = code_of(
            "use crate::a::X; // crate::b\n/* crate::c */ let s = \"crate::d\";\n\
             #[cfg(test)]\nmod other_tests;\nuse crate::f;\n\
             fn f() {}\n#[cfg(test)]\nmod tests { use crate::e; }\n",
        );
        assert!(
            code.contains("crate::a") && code.contains("crate::f"),
            "{code}"
        );
        for n in ["crate::b", "crate::c", "crate::d", "crate::e"] {
            assert!(!code.contains(n), "{n} in {code}");
        }
    }
}
