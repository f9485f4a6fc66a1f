//! Sessions and the handles they own. One table, one lock, held only for map operations:
//! ownership checks and session membership change together, so a reclaim can never miss a
//! handle that is being added.

pub mod handle;
mod tables;
#[cfg(test)]
mod tests;

pub use tables::{EventEntry, Reclaim, SessionEntry, SessionView, StreamEntry};
use tables::{Inner, unsubscribe_count};

use crate::backend::RawStream;
use crate::error::{NpudError, NpudResult, Reason};
use crate::registry::handle::{Kind, Minter};
use crate::types::Caller;
use crate::types::Tenant;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub struct Registry {
    inner: Mutex<Inner>,
    minter: Arc<Minter>,
}

impl Registry {
    pub fn new(minter: Arc<Minter>) -> Self {
        Self { inner: Mutex::new(Inner::default()), minter }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn minter(&self) -> &Minter {
        &self.minter
    }

    /// Opens a session, or attaches to the tenant's live session of that name.
    pub fn open(
        &self,
        caller: &Caller,
        name: Option<String>,
        lease: Duration,
        max_sessions: u32,
    ) -> NpudResult<(u64, bool)> {
        let mut inner = self.lock();
        let now = Instant::now();
        if let Some(name) = &name
            && let Some(&id) = inner.names.get(&(Arc::clone(&caller.tenant), name.clone()))
            && let Some(s) = inner.sessions.get_mut(&id)
        {
            s.lease = lease;
            s.expires = now + lease;
            return Ok((id, true));
        }
        let count = inner.per_tenant.get(&caller.tenant).copied().unwrap_or(0);
        if count >= max_sessions {
            return Err(NpudError::new(
                Reason::TooManySessions,
                format!("tenant {} already has {count} sessions, the most allowed", caller.tenant),
            )
            .with_figures(vec![("sessions", i64::from(count)), ("max_sessions", i64::from(max_sessions))]));
        }
        let id = self.minter.mint(Kind::Session);
        if let Some(name) = &name {
            inner.names.insert((Arc::clone(&caller.tenant), name.clone()), id);
        }
        *inner.per_tenant.entry(Arc::clone(&caller.tenant)).or_insert(0) += 1;
        inner.sessions.insert(
            id,
            SessionEntry {
                id,
                tenant: Arc::clone(&caller.tenant),
                name,
                lease,
                expires: now + lease,
                streams: HashSet::new(),
                events: HashSet::new(),
                report_streams: 0,
            },
        );
        Ok((id, false))
    }

    /// Checks that the caller owns a live session and extends its lease (any call is a sign
    /// of life). Returns the lease.
    pub fn touch(&self, caller: &Caller, session: u64) -> NpudResult<Duration> {
        self.minter.check(session, Kind::Session)?;
        let mut inner = self.lock();
        match inner.sessions.get_mut(&session) {
            Some(s) if s.tenant == caller.tenant => {
                s.expires = Instant::now() + s.lease;
                Ok(s.lease)
            }
            _ => Err(NpudError::unknown_session()),
        }
    }

    pub fn find_named(&self, caller: &Caller, name: &str) -> Option<u64> {
        self.lock().names.get(&(Arc::clone(&caller.tenant), name.to_string())).copied()
    }

    /// Counts a report stream opening on `session`, unless it has `max` open already.
    pub fn open_report_stream(&self, session: u64, max: u32) -> NpudResult<()> {
        let mut inner = self.lock();
        let s = inner.sessions.get_mut(&session).ok_or_else(NpudError::unknown_session)?;
        if s.report_streams >= max {
            return Err(NpudError::new(
                Reason::TooManyReportStreams,
                format!("session {session} has {} report streams open, the most it may", s.report_streams),
            ));
        }
        s.report_streams += 1;
        Ok(())
    }

    pub fn set_report_stream(&self, session: u64, open: bool) {
        let mut inner = self.lock();
        if let Some(s) = inner.sessions.get_mut(&session) {
            if open {
                s.report_streams += 1;
            } else {
                s.report_streams = s.report_streams.saturating_sub(1);
                s.expires = Instant::now() + s.lease;
            }
        }
    }

    /// Registers new streams under a session; fails (registering none) if it is gone, in
    /// which case the caller must give the streams back.
    pub fn add_streams(&self, session: u64, entries: Vec<StreamEntry>) -> NpudResult<Vec<u64>> {
        let mut inner = self.lock();
        if !inner.sessions.contains_key(&session) {
            return Err(NpudError::new(
                Reason::SessionClosed,
                "the session was closed while the streams were being created",
            ));
        }
        let mut handles = Vec::with_capacity(entries.len());
        for e in entries {
            let h = self.minter.mint(Kind::Stream);
            inner.insert_stream(h, e);
            handles.push(h);
        }
        if let Some(s) = inner.sessions.get_mut(&session) {
            s.streams.extend(handles.iter().copied());
        }
        Ok(handles)
    }

    pub fn add_event(&self, session: u64, entry: EventEntry) -> NpudResult<u64> {
        let mut inner = self.lock();
        let Some(s) = inner.sessions.get_mut(&session) else {
            return Err(NpudError::new(
                Reason::SessionClosed,
                "the session was closed while the event was being created",
            ));
        };
        let h = self.minter.mint(Kind::Event);
        s.events.insert(h);
        inner.insert_event(h, entry);
        Ok(h)
    }

    pub fn stream(&self, caller: &Caller, handle: u64) -> NpudResult<StreamEntry> {
        self.minter.check(handle, Kind::Stream)?;
        match self.lock().streams.get(&handle) {
            Some(e) if e.tenant == caller.tenant => Ok(e.clone()),
            _ => Err(NpudError::unknown_handle(handle)),
        }
    }

    pub fn event(&self, caller: &Caller, handle: u64) -> NpudResult<EventEntry> {
        self.minter.check(handle, Kind::Event)?;
        match self.lock().events.get(&handle) {
            Some(e) if e.tenant == caller.tenant => Ok(e.clone()),
            _ => Err(NpudError::unknown_handle(handle)),
        }
    }

    /// Routes a stream's callbacks to (session, thread); a stream has one subscriber.
    pub fn subscribe(&self, caller: &Caller, handle: u64, session: u64, thread: u64) -> NpudResult<()> {
        self.minter.check(handle, Kind::Stream)?;
        let mut guard = self.lock();
        let inner = &mut *guard;
        match inner.streams.get_mut(&handle) {
            Some(e) if e.tenant == caller.tenant => match e.subscriber {
                Some((_, t)) => Err(NpudError::new(
                    Reason::StreamAlreadySubscribed,
                    format!("stream {handle} is already subscribed by thread {t}"),
                )),
                None => {
                    e.subscriber = Some((session, thread));
                    *inner.subscriptions.entry((session, thread)).or_insert(0) += 1;
                    Ok(())
                }
            },
            _ => Err(NpudError::unknown_handle(handle)),
        }
    }

    pub fn unsubscribe(&self, caller: &Caller, handle: u64, thread: u64) -> NpudResult<()> {
        self.minter.check(handle, Kind::Stream)?;
        let mut guard = self.lock();
        let inner = &mut *guard;
        match inner.streams.get_mut(&handle) {
            Some(e) if e.tenant == caller.tenant => match e.subscriber {
                Some(sub @ (_, t)) if t == thread => {
                    e.subscriber = None;
                    unsubscribe_count(&mut inner.subscriptions, sub);
                    Ok(())
                }
                _ => Err(NpudError::new(
                    Reason::StreamNotSubscribed,
                    format!("stream {handle} is not subscribed by thread {thread}"),
                )),
            },
            _ => Err(NpudError::unknown_handle(handle)),
        }
    }

    /// Removes streams, all or none: one bad handle leaves every stream in place.
    pub fn remove_streams(&self, caller: &Caller, handles: &[u64]) -> NpudResult<Vec<(u64, StreamEntry)>> {
        for &h in handles {
            self.minter.check(h, Kind::Stream)?;
        }
        let mut inner = self.lock();
        let unique: HashSet<u64> = handles.iter().copied().collect();
        if unique.len() != handles.len() {
            return Err(NpudError::new(Reason::InvalidArgumentOther, "a handle is listed twice"));
        }
        for &h in handles {
            match inner.streams.get(&h) {
                Some(e) if e.tenant == caller.tenant => {}
                _ => return Err(NpudError::unknown_handle(h)),
            }
        }
        let mut out = Vec::with_capacity(handles.len());
        for &h in handles {
            if let Some(e) = inner.detach_stream(h) {
                if let Some(s) = inner.sessions.get_mut(&e.session) {
                    s.streams.remove(&h);
                }
                out.push((h, e));
            }
        }
        Ok(out)
    }

    pub fn remove_event(&self, caller: &Caller, handle: u64) -> NpudResult<EventEntry> {
        self.minter.check(handle, Kind::Event)?;
        let mut inner = self.lock();
        match inner.events.get(&handle) {
            Some(e) if e.tenant == caller.tenant => {}
            _ => return Err(NpudError::unknown_handle(handle)),
        }
        let e = inner.detach_event(handle).ok_or_else(|| NpudError::unknown_handle(handle))?;
        if let Some(s) = inner.sessions.get_mut(&e.session) {
            s.events.remove(&handle);
        }
        Ok(e)
    }

    /// Forgets a session and hands back everything it held.
    pub fn take_session(&self, session: u64) -> Option<Reclaim> {
        let mut inner = self.lock();
        let s = inner.sessions.remove(&session)?;
        if let Some(name) = &s.name {
            inner.names.remove(&(Arc::clone(&s.tenant), name.clone()));
        }
        crate::types::count_down(&mut inner.per_tenant, &s.tenant, 1);
        let streams: Vec<StreamEntry> = s.streams.iter().filter_map(|h| inner.detach_stream(*h)).collect();
        let events: Vec<EventEntry> = s.events.iter().filter_map(|h| inner.detach_event(*h)).collect();
        Some(Reclaim { tenant: Some(s.tenant), streams, events })
    }

    /// The caller's session by id, checked for ownership (admins may name any session).
    pub fn owned_session(&self, caller: &Caller, session: u64) -> NpudResult<u64> {
        self.minter.check(session, Kind::Session)?;
        match self.lock().sessions.get(&session) {
            Some(s) if s.tenant == caller.tenant || caller.admin => Ok(session),
            _ => Err(NpudError::unknown_session()),
        }
    }

    /// Sessions whose lease lapsed and that have no open report stream.
    pub fn expired(&self, now: Instant) -> Vec<u64> {
        self.lock().sessions.values().filter(|s| s.report_streams == 0 && s.expires <= now).map(|s| s.id).collect()
    }

    pub fn all_sessions(&self) -> Vec<u64> {
        self.lock().sessions.keys().copied().collect()
    }

    pub fn sessions(&self, tenant: Option<&str>) -> Vec<SessionView> {
        let now = Instant::now();
        let inner = self.lock();
        let mut out: Vec<SessionView> = inner
            .sessions
            .values()
            .filter(|s| tenant.is_none_or(|t| s.tenant.as_ref() == t))
            .map(|s| SessionView {
                id: s.id,
                tenant: Arc::clone(&s.tenant),
                name: s.name.clone(),
                streams: s.streams.len() as u32,
                events: s.events.len() as u32,
                lease_remaining: if s.report_streams > 0 {
                    Duration::ZERO
                } else {
                    s.expires.saturating_duration_since(now)
                },
                report_stream_open: s.report_streams > 0,
            })
            .collect();
        out.sort_by_key(|s| s.id);
        out
    }

    pub fn streams_of(&self, tenant: &str) -> Vec<(u64, StreamEntry)> {
        let inner = self.lock();
        let Some(index) = inner.by_tenant.get(tenant) else { return Vec::new() };
        let mut out: Vec<_> =
            index.streams.iter().filter_map(|h| inner.streams.get(h).map(|e| (*h, e.clone()))).collect();
        out.sort_by_key(|(h, _)| *h);
        out
    }

    pub fn events_of(&self, tenant: &str) -> Vec<(u64, EventEntry)> {
        let inner = self.lock();
        let Some(index) = inner.by_tenant.get(tenant) else { return Vec::new() };
        let mut out: Vec<_> =
            index.events.iter().filter_map(|h| inner.events.get(h).map(|e| (*h, e.clone()))).collect();
        out.sort_by_key(|(h, _)| *h);
        out
    }

    /// Sessions and events per tenant, for status.
    pub fn tenant_counts(&self) -> HashMap<Tenant, (u32, HashMap<u32, u32>)> {
        let inner = self.lock();
        let mut out: HashMap<Tenant, (u32, HashMap<u32, u32>)> = HashMap::new();
        for (t, n) in &inner.per_tenant {
            out.entry(Arc::clone(t)).or_default().0 = *n;
        }
        for e in inner.events.values() {
            *out.entry(Arc::clone(&e.tenant)).or_default().1.entry(e.device).or_insert(0) += 1;
        }
        out
    }

    /// Live streams a session made on a device (for its device sync).
    pub fn session_streams_on(&self, session: u64, device: u32) -> Vec<RawStream> {
        self.lock().streams.values().filter(|e| e.session == session && e.device == device).map(|e| e.raw).collect()
    }

    /// Whether `thread` of `session` is subscribed to any stream (process_report needs it).
    pub fn thread_subscribed(&self, session: u64, thread: u64) -> bool {
        self.lock().subscriptions.contains_key(&(session, thread))
    }

    /// Daemon streams on `device`, all tenants.
    pub fn device_streams(&self, device: u32) -> u32 {
        self.lock().streams.values().filter(|e| e.device == device).count() as u32
    }

    /// Daemon events on `device`, all tenants.
    pub fn device_events(&self, device: u32) -> u32 {
        self.lock().events.values().filter(|e| e.device == device).count() as u32
    }

    pub fn events_held(&self, tenant: &str) -> u32 {
        self.lock().by_tenant.get(tenant).map_or(0, |t| t.events.len() as u32)
    }

    pub fn stream_by_raw(&self, device: u32, raw: RawStream) -> Option<(u64, StreamEntry)> {
        let inner = self.lock();
        let h = *inner.by_raw.get(&(device, raw))?;
        inner.streams.get(&h).map(|e| (h, e.clone()))
    }

    /// Every registered stream (for consistency checks).
    pub fn all_streams(&self) -> Vec<(u64, StreamEntry)> {
        self.lock().streams.iter().map(|(h, e)| (*h, e.clone())).collect()
    }

    /// Fault injection: panics while holding the registry lock, which poisons it. Proves
    /// that a panicking handler takes nothing else down.
    pub fn panic_while_locked(&self) {
        let _held = self.lock();
        panic!("injected fault: a request handler panicked while holding the registry lock");
    }

    pub fn totals(&self) -> (usize, usize, usize) {
        let inner = self.lock();
        (inner.sessions.len(), inner.streams.len(), inner.events.len())
    }
}
