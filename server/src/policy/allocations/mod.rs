//! Device-plugin allocations: what each Allocate call granted, the token that binds it to
//! the pod that presents it, the devices it is booked on, and the files that carry all of
//! it across restarts. Pure books and files; the kubelet-facing plugin is in
//! `crate::kubernetes`, and what binding does to the ledgers in `crate::daemon`.

mod booking;
mod claims;
pub mod listing;
mod records;
#[cfg(test)]
mod tests;

pub use booking::{BookingRow, PodBooking, split};
pub use claims::ClaimBooking;
pub use listing::{Listed, PodLister};

use crate::error::{NpudError, NpudResult, Reason};
use crate::types::Tenant;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where an allocation's token file appears inside the container.
pub use npud_proto::CONTAINER_TOKEN_PATH;

/// Where an allocation is booked, decided when it is first bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// The devices the vendor's plugin gave its container (npud's ids, ascending, each
    /// once): the streams are split over them and reserved there.
    Devices(Vec<u32>),
    /// Those devices are unknown (no vendor resource listed, or ids that name no device):
    /// booked per acquisition, on any device, up to the allocation in all. `spread` is over
    /// how many devices it is expected to be used (the vendor's device count where listed,
    /// else every device), which sizes a process's first ask.
    Fallback { spread: u32 },
}

/// The names the kubelet's pod-resources API lists an allocation's container under.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodNames {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// One Allocate call's grant to one container.
#[derive(Debug, Clone)]
pub struct Allocation {
    /// The file holding the token on the host (mounted into the container).
    pub file: PathBuf,
    /// The unit ids the kubelet gave the container, sorted: how pod-resources names it.
    pub ids: Vec<String>,
    /// Since when its end has been in evidence: its pod's cgroup gone (a bound one), or
    /// complete listings not naming it (one never presented). It ends `grace` later;
    /// evidence to the contrary clears it. Not persisted: a restart starts it again.
    pub gone_since: Option<std::time::Instant>,
    /// Units by the device their ids came from (units × stream_unit): only their sum
    /// means anything, since the kubelet picks unit ids from any device.
    pub streams: Vec<(u32, u32)>,
    /// The tenant it is bound to: its pod's (every container of a pod is one tenant).
    pub bound: Option<Tenant>,
    /// The pod it is bound to (the first presenter's pod uid, from its cgroup): every
    /// container of that pod, and no one else, may present it from then on.
    pub pod: Option<String>,
    /// Its place in binding order (0: never bound): reservations are made oldest first.
    pub seq: u64,
    /// Where it is booked, once bound.
    pub placement: Option<Placement>,
    /// Its container's names, once pod-resources listed it.
    pub names: Option<PodNames>,
    /// The installed interposer Allocate mounted for it (its file name), which stays on
    /// the host while the allocation does.
    pub library: Option<String>,
    /// Its booking followed the devices its pod's processes hold open, away from those
    /// its vendor's ids named (Volcano, an id scheme npud does not know, a vNPU).
    pub moved: bool,
    /// A DRA claim's allocation the kubelet unprepared: it books nothing, and its files
    /// stay until its pod's cgroup is gone (its containers may still have them mounted).
    pub ended: bool,
}

impl Allocation {
    /// The streams the allocation gives: all its units.
    pub fn total(&self) -> u32 {
        self.streams.iter().fold(0u32, |n, (_, s)| n.saturating_add(*s))
    }
}

/// What one [`Allocations::sweep`] looks at.
pub struct Sweep<'a> {
    /// Every container pod-resources lists now; None when it could not be read.
    pub listing: Option<&'a [Listed]>,
    /// npud's resource name (whose unit ids name an allocation in the listing).
    pub resource: &'a str,
    /// Whether pod `uid`'s cgroup exists (None: it cannot be told).
    pub alive: &'a (dyn Fn(&str) -> Option<bool> + Sync),
    /// How long an allocation's end must be in evidence before it ends.
    pub grace: std::time::Duration,
    pub now: std::time::Instant,
}

/// A listing as the sweep reads it: the unit-id sets of npud's resource, and the pods.
struct Listing {
    ids: std::collections::HashSet<Vec<String>>,
    pods: std::collections::HashSet<(String, String)>,
}

impl Listing {
    fn of(listing: &[Listed], resource: &str) -> Listing {
        Listing {
            ids: listing.iter().map(|c| c.ids_of(resource).to_vec()).filter(|ids| !ids.is_empty()).collect(),
            pods: listing.iter().map(|c| (c.names.namespace.clone(), c.names.pod.clone())).collect(),
        }
    }

    /// Whether every pod whose cgroup holds a bound allocation (or cannot be told gone)
    /// is named: by the unit ids of one of its allocations, or by its name. A regular
    /// init container is never listed; its pod is named by its app container.
    fn names_every_live_pod<'a>(
        &self,
        allocations: impl Iterator<Item = &'a Allocation>,
        alive: &HashMap<String, Option<bool>>,
    ) -> bool {
        let mut named: HashMap<&str, bool> = HashMap::new();
        // A claim's pod is not listed under npud's resource: DRA pods prove nothing here.
        for a in allocations.filter(|a| a.claim().is_none()) {
            let (Some(_), Some(pod)) = (&a.bound, &a.pod) else { continue };
            if alive.get(pod).copied().flatten() == Some(false) {
                continue;
            }
            let here = self.ids.contains(&a.ids)
                || a.names.as_ref().is_some_and(|n| self.pods.contains(&(n.namespace.clone(), n.pod.clone())));
            *named.entry(pod.as_str()).or_insert(false) |= here;
        }
        named.values().all(|n| *n)
    }
}

/// What a presentation did: the allocation, and the tenant it was bound to before when it
/// moved (a container of the same pod that the config maps to a tenant of its own).
pub struct Bound {
    pub allocation: Allocation,
    pub moved_from: Option<Tenant>,
}

pub(crate) struct Books {
    map: HashMap<String, Allocation>,
    /// Tokens, oldest Allocate first (what is dropped first past the bound).
    order: Vec<String>,
    /// The next binding's place in binding order.
    next_seq: u64,
}

/// Allocations by token. Bounded: the kubelet allocates per container, so a node holds at
/// most a few hundred; past [`MAX_ALLOCATIONS`] the oldest unbound ones go.
pub struct Allocations {
    dir: PathBuf,
    inner: Mutex<Books>,
}

pub const MAX_ALLOCATIONS: usize = 4096;

impl Allocations {
    /// Token files go in `dir` (created 0700, so only their bind mounts show them; each
    /// file 0444 for the container's user). Allocations made before a restart are read
    /// back from there: the kubelet does not call Allocate again for running containers.
    pub fn new(dir: PathBuf) -> Self {
        let books = records::reload(&dir);
        if !books.order.is_empty() {
            tracing::info!(allocations = books.order.len(), "device-plugin allocations read back");
        }
        Allocations { dir, inner: Mutex::new(books) }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Mints a token for a container's units (the kubelet's `ids`, and streams per
    /// device) and writes its files; returns the token and the token file.
    pub fn allocate(
        &self,
        mut ids: Vec<String>,
        streams: Vec<(u32, u32)>,
        library: Option<String>,
    ) -> std::io::Result<(String, PathBuf)> {
        ids.sort();
        let (token, file) = records::write_new(&self.dir, &ids, &streams, library.as_deref())?;
        let mut inner = self.lock();
        let Books { map, order, .. } = &mut *inner;
        while order.len() >= MAX_ALLOCATIONS {
            // The oldest never presented, else the oldest (its pod is long gone).
            let pos = order.iter().position(|t| map.get(t).is_some_and(|a| a.bound.is_none())).unwrap_or(0);
            let old = order.remove(pos);
            if let Some(a) = map.remove(&old) {
                tracing::warn!(
                    most = MAX_ALLOCATIONS,
                    bound = a.bound.is_some(),
                    ids = a.ids.len(),
                    "npud holds the most allocations it keeps: the oldest {} one goes to make room",
                    if a.bound.is_some() { "bound" } else { "never presented" }
                );
                records::remove_files(&a.file);
            }
        }
        let fresh = Allocation {
            file: file.clone(),
            ids,
            gone_since: None,
            streams,
            bound: None,
            pod: None,
            seq: 0,
            placement: None,
            names: None,
            library,
            moved: false,
            ended: false,
        };
        map.insert(token.clone(), fresh);
        order.push(token.clone());
        Ok((token, file))
    }

    /// The allocation `token` names, if `tenant` presenting it from `pod` may bind it:
    /// the first presentation binds the pod; from then on only that pod may present it
    /// (before and after npud restarts, since the binding is written beside the token).
    pub fn presentable(&self, token: &str, tenant: &Tenant, pod: Option<&str>) -> NpudResult<Allocation> {
        let inner = self.lock();
        let Some(a) = inner.map.get(token.trim()) else {
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
        Ok(a.clone())
    }

    /// Binds `token` to `tenant` presenting from `pod` (checked as [`Self::presentable`]),
    /// placing it where `placement` says if it has no place yet, and naming it `names` if
    /// known. Its first binding fixes its place in binding order.
    pub fn bind(
        &self,
        token: &str,
        tenant: &Tenant,
        pod: Option<&str>,
        placement: Option<Placement>,
        names: Option<PodNames>,
    ) -> NpudResult<Bound> {
        self.presentable(token, tenant, pod)?;
        let mut inner = self.lock();
        let seq = inner.next_seq;
        let Some(a) = inner.map.get_mut(token.trim()) else {
            return Err(NpudError::new(Reason::TenantRefused, "the allocation went while it was presented"));
        };
        let moved_from = a.bound.as_ref().filter(|t| *t != tenant).cloned();
        let mut changed = a.bound.as_ref() != Some(tenant) || (a.pod.is_none() && pod.is_some());
        a.bound = Some(Tenant::clone(tenant));
        a.pod = a.pod.clone().or_else(|| pod.map(str::to_string));
        let first = a.seq == 0;
        if first {
            a.seq = seq;
            changed = true;
        }
        if a.placement.is_none() && placement.is_some() {
            a.placement = placement;
            changed = true;
        }
        if names.is_some() && a.names != names {
            a.names = names;
            changed = true;
        }
        if changed {
            records::write_binding(a);
        }
        let allocation = a.clone();
        if first {
            inner.next_seq += 1;
        }
        Ok(Bound { allocation, moved_from })
    }

    /// Ends the allocations whose end is in evidence for `sweep.grace` (removing their
    /// files) and returns them. Silence ends nothing:
    /// - one bound from a pod lives while that pod's cgroup does; gone for `grace`, it
    ///   ends, whatever the kubelet lists (a kubelet restart lists nothing for a while);
    /// - any other (never presented, or bound by a process in no pod) ends once complete
    ///   listings have not named it for `grace`. A listing is complete when it names every
    ///   pod whose cgroup holds a bound allocation: an empty or partial one (a kubelet
    ///   that has not caught up) proves nothing. No listing at all proves nothing either.
    pub fn sweep(&self, sweep: &Sweep<'_>) -> Vec<Allocation> {
        let mut inner = self.lock();
        let Books { map, order, .. } = &mut *inner;
        let mut alive: HashMap<String, Option<bool>> = HashMap::new();
        for pod in map.values().filter(|a| a.bound.is_some()).filter_map(|a| a.pod.clone()) {
            alive.entry(pod).or_insert_with_key(|uid| (sweep.alive)(uid));
        }
        let listed = sweep.listing.map(|l| Listing::of(l, sweep.resource));
        let complete = listed.as_ref().is_some_and(|l| l.names_every_live_pod(map.values(), &alive));
        let mut gone = Vec::new();
        let removed = &mut gone;
        map.retain(|_, a| {
            // A claim lives until the kubelet unprepares it (no grace: its pod may not have
            // a cgroup yet); its files then go with its pod's cgroup.
            if a.claim().is_some() {
                let gone = a.ended && a.pod.as_ref().is_some_and(|p| alive.get(p).copied().flatten() == Some(false));
                if gone {
                    records::remove_files(&a.file);
                    removed.push(a.clone());
                }
                return !gone;
            }
            let evidence = match (a.bound.as_ref().and(a.pod.as_ref()), &listed) {
                (Some(pod), _) => match alive.get(pod).copied().flatten() {
                    Some(false) => Some(true),
                    // Alive, or its cgroup cannot be told: kept, whatever is listed.
                    _ => Some(false),
                },
                (None, Some(l)) if l.ids.contains(&a.ids) => Some(false),
                (None, Some(_)) if complete => Some(true),
                // Not listed, but the listing is partial or absent: nothing changes.
                (None, _) => None,
            };
            match evidence {
                Some(false) => a.gone_since = None,
                Some(true) => {
                    let since = *a.gone_since.get_or_insert(sweep.now);
                    if sweep.now.saturating_duration_since(since) >= sweep.grace {
                        records::remove_files(&a.file);
                        removed.push(a.clone());
                        return false;
                    }
                }
                None => {}
            }
            true
        });
        order.retain(|t| map.contains_key(t));
        gone
    }

    /// Names the bound allocations pod-resources now lists under `resource` (by their unit
    /// ids) and that have no names yet.
    pub fn name_from(&self, listing: &[Listed], resource: &str) {
        let mut inner = self.lock();
        for c in listing {
            let ids = c.ids_of(resource);
            if ids.is_empty() {
                continue;
            }
            for a in inner.map.values_mut().filter(|a| a.bound.is_some() && a.names.is_none() && a.ids == ids) {
                a.names = Some(c.names.clone());
                records::write_binding(a);
            }
        }
    }

    /// The pod uid of `tenant`'s bound allocations (its pod's, from its cgroup).
    pub fn pod_of(&self, tenant: &str) -> Option<String> {
        self.lock().map.values().find(|a| a.bound.as_deref() == Some(tenant)).and_then(|a| a.pod.clone())
    }

    /// Books every allocation of `tenant` on `devices` (the ones its pod's processes hold
    /// open), where it is not booked there already; returns whether any moved, and the
    /// pod's names where known. Written down: a restart keeps the move.
    pub fn rebook(&self, tenant: &str, devices: &[u32]) -> (bool, Option<PodNames>) {
        let mut inner = self.lock();
        let (mut moved, mut names) = (false, None);
        // A claim stays where the scheduler placed it: it counted the streams there.
        for a in inner.map.values_mut().filter(|a| a.bound.as_deref() == Some(tenant) && a.claim().is_none()) {
            names = names.or_else(|| a.names.clone());
            if a.placement.as_ref() == Some(&Placement::Devices(devices.to_vec())) {
                continue;
            }
            a.placement = Some(Placement::Devices(devices.to_vec()));
            a.moved = true;
            moved = true;
            records::write_binding(a);
        }
        (moved, names)
    }

    /// Whether any of `tenant`'s allocations was moved to the devices its pod holds.
    pub fn moved(&self, tenant: &str) -> bool {
        self.lock().map.values().any(|a| a.bound.as_deref() == Some(tenant) && a.moved)
    }

    /// The pod `tenant`'s namespace and name, where pod-resources named one of its
    /// allocations (`namespace/pod`).
    pub fn pod_name(&self, tenant: &str) -> Option<String> {
        let inner = self.lock();
        let a = inner.map.values().find(|a| a.bound.as_deref() == Some(tenant) && a.names.is_some())?;
        a.names.as_ref().map(|n| format!("{}/{}", n.namespace, n.pod))
    }

    /// The interposers the allocations mounted (file names), which must stay on the host.
    pub fn libraries(&self) -> Vec<String> {
        let mut out: Vec<String> = self.lock().map.values().filter_map(|a| a.library.clone()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// Every allocation (for `status` and tests).
    pub fn list(&self) -> Vec<Allocation> {
        self.lock().map.values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Books> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}
