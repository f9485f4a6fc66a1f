//! The state the backend shares with the driver's host callbacks: the library, one primary
//! context per device, and the books of events and failed streams.

use super::ffi::{Cuda, Lib, LoadError};
use super::result::{check, no_device};
use crate::backend::{BackendResult, RawEvent, RawStream, Report};
use npud_proto::codes::cuda::NOT_READY;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
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

pub(super) struct Shared {
    pub(super) lib: Lib,
    pub(super) contexts: Vec<usize>,
    /// Each device's spin kernel (delay work), loaded at start-up.
    pub(super) spin: Vec<usize>,
    pub(super) books: Mutex<Books>,
    pub(super) sink: crate::backend::SinkSlot,
    pub(super) callbacks: crate::backend::CallbackGate,
    pub(super) streams: Vec<AtomicU32>,
    pub(super) creations: Vec<AtomicU64>,
}

impl Shared {
    pub(super) fn books(&self) -> MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the device's primary context current on this thread.
    pub(super) fn on(&self, device: u32) -> BackendResult<()> {
        let ctx = *self.contexts.get(device as usize).ok_or_else(|| no_device(device))?;
        check(self.lib.ctx_set_current(ctx))
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
