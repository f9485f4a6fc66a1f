//! Native holders: processes that create streams in their own context and ask npud first
//! (through the interposer, over the budget wire of `crate::native`). Each connection is one
//! holder; what it holds is counted in the device ledgers through [`Admission`], and this
//! registry remembers who holds what so the holdings go back when the connection closes and
//! `status` can list them.
//!
//! [`Admission`]: crate::policy::admission::Admission

pub mod books;
mod captures;
mod events;
mod holder;
pub mod pacing;

pub use holder::{Holder, Unmeasured};

use crate::types::Tenant;
use npud_proto::v1 as pb;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct Natives {
    holders: Mutex<HashMap<u64, Holder>>,
    next: AtomicU64,
    /// Connections one tenant may keep open at once.
    max_per_tenant: usize,
    started: Instant,
    /// How long after start declarations (re-counting what processes held before a
    /// restart) are accepted.
    declare_grace: Duration,
    /// One native creation batch at a time per device.
    pub pacing: pacing::Pacing,
    /// The last run's books, by (pid, start), until declared (see `books`).
    recorded: Mutex<HashMap<(u32, u64), books::Recorded>>,
    /// How many times each device's measurement was booked (see `set_created`).
    measured: Mutex<HashMap<u32, u64>>,
    /// Wakes the writer of the books.
    changed: tokio::sync::Notify,
}

impl Natives {
    pub fn new(max_per_tenant: usize, declare_grace: Duration, pacing_window: Duration) -> Self {
        Self {
            pacing: pacing::Pacing::new(pacing_window),
            holders: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            max_per_tenant,
            started: Instant::now(),
            declare_grace,
            recorded: Mutex::new(HashMap::new()),
            measured: Mutex::new(HashMap::new()),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Holder>> {
        self.holders.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a connection; None when the tenant already has the most allowed.
    pub fn open(&self, holder: Holder) -> Option<u64> {
        let mut holders = self.lock();
        let open = holders.values().filter(|h| h.tenant == holder.tenant).count();
        if open >= self.max_per_tenant {
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        holders.insert(id, holder);
        Some(id)
    }

    pub fn set_program(&self, id: u64, program: String) {
        if let Some(h) = self.lock().get_mut(&id) {
            h.program = program;
        }
    }

    /// Whether holder `id` holds streams on a device other than `device`.
    pub fn holds_elsewhere(&self, id: u64, device: u32) -> bool {
        self.lock().get(&id).is_some_and(|h| h.held.iter().any(|(&d, &n)| d != device && n > 0))
    }

    /// Whether holder `id` holds streams on any device.
    pub fn holds_any(&self, id: u64) -> bool {
        self.lock().get(&id).is_some_and(|h| h.held.values().any(|n| *n > 0))
    }

    pub fn held(&self, id: u64, device: u32) -> u32 {
        self.lock().get(&id).and_then(|h| h.held.get(&device).copied()).unwrap_or(0)
    }

    pub fn add(&self, id: u64, device: u32, n: u32) {
        let epoch = self.epoch(device);
        if let Some(h) = self.lock().get_mut(&id) {
            let held = h.held.entry(device).or_insert(0);
            *held = held.saturating_add(n);
            h.reported.entry(device).or_insert(epoch);
        }
        self.touch();
    }

    /// The holder says it has `created` streams on `device`; returns how many of those its
    /// count (`Holder::created_on`) fell by are to be withheld until the device is measured
    /// again: they may still be there. Its falls since the last measurement withhold no
    /// more together than the most it counted as created since (`Holder::withhold`).
    ///
    /// With it, whether the report may have been counted twice until the device is measured
    /// again (`Holder::report`): a measurement since its last report counted the new streams
    /// outside the books too.
    pub fn set_created(&self, id: u64, device: u32, created: u32) -> (u32, bool) {
        let epoch = self.epoch(device);
        let mut holders = self.lock();
        let Some(h) = holders.get_mut(&id) else { return (0, false) };
        let before = h.created_on(device);
        h.created.insert(device, created);
        let twice = h.report(device, epoch, before);
        (h.withhold(device, epoch, before), twice)
    }

    /// A measurement of `device` was booked: what holders' falls withheld before it is in
    /// what it measured.
    pub fn measured(&self, device: u32) {
        let mut measured = self.measured.lock().unwrap_or_else(|e| e.into_inner());
        let epoch = measured.entry(device).or_insert(0);
        *epoch = epoch.wrapping_add(1);
    }

    /// What holder `h`, gone, may leave on `device` that its falls did not withhold yet
    /// since the device was last measured (`Holder::left_behind`).
    pub fn left_behind(&self, h: &Holder, device: u32) -> u32 {
        h.left_behind(device, self.epoch(device))
    }

    /// The count of `device`'s booked measurements.
    fn epoch(&self, device: u32) -> u64 {
        self.measured.lock().unwrap_or_else(|e| e.into_inner()).get(&device).copied().unwrap_or(0)
    }

    /// The holder said in its hello that it reports what it creates.
    pub fn set_reports_created(&self, id: u64) {
        if let Some(h) = self.lock().get_mut(&id) {
            h.reports_created = true;
        }
    }

    /// Streams granted to native holders on `device`, created or not.
    pub fn granted_on(&self, device: u32) -> u32 {
        self.lock().values().filter_map(|h| h.held.get(&device)).fold(0u32, |sum, n| sum.saturating_add(*n))
    }

    /// Streams native holders count as created on `device` (see `Holder::created_on`).
    pub fn created_on(&self, device: u32) -> u32 {
        self.lock().values().map(|h| h.created_on(device)).fold(0u32, u32::saturating_add)
    }

    /// Takes up to `n` streams off the holder's count; returns how many it held of them.
    /// Its capture counter falls with them, as if they were capture streams first: a
    /// release does not say which streams went, and a capture whose streams went back is
    /// no capture a claim can match (see `captures`). Fails closed: a claim refused for it
    /// leaves its streams counted as the device's untracked ones, never booked to nobody.
    pub fn remove(&self, id: u64, device: u32, n: u32) -> u32 {
        let n = self.lock().get_mut(&id).map_or(0, |h| {
            let taken = take_from(&mut h.held, device, n);
            if let Some(room) = h.capture_room.get_mut(&device) {
                *room = room.saturating_sub(taken);
            }
            taken
        });
        self.touch();
        n
    }

    /// Forgets a connection, returning what it held so the caller can give it back.
    pub fn close(&self, id: u64) -> Option<Holder> {
        let h = self.lock().remove(&id);
        self.touch();
        h
    }

    /// Tells the sessions of holders whose process `exited` says has exited to end, and
    /// returns them (id, pid). `exited` runs without the lock held, and not for a holder
    /// whose pid is unknown (0).
    pub fn end_exited(&self, exited: impl Fn(u32) -> bool) -> Vec<(u64, u32)> {
        let watched: Vec<_> = self
            .lock()
            .iter()
            .filter(|(_, h)| h.pid != 0)
            .map(|(&id, h)| (id, h.pid, std::sync::Arc::clone(&h.exited)))
            .collect();
        let mut ended = Vec::new();
        for (id, pid, tell) in watched {
            if exited(pid) {
                tell.notify_one();
                ended.push((id, pid));
            }
        }
        ended
    }

    /// Budget sessions open now.
    pub fn connections(&self) -> usize {
        self.lock().len()
    }

    pub fn accepts_declarations(&self) -> bool {
        self.started.elapsed() <= self.declare_grace
    }

    pub fn declare_grace(&self) -> Duration {
        self.declare_grace
    }

    /// Streams held natively per (device, tenant).
    pub fn totals(&self) -> BTreeMap<(u32, Tenant), u32> {
        let mut out = BTreeMap::new();
        for h in self.lock().values() {
            for (&d, &n) in &h.held {
                *out.entry((d, Tenant::clone(&h.tenant))).or_insert(0) += n;
            }
        }
        out
    }

    /// One row per (process, device) holding streams or events, for `status`; a tenant
    /// sees its own rows, an admin (`None`) every row.
    pub fn rows(&self, tenant: Option<&str>) -> Vec<pb::NativeHolder> {
        let mut rows: Vec<pb::NativeHolder> = self
            .lock()
            .values()
            .filter(|h| tenant.is_none_or(|t| h.tenant.as_ref() == t))
            .flat_map(|h| {
                let devices: std::collections::BTreeSet<u32> = h.held.keys().chain(h.events.keys()).copied().collect();
                devices.into_iter().map(move |device| pb::NativeHolder {
                    pid: h.pid,
                    tenant: h.tenant.to_string(),
                    program: h.program.clone(),
                    container: h.container.clone().unwrap_or_default(),
                    device,
                    streams: h.held.get(&device).copied().unwrap_or(0),
                    events: h.events.get(&device).copied().unwrap_or(0),
                    created: h.created_on(device),
                })
            })
            .collect();
        rows.sort_by_key(|r| (r.device, r.pid));
        rows
    }
}

/// Takes up to `n` off `map[device]`, dropping the entry at zero; returns what was taken.
fn take_from(map: &mut BTreeMap<u32, u32>, device: u32, n: u32) -> u32 {
    let Some(held) = map.get_mut(&device) else { return 0 };
    let taken = n.min(*held);
    *held -= taken;
    if *held == 0 {
        map.remove(&device);
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn holder(tenant: &str) -> Holder {
        Holder { program: "p".into(), ..Holder::new(7, Tenant::from(tenant), None, None) }
    }

    #[test]
    fn a_holder_gives_back_no_more_than_it_holds() {
        let n = Natives::new(4, Duration::from_secs(60), Duration::ZERO);
        let id = n.open(holder("a")).expect("open");
        n.add(id, 0, 5);
        assert_eq!(n.remove(id, 0, 3), 3);
        assert_eq!(n.remove(id, 0, 9), 2, "only what is left");
        assert_eq!(n.remove(id, 1, 1), 0, "nothing on another device");
        assert!(n.close(id).expect("known").held.is_empty());
        assert!(n.close(id).is_none());
    }

    #[test]
    fn events_are_counted_only_when_they_fit_and_given_back_no_more_than_held() {
        let n = Natives::new(4, Duration::from_secs(60), Duration::ZERO);
        let (a, a2, b) = (n.open(holder("a")).unwrap(), n.open(holder("a")).unwrap(), n.open(holder("b")).unwrap());
        let room = |limit: u32| move |on_device: u32, _| if on_device + 3 <= limit { Ok(()) } else { Err(on_device) };
        assert_eq!(n.add_events(a, 0, 3, room(5)), Ok(()));
        assert_eq!(n.add_events(b, 0, 3, room(5)), Err(3), "the table has 2 left");
        assert_eq!(n.add_events(a2, 0, 1, |_, of_tenant| if of_tenant == 3 { Ok(()) } else { Err(of_tenant) }), Ok(()));
        assert_eq!((n.device_events(0), n.tenant_events("a"), n.tenant_events("b")), (4, 4, 0));
        assert_eq!(n.remove_events(a, 0, 9), 3);
        assert_eq!(n.events_held(a, 0), 0);
        assert_eq!(n.rows(None).iter().map(|r| (r.events, r.streams)).collect::<Vec<_>>(), [(1, 0)]);
    }

    #[test]
    fn only_holders_whose_process_exited_are_told_to_end() {
        let n = Natives::new(4, Duration::from_secs(60), Duration::ZERO);
        let open = |pid| n.open(Holder::new(pid, Tenant::from("a"), None, None)).expect("open");
        let (gone, running, unknown) = (open(11), open(12), open(0));
        let exited = |of: u64| Arc::clone(&n.lock()[&of].exited);
        let (told, kept, never) = (exited(gone), exited(running), exited(unknown));
        let asked = std::sync::Mutex::new(Vec::new());
        let ended = n.end_exited(|pid| {
            asked.lock().unwrap().push(pid);
            pid == 11
        });
        assert_eq!(ended, [(gone, 11)]);
        assert!(!asked.lock().unwrap().contains(&0), "a pid of 0 names no process to ask about");
        let now = |notify: &Arc<tokio::sync::Notify>| {
            let waiting = notify.notified();
            tokio::pin!(waiting);
            waiting.as_mut().enable()
        };
        assert!(now(&told), "the exited process's session is told");
        assert!(!now(&kept) && !now(&never), "the others are not");
    }

    #[test]
    fn connections_are_bounded_per_tenant() {
        let n = Natives::new(2, Duration::from_secs(60), Duration::ZERO);
        assert!(n.open(holder("a")).is_some());
        assert!(n.open(holder("a")).is_some());
        assert!(n.open(holder("a")).is_none(), "a third connection of the same tenant");
        assert!(n.open(holder("b")).is_some(), "another tenant is not affected");
    }

    #[test]
    fn rows_show_a_tenant_only_its_own_holders() {
        let n = Natives::new(4, Duration::from_secs(60), Duration::ZERO);
        let a = n.open(holder("a")).expect("open");
        let b = n.open(holder("b")).expect("open");
        n.add(a, 0, 3);
        n.add(b, 0, 4);
        assert_eq!(n.rows(Some("a")).len(), 1);
        assert_eq!(n.rows(None).len(), 2);
        assert_eq!(n.totals().get(&(0, Tenant::from("b"))), Some(&4));
    }

    /// A holder that says 100, 0, 100, 0 ... has had at most 100 streams on the device:
    /// its falls withhold 100 until the device is measured again, not 100 each.
    #[test]
    fn falls_withhold_no_more_than_the_most_created_until_measured() {
        let n = Natives::new(4, Duration::from_secs(60), Duration::ZERO);
        let id = n.open(Holder { reports_created: true, ..holder("a") }).expect("open");
        n.add(id, 0, 100);
        assert_eq!(n.set_created(id, 0, 100).0, 0, "a rise withholds nothing");
        assert_eq!(n.set_created(id, 0, 40).0, 60);
        assert_eq!(n.set_created(id, 0, 0).0, 40);
        assert_eq!(n.set_created(id, 0, 100).0, 0);
        assert_eq!(n.set_created(id, 0, 0).0, 0, "100 are withheld already");
        n.measured(0);
        assert_eq!(n.set_created(id, 0, 100).0, 0);
        assert_eq!(n.set_created(id, 0, 30).0, 70, "a new measurement saw what the falls left");
        assert_eq!(n.set_created(id, 1, 0).0, 0, "nothing on another device");
        let h = n.close(id).expect("known");
        assert_eq!(n.left_behind(&h, 0), 30, "30 withheld of at most 100: all 30 it holds may remain");
        n.measured(0);
        assert_eq!(n.left_behind(&h, 0), 30);
    }

    /// Going away leaves behind no more than what its falls have not withheld yet.
    #[test]
    fn a_holder_that_toggled_its_count_leaves_nothing_more_behind_until_measured() {
        let n = Natives::new(4, Duration::from_secs(60), Duration::ZERO);
        let id = n.open(Holder { reports_created: true, ..holder("a") }).expect("open");
        n.add(id, 0, 100);
        n.set_created(id, 0, 100);
        assert_eq!(n.set_created(id, 0, 0).0, 100);
        n.set_created(id, 0, 100);
        let h = n.close(id).expect("known");
        assert_eq!(n.left_behind(&h, 0), 0, "its 100 are withheld already");
        n.measured(0);
        assert_eq!(n.left_behind(&h, 0), 100, "after a measurement, its 100 count again");
    }

    /// A report that raises the count after the device was measured may have been counted
    /// twice (outside the books too) until the next measurement; one with no measurement
    /// since the grant or the last report cannot have been.
    #[test]
    fn a_rise_reported_after_a_measurement_asks_for_another() {
        let n = Natives::new(4, Duration::ZERO, Duration::ZERO);
        let id = n.open(holder("a")).unwrap();
        n.set_reports_created(id);
        n.add(id, 0, 100);
        assert_eq!(n.set_created(id, 0, 50), (0, false), "nothing measured since the grant");
        n.measured(0);
        assert_eq!(n.set_created(id, 0, 80), (0, true), "measured while 30 were unreported");
        assert_eq!(n.set_created(id, 0, 90), (0, false), "not measured since that report");
        n.measured(0);
        assert_eq!(n.set_created(id, 0, 90), (0, false), "no rise");
        n.measured(1);
        assert_eq!(n.set_created(id, 0, 95), (0, false), "another device was measured, not this one");
    }
}
