//! The daemon's module graph stays layered, its files stay short enough to read at once,
//! and unsafe code stays in the FFI layers. docs/architecture.md describes the same layers.
//!
//! These read the sources, so a change that breaks the shape fails here with the file and
//! the import that broke it, not in a review months later.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level modules of `server/src`, lowest layer first. A module may use modules of a
/// lower layer only: never one of its own layer (siblings stay independent) or above.
const LAYERS: &[&[&str]] = &[
    &["backend", "files", "types"],
    &["error"],
    &["config", "observe"],
    &["tenancy", "registry", "policy"],
    &["daemon"],
    &["api", "native", "kubernetes"],
    &["serve"],
];

/// Files allowed to hold `unsafe` code: the vendor FFI layers.
const UNSAFE_ALLOWED: &[&str] = &["backend/dl.rs", "backend/acl/ffi.rs", "backend/cuda/ffi.rs"];

/// The longest a source file may grow (tests included) before it is split by concern.
const MAX_LINES: usize = 450;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("server/src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every source file, as (path relative to src, text).
fn sources() -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(src()).expect("under src").to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).expect("a readable source file");
            (rel, text)
        })
        .collect()
}

/// The code of a file without comments and without its unit tests (tests may reach
/// anywhere to build their fixtures).
fn code(text: &str) -> String {
    let body = text.split("#[cfg(test)]").next().unwrap_or_default();
    body.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// `crate::name` paths a file's code uses, by name.
fn crate_uses(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

#[test]
fn every_top_level_module_is_in_a_layer() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let declared: Vec<&str> =
        lib.lines().filter_map(|l| l.strip_prefix("pub mod ").and_then(|m| m.strip_suffix(';'))).collect();
    let layered: Vec<&str> = LAYERS.iter().flat_map(|l| l.iter().copied()).collect();
    for m in &declared {
        assert!(layered.contains(m), "module {m} is declared in lib.rs but is in no layer of this test");
    }
    for m in &layered {
        assert!(declared.contains(m), "layer module {m} is not declared in lib.rs");
    }
}

#[test]
fn modules_use_only_lower_layers() {
    let rank: BTreeMap<&str, usize> =
        LAYERS.iter().enumerate().flat_map(|(i, l)| l.iter().map(move |m| (*m, i))).collect();
    let mut wrong = Vec::new();
    for (path, text) in sources() {
        let top = path.split('/').next().unwrap_or_default().trim_end_matches(".rs").to_string();
        let Some(&mine) = rank.get(top.as_str()) else { continue };
        for used in crate_uses(&code(&text)) {
            match rank.get(used.as_str()) {
                Some(&theirs) if used != top && theirs >= mine => {
                    wrong.push(format!("{path}: {top} (layer {mine}) uses crate::{used} (layer {theirs})"))
                }
                _ => {}
            }
        }
    }
    wrong.dedup();
    assert!(wrong.is_empty(), "imports against the layering:\n{}", wrong.join("\n"));
}

#[test]
fn no_source_file_is_too_long_to_read_at_once() {
    let long: Vec<String> = sources()
        .into_iter()
        .filter(|(_, text)| text.lines().count() > MAX_LINES)
        .map(|(path, text)| format!("{path}: {} lines", text.lines().count()))
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines (split them by concern):\n{}", long.join("\n"));
}

#[test]
fn unsafe_code_stays_in_the_ffi_layers() {
    let wrong: Vec<String> = sources()
        .into_iter()
        .filter(|(path, text)| !UNSAFE_ALLOWED.contains(&path.as_str()) && code(text).contains("unsafe"))
        .map(|(path, _)| path)
        .collect();
    assert!(wrong.is_empty(), "unsafe outside the FFI layers: {wrong:?}");
}
