//! An allocation's files, beside each other in the allocations directory: `<name>.token`
//! (mounted into the container), `<name>.grant` (the unit ids and streams), `<name>.lib`
//! (the installed interposer mounted with it) and, once bound, `<name>.bound` (tenant,
//! pod, binding order, placement, names), written atomically.

use super::{Allocation, Books, Placement, PodNames};
use crate::types::Tenant;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The most one allocation's token, grant or binding file may hold: a few lines each.
const MAX_RECORD: usize = 64 * 1024;
/// The most devices a binding may name.
const MAX_DEVICES: usize = 1024;

/// Reads every `<name>.token` and `<name>.grant` pair (a grant is an `ids` line, then
/// `device streams` lines) and its binding; a pair that does not parse is left alone and
/// logged.
pub(super) fn reload(dir: &Path) -> Books {
    let mut books = Books { map: HashMap::new(), order: Vec::new(), next_seq: 1 };
    let Ok(entries) = std::fs::read_dir(dir) else { return books };
    let mut unordered = Vec::new();
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if path.extension().is_none_or(|x| x != "token") {
            continue;
        }
        let grant = path.with_extension("grant");
        let read = |p: &Path| crate::files::read_text_bounded(p, MAX_RECORD);
        let (Ok(token), Ok(text)) = (read(&path), read(&grant)) else {
            tracing::warn!(file = %path.display(), "an allocation without its grant file; ignored");
            continue;
        };
        let mut lines = text.lines();
        let ids: Vec<String> = lines
            .next()
            .and_then(|l| l.strip_prefix("ids"))
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        let streams: Option<Vec<(u32, u32)>> = lines
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let (d, n) = l.trim().split_once(' ')?;
                Some((d.parse().ok()?, n.parse().ok()?))
            })
            .collect();
        match streams {
            Some(streams) if books.order.len() < super::MAX_ALLOCATIONS => {
                let token = token.trim().to_string();
                let binding = read_binding(&path.with_extension("bound"));
                let library = read(&path.with_extension("lib"))
                    .ok()
                    .map(|l| l.trim().to_string())
                    .filter(|l| !l.is_empty() && !l.contains('/'));
                if binding.bound.is_some() && binding.seq == 0 {
                    unordered.push(token.clone());
                }
                books.next_seq = books.next_seq.max(binding.seq.saturating_add(1));
                let a = Allocation {
                    file: path,
                    ids,
                    gone_since: None,
                    streams,
                    bound: binding.bound,
                    pod: binding.pod,
                    seq: binding.seq,
                    placement: binding.placement,
                    names: binding.names,
                    library,
                    moved: binding.moved,
                    ended: binding.ended,
                };
                books.map.insert(token.clone(), a);
                books.order.push(token);
            }
            _ => tracing::warn!(file = %grant.display(), "an allocation grant that does not parse; ignored"),
        }
    }
    // Bindings an earlier npud wrote without their order go after the rest, in file order.
    for token in unordered {
        if let Some(a) = books.map.get_mut(&token) {
            a.seq = books.next_seq;
            books.next_seq += 1;
            write_binding(a);
        }
    }
    books
}

/// Writes a new allocation's token and grant files; returns the token and the token file.
/// `library`, when given, is the installed interposer mounted with it (`<name>.lib`).
pub(super) fn write_new(
    dir: &Path,
    ids: &[String],
    streams: &[(u32, u32)],
    library: Option<&str>,
) -> std::io::Result<(String, PathBuf)> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let token = random_hex(16)?;
    let name = random_hex(8)?;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let file = dir.join(format!("{name}.token"));
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o444).open(&file)?;
    std::io::Write::write_all(&mut f, token.as_bytes())?;
    let grant =
        format!("ids {}\n", ids.join(" ")) + &streams.iter().map(|(d, n)| format!("{d} {n}\n")).collect::<String>();
    std::fs::write(file.with_extension("grant"), grant)?;
    if let Some(library) = library {
        std::fs::write(file.with_extension("lib"), format!("{library}\n"))?;
    }
    Ok((token, file))
}

/// Removes an allocation's token, grant and binding files.
pub(super) fn remove_files(token_file: &Path) {
    for ext in ["grant", "bound", "lib"] {
        let _ = std::fs::remove_file(token_file.with_extension(ext));
    }
    let _ = std::fs::remove_file(token_file);
}

/// Writes who an allocation is bound to, its order, where it is booked and its names,
/// atomically, beside its token.
pub(super) fn write_binding(a: &Allocation) {
    let path = a.file.with_extension("bound");
    let path = path.as_path();
    let mut text = a.bound.as_ref().map(|t| format!("tenant {t}\n")).unwrap_or_default();
    text += &a.pod.as_ref().map(|p| format!("pod {p}\n")).unwrap_or_default();
    text += &format!("seq {}\n", a.seq);
    match &a.placement {
        Some(Placement::Devices(d)) => {
            text += &format!("devices {}\n", d.iter().map(u32::to_string).collect::<Vec<_>>().join(" "));
        }
        Some(Placement::Fallback { spread }) => text += &format!("fallback {spread}\n"),
        None => {}
    }
    if let Some(n) = &a.names {
        text += &format!("names {} {} {}\n", n.namespace, n.pod, n.container);
    }
    if a.moved {
        text += "moved\n";
    }
    if a.ended {
        text += "ended\n";
    }
    if let Err(e) = crate::policy::state::write_atomically(path, text.as_bytes()) {
        tracing::warn!(file = %path.display(), error = %e, "cannot write an allocation's binding; a restart forgets it");
    }
}

#[derive(Default)]
struct Binding {
    bound: Option<Tenant>,
    pod: Option<String>,
    seq: u64,
    placement: Option<Placement>,
    names: Option<PodNames>,
    moved: bool,
    ended: bool,
}

/// Reads a binding written by [`write_binding`] (or by an earlier npud, which booked an
/// allocation whole on one `device`); a missing or odd file binds nothing, an odd line
/// leaves its field unset.
fn read_binding(path: &Path) -> Binding {
    let Ok(text) = crate::files::read_text_bounded(path, MAX_RECORD) else { return Binding::default() };
    let field = |key: &str| text.lines().find_map(|l| l.strip_prefix(key)).map(str::trim).filter(|v| !v.is_empty());
    let bound = field("tenant ").filter(|t| crate::types::check_tenant_name(t).is_ok()).map(Tenant::from);
    let pod = field("pod ").filter(|p| p.len() <= 64).map(str::to_string);
    let seq = field("seq ").and_then(|s| s.parse().ok()).unwrap_or(0);
    let devices = field("devices ").and_then(|d| {
        let mut ids: Vec<u32> = d.split_whitespace().map(|x| x.parse().ok()).collect::<Option<_>>()?;
        ids.sort_unstable();
        ids.dedup();
        (!ids.is_empty() && ids.len() <= MAX_DEVICES).then_some(Placement::Devices(ids))
    });
    let fallback = field("fallback ")
        .and_then(|s| s.parse().ok())
        .map(|spread: u32| Placement::Fallback { spread: spread.max(1) });
    let single = field("device ").and_then(|d| d.parse().ok()).map(|d: u32| Placement::Devices(vec![d]));
    let names = field("names ").and_then(|n| {
        let mut parts = n.split_whitespace().map(str::to_string);
        let names = PodNames { namespace: parts.next()?, pod: parts.next()?, container: parts.next()? };
        parts.next().is_none().then_some(names)
    });
    let moved = text.lines().any(|l| l.trim() == "moved");
    let ended = text.lines().any(|l| l.trim() == "ended");
    Binding { bound, pod, seq, placement: devices.or(fallback).or(single), names, moved, ended }
}

/// `bytes` random bytes from the kernel, as hex.
fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}
