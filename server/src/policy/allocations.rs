//! Device-plugin allocations: what each Allocate call granted, the token that binds it to the
//! tenant that presents it, and the files that carry the token into the container. Pure
//! books and files; the kubelet-facing plugin is in `crate::kubernetes`.

use crate::error::{NpudError, NpudResult, Reason};
use crate::types::Tenant;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where an allocation's token file appears inside the container.
pub const CONTAINER_TOKEN_PATH: &str = "/run/npud-allocation/token";

/// One Allocate call's grant to one container.
#[derive(Debug, Clone)]
pub struct Allocation {
    /// The file holding the token on the host (mounted into the container).
    pub file: PathBuf,
    /// The unit ids the kubelet gave the container, sorted: how pod-resources names it.
    pub ids: Vec<String>,
    /// Consecutive pod-resources reads that did not list it (gone after two).
    pub missing: u8,
    /// Streams per device (units × stream_unit), by device id.
    pub streams: Vec<(u32, u32)>,
    /// The tenant the token was last presented by (a restarted container of the same pod
    /// is a new tenant: the binding moves to it).
    pub bound: Option<Tenant>,
    /// The pod it is bound to (the first presenter's pod uid, from its cgroup): every
    /// container of that pod, and no one else, may present it from then on.
    pub pod: Option<String>,
    /// The device it is booked on: the first its pod's processes opened (units are a
    /// node-level credit; the kubelet's unit ids say nothing about the device used).
    pub device: Option<u32>,
}

/// Where a tenant's allocation stands on a device it asks on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Booking {
    /// The tenant has no allocation bound.
    None,
    /// Booked on this device (`new`: just now, by this ask).
    Here { new: bool },
    /// Booked on another device: (that device, the allocation's streams).
    Elsewhere(u32, u32),
}

/// What a presentation did: the allocation, and the tenant it was bound to before when it
/// moved (a restarted container of the same pod), whose quota must go.
pub struct Bound {
    pub allocation: Allocation,
    pub moved_from: Option<Tenant>,
}

impl Allocation {
    /// The streams the allocation gives: all its units, on the one device it is booked on.
    pub fn total(&self) -> u32 {
        self.streams.iter().fold(0u32, |n, (_, s)| n.saturating_add(*s))
    }
}

/// Allocations by token. Bounded: the kubelet allocates per container, so a node holds at
/// most a few hundred; past [`MAX_ALLOCATIONS`] the oldest unbound ones go.
pub struct Allocations {
    dir: PathBuf,
    inner: Mutex<(HashMap<String, Allocation>, Vec<String>)>,
}

pub const MAX_ALLOCATIONS: usize = 4096;

/// The most one allocation's token, grant or binding file may hold: a few lines each.
const MAX_RECORD: usize = 64 * 1024;

impl Allocations {
    /// Token files go in `dir` (created 0700, so only their bind mounts show them; each
    /// file 0444 for the container's user). Allocations made before a restart are read
    /// back from there: the kubelet does not call Allocate again for running containers.
    pub fn new(dir: PathBuf) -> Self {
        let this = Allocations { dir, inner: Mutex::new((HashMap::new(), Vec::new())) };
        this.reload();
        this
    }

    /// Reads `<name>.token` and `<name>.grant` pairs (a grant is `device streams` lines);
    /// a pair that does not parse is left alone and logged.
    fn reload(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        let mut inner = self.lock();
        for e in entries.flatten() {
            let path = e.path();
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
                Some(streams) if inner.1.len() < MAX_ALLOCATIONS => {
                    let token = token.trim().to_string();
                    let (bound, pod, device) = read_binding(&path.with_extension("bound"));
                    inner
                        .0
                        .insert(token.clone(), Allocation { file: path, ids, missing: 0, streams, bound, pod, device });
                    inner.1.push(token);
                }
                _ => tracing::warn!(file = %grant.display(), "an allocation grant that does not parse; ignored"),
            }
        }
        if !inner.1.is_empty() {
            tracing::info!(allocations = inner.1.len(), "device-plugin allocations read back");
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Mints a token for a container's units (the kubelet's `ids`, and streams per
    /// device) and writes its files; returns the token and the token file.
    pub fn allocate(&self, mut ids: Vec<String>, streams: Vec<(u32, u32)>) -> std::io::Result<(String, PathBuf)> {
        ids.sort();
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let token = random_hex(16)?;
        let name = random_hex(8)?;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir)?;
        let file = self.dir.join(format!("{name}.token"));
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o444).open(&file)?;
        std::io::Write::write_all(&mut f, token.as_bytes())?;
        let grant =
            format!("ids {}\n", ids.join(" ")) + &streams.iter().map(|(d, n)| format!("{d} {n}\n")).collect::<String>();
        std::fs::write(file.with_extension("grant"), grant)?;
        let mut inner = self.lock();
        let (map, order) = &mut *inner;
        while order.len() >= MAX_ALLOCATIONS {
            // The oldest never presented, else the oldest (its pod is long gone).
            let pos = order.iter().position(|t| map.get(t).is_some_and(|a| a.bound.is_none())).unwrap_or(0);
            let old = order.remove(pos);
            if let Some(a) = map.remove(&old) {
                remove_files(&a.file);
            }
        }
        let fresh = Allocation { file: file.clone(), ids, missing: 0, streams, bound: None, pod: None, device: None };
        map.insert(token.clone(), fresh);
        order.push(token.clone());
        Ok((token, file))
    }

    /// Binds `token` to `tenant`, presenting from `pod` (its pod uid; None off Kubernetes
    /// pods). The first presentation binds the pod; from then on only containers of that
    /// pod may present it (a restarted container is a new tenant: the binding moves to it),
    /// before and after npud restarts, since the binding is written beside the token.
    /// Unknown tokens, and tokens bound to another pod or tenant, are refused.
    pub fn bind(&self, token: &str, tenant: &Tenant, pod: Option<&str>) -> NpudResult<Bound> {
        let token = token.trim();
        let mut inner = self.lock();
        let Some(a) = inner.0.get_mut(token) else {
            return Err(NpudError::new(
                Reason::TenantRefused,
                "the allocation token is not one this daemon handed out (was the pod's allocation made by another npud?)",
            ));
        };
        let same_pod = match (&a.pod, pod) {
            (Some(bound), Some(p)) => bound == p,
            (Some(_), None) => false,
            (None, _) => a.bound.as_ref().is_none_or(|t| t == tenant),
        };
        if !same_pod {
            return Err(NpudError::new(
                Reason::TenantRefused,
                "this allocation is bound to another pod; a token is good only in the pod it was allocated to",
            ));
        }
        let moved_from = a.bound.as_ref().filter(|t| *t != tenant).cloned();
        if a.bound.as_ref() != Some(tenant) || (a.pod.is_none() && pod.is_some()) {
            a.bound = Some(Tenant::clone(tenant));
            a.pod = a.pod.clone().or_else(|| pod.map(str::to_string));
            write_binding(a);
        }
        Ok(Bound { allocation: a.clone(), moved_from })
    }

    /// Given the unit-id sets pod-resources lists for npud's resource now, removes (with
    /// their files) the allocations missing from two reads in a row and returns them: their
    /// pods are gone. (Two, because a container appears there only after Allocate returns.)
    pub fn sweep(&self, live: &std::collections::HashSet<Vec<String>>) -> Vec<Allocation> {
        let mut inner = self.lock();
        let (map, order) = &mut *inner;
        let mut gone = Vec::new();
        map.retain(|_, a| {
            if live.contains(&a.ids) {
                a.missing = 0;
                return true;
            }
            a.missing = a.missing.saturating_add(1);
            if a.missing < 2 {
                return true;
            }
            remove_files(&a.file);
            gone.push(a.clone());
            false
        });
        order.retain(|t| map.contains_key(t));
        gone
    }

    /// The streams booked on `device` by the allocations bound to `tenant` (its pod's share).
    pub fn bound_streams(&self, tenant: &str, device: u32) -> u32 {
        self.lock()
            .0
            .values()
            .filter(|a| a.bound.as_deref() == Some(tenant) && a.device == Some(device))
            .fold(0u32, |n, a| n.saturating_add(a.total()))
    }

    /// `tenant` asks for streams on `device`: its allocation (if any) is booked there if it
    /// is not booked yet (and the booking written down), else says where it is.
    pub fn book(&self, tenant: &str, device: u32) -> Booking {
        let mut inner = self.lock();
        let Some(a) = inner.0.values_mut().find(|a| a.bound.as_deref() == Some(tenant)) else { return Booking::None };
        match a.device {
            Some(d) if d == device => Booking::Here { new: false },
            Some(d) => Booking::Elsewhere(d, a.total()),
            None => {
                a.device = Some(device);
                write_binding(a);
                Booking::Here { new: true }
            }
        }
    }

    /// Every booked allocation: (tenant, device, streams), for the device's reservations.
    pub fn booked(&self) -> Vec<(Tenant, u32, u32)> {
        let inner = self.lock();
        inner.0.values().filter_map(|a| Some((Tenant::clone(a.bound.as_ref()?), a.device?, a.total()))).collect()
    }

    /// Every allocation (for `status` and tests).
    pub fn list(&self) -> Vec<Allocation> {
        self.lock().0.values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<String, Allocation>, Vec<String>)> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Removes an allocation's token, grant and binding files.
fn remove_files(token_file: &Path) {
    for ext in ["grant", "bound"] {
        let _ = std::fs::remove_file(token_file.with_extension(ext));
    }
    let _ = std::fs::remove_file(token_file);
}

/// Writes who an allocation is bound to and where it is booked (`tenant <name>`, `pod
/// <uid>`, `device <id>` lines), atomically, beside its token.
fn write_binding(a: &Allocation) {
    let path = a.file.with_extension("bound");
    let path = path.as_path();
    let mut text = a.bound.as_ref().map(|t| format!("tenant {t}\n")).unwrap_or_default();
    text += &a.pod.as_ref().map(|p| format!("pod {p}\n")).unwrap_or_default();
    text += &a.device.map(|d| format!("device {d}\n")).unwrap_or_default();
    if let Err(e) = crate::policy::state::write_atomically(path, text.as_bytes()) {
        tracing::warn!(file = %path.display(), error = %e, "cannot write an allocation's binding; a restart forgets it");
    }
}

/// Reads a binding written by [`write_binding`]; a missing or odd file binds nothing.
fn read_binding(path: &Path) -> (Option<Tenant>, Option<String>, Option<u32>) {
    let Ok(text) = crate::files::read_text_bounded(path, MAX_RECORD) else { return (None, None, None) };
    let field = |key: &str| text.lines().find_map(|l| l.strip_prefix(key)).map(str::trim).filter(|v| !v.is_empty());
    let tenant = field("tenant ").filter(|t| crate::types::check_tenant_name(t).is_ok()).map(Tenant::from);
    let pod = field("pod ").filter(|p| p.len() <= 64).map(str::to_string);
    let device = field("device ").and_then(|d| d.parse().ok());
    (tenant, pod, device)
}

/// `bytes` random bytes from the kernel, as hex.
fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_binds_to_the_first_tenant_that_presents_it() {
        let dir = tempfile::tempdir().unwrap();
        let a = Allocations::new(dir.path().join("allocations"));
        let ids = vec!["npud-0-1".to_string(), "npud-0-0".to_string()];
        let (token, file) = a.allocate(ids, vec![(0, 32)]).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), token);
        let (first, second): (Tenant, Tenant) = (Tenant::from("container-aaa"), Tenant::from("container-bbb"));
        let (pod, other_pod) = (Some("1a2b-pod"), Some("9f8e-pod"));
        assert_eq!(a.bind(&token, &first, pod).unwrap().allocation.total(), 32);
        assert_eq!(a.book("container-aaa", 1), Booking::Here { new: true }, "booked where first used");
        assert_eq!(a.book("container-aaa", 1), Booking::Here { new: false });
        assert_eq!(a.book("container-aaa", 0), Booking::Elsewhere(1, 32), "nothing more on another device");
        assert!(a.bind(&format!("{token}\n"), &first, pod).is_ok(), "again, and a trailing newline is fine");
        assert_eq!(a.bind(&token, &second, other_pod).err().unwrap().reason, Reason::TenantRefused, "another pod");
        assert_eq!(a.bind(&token, &second, None).err().unwrap().reason, Reason::TenantRefused, "the host");
        assert_eq!(a.bind("feed", &second, pod).err().unwrap().reason, Reason::TenantRefused);
        // A restarted container of the same pod is a new tenant: the binding moves to it.
        let moved = a.bind(&token, &second, pod).unwrap();
        assert_eq!(moved.moved_from, Some(first.clone()));
        // A restarted npud reads its allocations and their bindings back.
        let again = Allocations::new(dir.path().join("allocations"));
        assert!(again.bind(&token, &first, other_pod).is_err(), "still bound to its pod after a restart");
        assert_eq!(again.booked(), vec![(second.clone(), 1, 32)], "and still booked on device 1");
        let back = again.bind(&token, &second, pod).unwrap().allocation;
        assert_eq!(
            (back.streams, back.ids.clone()),
            (vec![(0, 32)], vec!["npud-0-0".to_string(), "npud-0-1".to_string()])
        );
        // Pod-resources: listed, kept; missing once, kept; missing twice, gone with its files.
        let live: std::collections::HashSet<Vec<String>> = [back.ids.clone()].into();
        assert!(again.sweep(&live).is_empty());
        assert!(again.sweep(&Default::default()).is_empty(), "missing once");
        assert_eq!(again.sweep(&Default::default()).len(), 1, "missing twice");
        assert!(!file.exists() && again.list().is_empty());
    }
}
