//! The streams a call reaches without creating one: the NULL stream (0) and
//! `CU_STREAM_LEGACY` name the current context's legacy default stream,
//! `CU_STREAM_PER_THREAD` the calling thread's default stream in it. Each is made on first
//! use and takes nothing from the device's budget (`SimDevice::builtin_stream`).
//!
//! The legacy stream orders itself against the context's blocking streams (those made
//! without `CU_STREAM_NON_BLOCKING`): the seed's `CU_STREAM_NON_BLOCKING` text ("may run
//! concurrently with work in stream 0 (the NULL stream), and ... should perform no
//! implicit synchronization with stream 0") and its `cuStreamWaitEvent` ("If hStream is 0
//! (the NULL stream) any future work submitted in any stream will wait for hEvent").
//! Work issued to the legacy stream waits for what the blocking streams had; work issued to
//! a blocking stream (a per-thread default stream included) waits for what the legacy
//! stream had. Synchronizing or querying the legacy stream therefore covers the blocking
//! streams' earlier work too.

use crate::*;

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`, the driver's handles for the two kinds.
pub(crate) const LEGACY: usize = 0x1;
pub(crate) const PER_THREAD: usize = 0x2;

/// What a default stream is to its context: the legacy one, or a thread's.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Legacy,
    PerThread(u64),
}

fn blocking(inner: &Inner, s: &usize) -> bool {
    inner.streams.get(s).is_some_and(|(_, _, flags, _)| flags & NON_BLOCKING == 0)
}

impl Rt {
    /// The stream handle a call naming `s` reaches: `s` itself, or the current context's
    /// default stream of the kind `s` names (made now if it is the first use).
    pub(crate) fn resolve(&self, s: usize) -> Result<usize, CuResult> {
        let kind = match s {
            0 | LEGACY => Kind::Legacy,
            // SAFETY: pthread_self has no preconditions and cannot fail.
            PER_THREAD => Kind::PerThread(unsafe { libc::pthread_self() } as u64),
            _ => return Ok(s),
        };
        let ctx = CURRENT.with(std::cell::Cell::get);
        let device = self.device_of_ctx(ctx).ok_or(INVALID_CONTEXT)?;
        if let Some(h) = self.lock().defaults.get(&(ctx, kind)) {
            return Ok(*h);
        }
        // Made before `inner` is locked: the device's lock is taken before it, never after.
        let id = self.devices[device as usize].builtin_stream();
        let mut inner = self.lock();
        if let Some(h) = inner.defaults.get(&(ctx, kind)).copied() {
            // Another thread made it meanwhile: the one it made is the stream.
            drop(inner);
            let _ = self.devices[device as usize].destroy_stream(id);
            return Ok(h);
        }
        let h = Self::mint(&mut inner);
        inner.streams.insert(h, (device, id, 0, LEAST_PRIORITY));
        inner.defaults.insert((ctx, kind), h);
        Ok(h)
    }

    /// The stream work named for `s` goes to, ordered after what it must wait for: for the
    /// legacy stream, every blocking stream of its context; for a blocking stream, the
    /// context's legacy stream.
    pub(crate) fn issue_to(&self, s: usize) -> Result<(&Arc<SimDevice>, StreamId), CuResult> {
        let h = self.resolve(s)?;
        let (dev, id) = self.stream(h)?;
        let after: Vec<StreamId> = {
            let inner = self.lock();
            let sid = |h: &usize| inner.streams.get(h).map(|(_, id, ..)| *id);
            let own = inner.defaults.iter().find(|(_, d)| **d == h).map(|(key, _)| *key);
            match own {
                Some((ctx, Kind::Legacy)) => {
                    let made = inner.stream_ctx.iter().filter(|(s, c)| **c == ctx && blocking(&inner, s));
                    let threads = inner.defaults.iter().filter(|((c, k), _)| *c == ctx && *k != Kind::Legacy);
                    made.map(|(s, _)| s).chain(threads.map(|(_, s)| s)).filter_map(sid).collect()
                }
                Some((ctx, Kind::PerThread(_))) => {
                    inner.defaults.get(&(ctx, Kind::Legacy)).and_then(sid).into_iter().collect()
                }
                None => match inner.stream_ctx.get(&h) {
                    Some(ctx) if blocking(&inner, &h) => {
                        inner.defaults.get(&(*ctx, Kind::Legacy)).and_then(sid).into_iter().collect()
                    }
                    _ => Vec::new(),
                },
            }
        };
        for a in after {
            dev.order_after(id, a).map_err(sim)?;
        }
        Ok((dev, id))
    }

    /// The stream a synchronize or query of `s` waits for: the legacy stream once ordered
    /// after the blocking streams' work, any other stream as it is.
    pub(crate) fn settled(&self, s: usize) -> Result<(&Arc<SimDevice>, StreamId), CuResult> {
        let h = self.resolve(s)?;
        let legacy = self.lock().defaults.iter().any(|((_, k), d)| *d == h && *k == Kind::Legacy);
        if legacy { self.issue_to(h) } else { self.stream(h) }
    }

    /// Frees a context's default streams with it (cuCtxDestroy); their work runs out first.
    pub(crate) fn drop_defaults(&self, ctx: usize) {
        let gone: Vec<(u32, StreamId)> = {
            let mut inner = self.lock();
            let handles: Vec<usize> = inner.defaults.iter().filter(|((c, _), _)| *c == ctx).map(|(_, h)| *h).collect();
            inner.defaults.retain(|(c, _), _| *c != ctx);
            handles.iter().filter_map(|h| inner.streams.remove(h)).map(|(d, id, ..)| (d, id)).collect()
        };
        for (device, id) in gone {
            let _ = self.devices[device as usize].destroy_stream(id);
        }
    }
}
