//! Devices set and reset, and contexts made and destroyed (AscendCL's own, CUDA's primary
//! and green ones): the streams each of them makes or takes away, as the process's books
//! count them.

use super::{Process, Refused, lock};
use crate::books::Books;
use crate::wire::WireError;
use npud_proto::v1::{self as pb, budget_call::Call};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Books `made` streams where `admitted` were admitted: threads that made contexts on one
/// device at once each planned from the same books, and only one of them made the
/// device's own default stream. What was admitted and not made stays unused grant; what
/// was made beyond it is used all the same (the next ask covers it).
fn settle(books: &mut Books, device: u32, admitted: u32, made: u32) {
    if admitted > made {
        books.not_created(device, admitted - made);
    } else if made > admitted {
        books.granted(device, 0, made - admitted);
    }
}

impl Process {
    /// A context was made on `device` with aclrtCreateContext, `admitted` streams having
    /// been admitted for it ([`Process::context_adds`]).
    pub fn context_created(&self, ctx: usize, device: u32, admitted: u32) {
        let complete = {
            let mut books = lock(&self.books);
            let made = books.context_created(ctx, device);
            settle(&mut books, device, admitted, made);
            books.grant_used(device)
        };
        if complete {
            self.batch_complete(device);
        }
    }

    /// Learns once, with `sync_streams` (a vendor call), how many internal-sync streams each
    /// AscendCL context holds here (see [`Books::set_context_sync`]).
    pub fn learn_context_sync(&self, sync_streams: impl FnOnce() -> u32) {
        self.soc.call_once(|| {
            let n = sync_streams();
            lock(&self.books).set_context_sync(n);
        });
    }

    /// Streams an aclrtCreateContext on `device` makes (see [`Books::context_adds`]).
    pub fn context_adds(&self, device: u32) -> u32 {
        lock(&self.books).context_adds(device)
    }

    /// aclrtDestroyContext succeeded: the context's default stream, the streams left in it,
    /// and its graphs are gone (lock order: books, captures).
    pub fn context_destroyed(&self, ctx: usize) {
        self.streams_gone(|books| {
            let (device, streams) = books.context_destroyed(ctx)?;
            let (made, headroom) = lock(&self.captures).drop_context(device, ctx, false);
            books.unreserve(device, headroom);
            Some((device, streams + made))
        });
    }

    /// A CUDA primary context was retained.
    pub fn primary_retained(&self, device: u32, ctx: usize) {
        lock(&self.books).primary_retained(device, ctx);
    }

    /// Before the process's first context on `device`: a client slot there where npud
    /// limits the device's processes (`policy::slots`), waiting in its fair queue up to
    /// `NPUD_WAIT`. True when the process holds one now (or needs none).
    pub fn client_slot(&'static self, device: u32) -> Result<(), Refused> {
        if lock(&self.books).primary_context(device).is_some() || lock(&self.slots).contains(&device) {
            return Ok(());
        }
        // The welcome says whether npud limits any device's processes.
        let _ = self.with_conn(|_| Ok(()));
        if !self.client_slots.load(Ordering::Relaxed) || self.devices.is_unowned(device) {
            return Ok(());
        }
        let wait_ms = self.settings.wait.as_millis().min(u128::from(u32::MAX)) as u32;
        let ask = pb::AcquireBudgetRequest {
            device,
            count: 1,
            wait_ms,
            identity: self.devices.identity(device),
            client_slot: true,
            ..Default::default()
        };
        match self.with_conn(|c| c.call(Call::Acquire(ask), self.settings.wait)) {
            Ok(_) => {
                lock(&self.slots).insert(device);
                Ok(())
            }
            Err(WireError::Unreachable(e)) => self.unreachable(&WireError::Unreachable(e)),
            Err(WireError::Refused { message, .. }) => Err(Refused::because(message)),
        }
    }

    /// The process's last context on `device` is gone (or its first never came): its
    /// client slot goes back.
    pub fn client_slot_done(&'static self, device: u32) {
        if !lock(&self.slots).remove(&device) {
            return;
        }
        let identity = self.devices.identity(device);
        let release = pb::ReleaseBudgetRequest { device, count: 0, identity, created: None, client_slot: true };
        let _ = self.with_conn(|c| c.call(Call::Release(release), Duration::ZERO));
    }

    /// A primary context was released: its last release destroys it, and its streams.
    pub fn primary_released(&'static self, device: u32) {
        let last = lock(&self.books).primary_released(device);
        if let Some(ctx) = last {
            self.primary_gone(device, ctx);
            self.client_slot_done(device);
        }
    }

    /// A primary context was reset (cudaDeviceReset): its streams are gone.
    pub fn primary_reset(&'static self, device: u32) {
        let ctx = lock(&self.books).primary_context(device);
        if let Some(ctx) = ctx {
            self.primary_gone(device, ctx);
        }
    }

    /// The primary context `ctx` of `device` lost its streams: they and every unused grant
    /// on the device go back at once, as after AscendCL's last device reset.
    fn primary_gone(&'static self, device: u32, ctx: usize) {
        let back = {
            let mut books = lock(&self.books);
            if let Some((d, n)) = books.context_streams_gone(ctx) {
                books.freed(d, n);
            }
            books.release_unused(device)
        };
        self.give_back(device, back);
    }

    /// A CUDA context was destroyed, and the streams made in it with it.
    pub fn context_streams_gone(&self, ctx: usize) {
        self.streams_gone(|books| books.context_streams_gone(ctx));
    }

    pub fn context_device(&self, ctx: usize) -> Option<u32> {
        lock(&self.books).context_device(ctx)
    }

    /// A CUDA green context was made on `device`, or (None) destroyed; its streams stay
    /// booked until each is destroyed.
    pub fn set_green(&self, ctx: usize, device: Option<u32>) {
        lock(&self.books).set_green(ctx, device);
    }

    pub fn green_device(&self, ctx: usize) -> Option<u32> {
        lock(&self.books).green_device(ctx)
    }

    /// When the next aclrtSetDevice on `device` makes its default context (the device is
    /// not set yet), the streams it makes (see [`Books::set_adds`]): the default context's
    /// internal-sync stream on the inference parts, and the device's own default stream
    /// unless a context made with aclrtCreateContext holds the device. None when it is set.
    pub fn first_set(&self, device: u32) -> Option<u32> {
        let books = lock(&self.books);
        (books.device(device).set_count == 0).then(|| books.set_adds(device))
    }

    /// aclrtSetDevice succeeded, `admitted` streams having been admitted for it
    /// ([`Process::first_set`]). Threads that set the device at once may each have asked:
    /// only the first set made the context, so the others' stream is not on the device,
    /// and its budget stays unused grant.
    pub fn device_set(&self, device: u32, admitted: u32, default_ctx: Option<usize>) {
        let mut books = lock(&self.books);
        let (first, made) = books.set_device(device);
        if first && let Some(ctx) = default_ctx {
            books.set_default_context(device, ctx);
        }
        settle(&mut books, device, admitted, if first { made } else { 0 });
    }

    pub fn device_reset(&'static self, device: u32, force: bool) {
        let (back, last) = {
            let mut books = lock(&self.books);
            if force || books.device(device).set_count == 1 {
                // The last reset frees the default context's graphs too (lock order: books,
                // captures).
                let ctx = books.device(device).default_ctx;
                let (made, headroom) = lock(&self.captures).drop_context(device, ctx, true);
                books.unreserve(device, headroom);
                books.freed(device, made);
            }
            let back = books.reset_device(device, force);
            (back, books.device(device).set_count == 0)
        };
        let events = if last { lock(&self.events).reset(device) } else { 0 };
        if (back > 0 || events > 0) && !self.devices.is_unowned(device) {
            let mut resets = lock(&self.resets);
            let pending = resets.entry(device).or_insert((0, 0));
            *pending = (pending.0.saturating_add(back), pending.1.saturating_add(events));
            drop(resets);
            self.destroying(device);
        }
    }
}
