//! The state the backend shares with the driver's host callbacks: the library, each
//! device's primary context while npud's clients use the device, and the books of events
//! and failed streams.
//!
//! A context costs device memory (527 MiB of an H100's HBM, docs/hardware.md), and on a
//! GPU in EXCLUSIVE_PROCESS mode it keeps every other process off. So npud retains a
//! device's primary context when a gRPC client first makes a stream or event there, and
//! releases it when the last of them goes: for interposed processes it keeps books only.
//! Every call that needs the context holds it (`on` returns a read guard) so that a release
//! (which takes it for writing) never pulls it from under a call.

use super::ffi::{Cuda, Lib, LoadError};
use super::result::{check, no_device};
use crate::backend::{BackendResult, RawEvent, RawStream, Report};
use npud_proto::codes::cuda::NOT_READY;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub(super) struct EventMeta {
    pub(super) timing: bool,
    pub(super) recorded: bool,
}

#[derive(Default)]
pub(super) struct Books {
    pub(super) events: HashMap<RawEvent, EventMeta>,
    pub(super) failed: HashSet<RawStream>,
}

/// A device's retained primary context and the spin kernel loaded into it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ctx {
    pub(super) ctx: usize,
    pub(super) spin: usize,
}

pub(super) struct Shared {
    pub(super) lib: Lib,
    /// Each device's primary context while npud's clients use it.
    pub(super) contexts: Vec<RwLock<Option<Ctx>>>,
    /// What each device is (`devices`).
    pub(super) devices: Vec<super::devices::Device>,
    pub(super) books: Mutex<Books>,
    pub(super) sink: crate::backend::SinkSlot,
    pub(super) callbacks: crate::backend::CallbackGate,
    pub(super) streams: Vec<AtomicU32>,
    /// npud's events per device: with its streams, what keeps the context open.
    pub(super) events: Vec<AtomicU32>,
    pub(super) creations: Vec<AtomicU64>,
}

/// A device's context held open and current on this thread for one call.
pub(super) type OnDevice<'a> = RwLockReadGuard<'a, Option<Ctx>>;

impl Shared {
    pub(super) fn books(&self) -> MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the device's primary context current on this thread, retaining it first if
    /// npud holds none there; refused on a device npud keeps books for only.
    pub(super) fn on(&self, device: u32) -> BackendResult<OnDevice<'_>> {
        let slot = self.contexts.get(device as usize).ok_or_else(|| no_device(device))?;
        loop {
            let held = slot.read().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = *held {
                check(self.lib.ctx_set_current(c.ctx))?;
                return Ok(held);
            }
            drop(held);
            let mut open = slot.write().unwrap_or_else(|e| e.into_inner());
            if open.is_none() {
                *open = Some(self.retain(device)?);
            }
        }
    }

    /// Retains `device`'s primary context and loads the spin kernel into it.
    fn retain(&self, device: u32) -> BackendResult<Ctx> {
        let d = self.devices.get(device as usize).ok_or_else(|| no_device(device))?;
        let Some(handle) = d.handle else {
            let why = d.books_only.clone().unwrap_or_else(|| "npud keeps books only there".into());
            return Err(crate::backend::BackendError {
                kind: crate::backend::ErrorKind::Unsupported,
                native_code: 0,
                message: format!("device {device}: {why}"),
            });
        };
        let mut ctx = 0usize;
        check(self.lib.primary_ctx_retain(&mut ctx, handle))?;
        let loaded = check(self.lib.ctx_set_current(ctx)).and_then(|()| {
            super::spin::load(&self.lib).map_err(|m| crate::backend::BackendError {
                kind: crate::backend::ErrorKind::Unsupported,
                native_code: 0,
                message: m,
            })
        });
        match loaded {
            Ok(spin) => {
                tracing::debug!(device, "a client uses the device: its context is open");
                Ok(Ctx { ctx, spin })
            }
            Err(e) => {
                let _ = self.lib.primary_ctx_release(handle);
                Err(e)
            }
        }
    }

    /// Releases `device`'s context once npud holds no stream and no event there.
    pub(super) fn release_if_idle(&self, device: u32) {
        let idle = |s: &Shared| {
            s.streams.get(device as usize).is_some_and(|n| n.load(Ordering::Relaxed) == 0)
                && s.events.get(device as usize).is_some_and(|n| n.load(Ordering::Relaxed) == 0)
        };
        let Some(slot) = self.contexts.get(device as usize) else { return };
        if !idle(self) {
            return;
        }
        let mut open = slot.write().unwrap_or_else(|e| e.into_inner());
        if !idle(self) {
            return;
        }
        if let (Some(_), Some(handle)) = (open.take(), self.devices.get(device as usize).and_then(|d| d.handle)) {
            let _ = self.lib.primary_ctx_release(handle);
            tracing::debug!(device, "no client uses the device: its context is released");
        }
    }

    /// Whether npud holds `device`'s context now.
    pub(super) fn context_open(&self, device: u32) -> bool {
        self.contexts.get(device as usize).is_some_and(|s| s.read().unwrap_or_else(|e| e.into_inner()).is_some())
    }

    pub(super) fn emit(&self, report: Report) {
        self.sink.emit(report);
    }

    /// Polls `query` until it stops answering NOT_READY (or nobody waits any more).
    pub(super) fn poll(
        &self,
        abandoned: &std::sync::atomic::AtomicBool,
        query: impl Fn() -> Result<u32, LoadError>,
    ) -> BackendResult<()> {
        let mut pause = Duration::from_micros(20);
        loop {
            match query() {
                Ok(NOT_READY) if !abandoned.load(Ordering::Relaxed) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(2));
                }
                rc => return check(rc),
            }
        }
    }
}
