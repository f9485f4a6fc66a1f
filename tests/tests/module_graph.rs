//! No import circles among sibling modules of the daemon's directories, the interposer,
//! the Rust client, npuctl, the simulator, the fake vendor libraries and the test harness
//! (the daemon's top-level layering is `server/tests/layers.rs`). Two modules that import
//! each other are one concern split in two, or two concerns tied together: either way
//! neither can be read, or changed, without the other.
//!
//! These read the sources, so an import that closes a circle fails here with the circle
//! spelled out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module directories whose child modules must form no circle: each crate's root and the
/// nested directories with modules of their own (the daemon's top level is layered by
/// `server/tests/layers.rs`; its directories are here).
const SCOPES: &[&str] = &[
    "cli/src",
    "cli/src/commands",
    "client/rust/src",
    "client/preload/src",
    "client/preload/src/ffi",
    "client/preload/src/process",
    "client/preload/src/wire",
    "proto/src",
    "sim/src",
    "sim/src/engine",
    "server/src/api",
    "server/src/backend",
    "server/src/backend/acl",
    "server/src/backend/cuda",
    "server/src/config",
    "server/src/daemon",
    "server/src/daemon/budget",
    "server/src/daemon/reconcile",
    "server/src/daemon/reports",
    "server/src/kubernetes",
    "server/src/observe",
    "server/src/policy",
    "server/src/policy/admission",
    "server/src/policy/allocations",
    "server/src/policy/ledger",
    "server/src/policy/natives",
    "server/src/policy/natives/pacing",
    "server/src/registry",
    "server/src/serve",
    "server/src/tenancy",
    "server/src/tenancy/authority",
    "server/src/tenancy/cgroup",
    "server/src/tenancy/hpack",
    "tests/src",
    "tests/src/bench",
    "tests/fake-cuda/src",
    "tests/fake-acl/src",
    "tests/fake-acl/src/state",
    "tests/fake-acl/src/state/capture",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace holds the tests crate").to_path_buf()
}

/// The code of a file without comments and without its unit tests (tests may reach
/// anywhere to build their fixtures).
fn code(text: &str) -> String {
    let body = text.split("#[cfg(test)]").next().unwrap_or_default();
    body.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The names that follow `prefix` in `code`, and the names inside `prefix{...}` groups.
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or_default();
            out.extend(inner.split(',').map(|part| ident(part.trim())).filter(|n| !n.is_empty()));
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// Whether `code` names a path that starts with the module `name` (`name::…`), not as
/// the tail of a longer name.
fn mentions_path(code: &str, name: &str) -> bool {
    let needle = format!("{name}::");
    code.match_indices(&needle).any(|(i, _)| {
        code[..i].chars().next_back().is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
    })
}

/// The child modules of `dir` (files and directories), with the source files of each.
fn children(dir: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("a readable module directory") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_stem().expect("a file name").to_string_lossy().into_owned();
        if path.is_dir() {
            let mut files = Vec::new();
            rust_files(&path, &mut files);
            out.insert(name, files);
        } else if path.extension().is_some_and(|e| e == "rs") && !["lib", "main", "mod"].contains(&name.as_str()) {
            out.insert(name, vec![path]);
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Which siblings each child of `scope` uses: through `crate::` at a crate's root, through
/// `super::` (from a file directly in the scope) or the scope's full path below it.
fn sibling_uses(scope: &str) -> BTreeMap<String, BTreeSet<String>> {
    let dir = workspace().join(scope);
    let root = dir.join("lib.rs").exists() || dir.join("main.rs").exists();
    let below_src = scope.split_once("/src").map(|(_, rest)| rest.trim_start_matches('/')).unwrap_or_default();
    let kids = children(&dir);
    let mut graph = BTreeMap::new();
    for (name, files) in &kids {
        let mut uses = BTreeSet::new();
        for file in files {
            let text = code(&std::fs::read_to_string(file).expect("a readable source file"));
            let scope_path = format!("crate::{}::", below_src.replace('/', "::"));
            let direct = file.parent() == Some(dir.as_path());
            let glob = if root {
                uses.extend(names_after(&text, "crate::"));
                text.contains("use crate::*;")
            } else {
                uses.extend(names_after(&text, &scope_path));
                if direct {
                    uses.extend(names_after(&text, "super::"));
                }
                (direct && text.contains("use super::*;")) || text.contains(&format!("use {scope_path}*;"))
            };
            if glob {
                // A glob of the scope brings every sibling in by its bare name.
                uses.extend(kids.keys().filter(|k| mentions_path(&text, k)).cloned());
            }
        }
        uses.retain(|u| u != name && kids.contains_key(u));
        graph.insert(name.clone(), uses);
    }
    graph
}

/// A circle in `graph`, as the modules along it, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|start| visit(start, graph, &mut Vec::new(), &mut done))
}

#[test]
fn sibling_modules_import_no_circle() {
    let circles: Vec<String> = SCOPES
        .iter()
        .filter_map(|scope| circle(&sibling_uses(scope)).map(|c| format!("{scope}: {}", c.join(" -> "))))
        .collect();
    assert!(circles.is_empty(), "modules that import each other:\n{}", circles.join("\n"));
}

#[test]
fn the_check_sees_a_circle_where_there_is_one() {
    // The same reading on a graph with one, so the test above cannot pass by reading
    // nothing: args -> commands -> args, as npuctl had it.
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("args".to_string(), BTreeSet::from(["commands".to_string(), "output".to_string()])),
        ("commands".to_string(), BTreeSet::from(["args".to_string()])),
        ("output".to_string(), BTreeSet::new()),
    ]
    .into();
    assert_eq!(circle(&graph), Some(vec!["args".into(), "commands".into(), "args".into()]));
    assert_eq!(
        names_after("use super::{vendor::ACL, errors};\nlet x = super::acl::f();", "super::"),
        BTreeSet::from(["vendor".to_string(), "errors".to_string(), "acl".to_string()])
    );
    // A glob of the scope brings siblings in by their bare names, which count too.
    assert!(mentions_path("use crate::*;\nfn f() { state::memory::replay(); }", "state"));
    assert!(!mentions_path("use npu_sim::state::Rt; fn upstate() {}", "state"));
    // And it reads this workspace's files: every scope has modules, and the interposer's
    // hooks are seen using the layer below them.
    for scope in SCOPES {
        assert!(!sibling_uses(scope).is_empty(), "{scope} has no modules");
    }
    assert!(sibling_uses("client/preload/src/ffi")["acl"].contains("ascend"));
    // fake-acl's entry-point modules glob the crate root and reach the state by its name.
    assert!(sibling_uses("tests/fake-acl/src")["graphs"].contains("state"));
}
