//! Contexts: made with aclrtCreateContext or by the first aclrtSetDevice (the device's
//! default context), each holding a default stream; destroyed, reset, made current.

use super::{CONTEXT_NULL, CURRENT, INVALID_PARAM, Inner, Rt, release_thread, stream_going};
use crate::{AclError, Handle};
use npu_sim::StreamId;
use std::cell::Cell;

impl Rt {
    /// aclrtCreateContext: a context with a default stream of its own.
    pub fn create_context(&self, device: i32) -> Result<Handle, AclError> {
        let _sets = self.lock_sets();
        self.new_context(device, false)
    }

    /// Makes a context on `device` (`sets` held). A device holds a default stream of its
    /// own while any context of the process is on it, made with the first: the default
    /// context aclrtSetDevice makes uses it as its default stream, and every context made
    /// with aclrtCreateContext has one more. So a process that never set the device pays
    /// two streams for its first aclrtCreateContext (the vendor's aclrtCreateContext page:
    /// "the Device's bound default Stream + the Context's streams"; in the open runtime,
    /// `ContextCreate` retains the device, whose first retain makes its primary stream),
    /// and an aclrtSetDevice after it pays none. On the inference parts every context,
    /// the default one included, holds one more stream, for internal synchronisation.
    fn new_context(&self, device: i32, default: bool) -> Result<Handle, AclError> {
        let dev = self.device(device)?;
        let retained = self.lock().retains.get(&dev.id()).copied().unwrap_or(0);
        let streams = u32::from(retained == 0) + u32::from(!default) + self.context_sync;
        self.take_shared(dev.id(), streams)?;
        for made in 0..streams {
            if let Err(e) = dev.create_context() {
                (0..made).for_each(|_| dev.destroy_context());
                self.give_shared(dev.id(), streams);
                return Err(e.code);
            }
        }
        // The streams tasks run on; their slots are the counts just taken. Made before
        // `inner` is locked: the device's lock is taken before it, never after.
        let device_default = (retained == 0).then(|| dev.builtin_stream());
        let own_default = (!default).then(|| dev.builtin_stream());
        let mut inner = self.lock();
        let h = Self::mint(&mut inner);
        inner.contexts.insert(h, dev.id());
        *inner.retains.entry(dev.id()).or_default() += 1;
        let mut made = Vec::with_capacity(2);
        if let Some(id) = device_default {
            let s = Self::register_default(&mut inner, dev.id(), id);
            inner.device_default.insert(dev.id(), s);
            made.push(s);
        }
        if let Some(id) = own_default {
            let s = Self::register_default(&mut inner, dev.id(), id);
            inner.context_default.insert(h, s);
            made.push(s);
        }
        drop(inner);
        made.into_iter().for_each(|s| crate::stream_state::notify(s, crate::stream_state::CREATE_POST));
        Ok(h as Handle)
    }

    fn register_default(inner: &mut Inner, device: u32, id: StreamId) -> usize {
        let h = Self::mint(inner);
        inner.streams.insert(h, (device, id));
        inner.by_sim.insert((device, id), h);
        h
    }

    /// Frees a default stream with its context; its work runs out first, as a reset
    /// waits for the tasks of the streams it frees. Its slot goes with the context's count.
    fn drop_default(&self, h: Option<usize>) {
        let Some(h) = h else { return };
        stream_going(h);
        let found = {
            let mut inner = self.lock();
            let found = inner.streams.remove(&h);
            if let Some(key) = found {
                inner.by_sim.remove(&key);
            }
            if let Some(thread) = inner.subscribed.remove(&h) {
                release_thread(&mut inner, thread);
            }
            found
        };
        if let Some((device, id)) = found {
            let _ = self.devices[device as usize].destroy_stream(id);
        }
    }

    /// aclrtDestroyContext: only a context made with aclrtCreateContext (the runtime
    /// refuses the default one: "Primary context cannot be destroyed explicitly").
    pub fn destroy_context(&self, ctx: Handle) -> Result<(), AclError> {
        let _sets = self.lock_sets();
        let is_default = self.lock().defaults.values().any(|(c, _)| *c == ctx as usize);
        if is_default {
            return Err(CONTEXT_NULL);
        }
        self.drop_context(ctx, false)
    }

    /// Destroys a context (`sets` held) with its graphs (`capture`), the streams left in it,
    /// its own default stream unless it is the device's default context, and the device's
    /// default stream when it was the last context on the device.
    fn drop_context(&self, ctx: Handle, default: bool) -> Result<(), AclError> {
        let device = self.lock().contexts.remove(&(ctx as usize)).ok_or(INVALID_PARAM)?;
        self.drop_captures_in(ctx as usize);
        let left: Vec<usize> =
            self.lock().stream_ctx.iter().filter(|(_, c)| **c == ctx as usize).map(|(s, _)| *s).collect();
        for s in left {
            let _ = self.drop_stream(s as Handle, false);
        }
        let (last, defaults) = {
            let mut inner = self.lock();
            let retains = inner.retains.entry(device).or_default();
            *retains = retains.saturating_sub(1);
            let last = *retains == 0;
            if last {
                inner.retains.remove(&device);
            }
            let own = inner.context_default.remove(&(ctx as usize));
            let device_default = if last { inner.device_default.remove(&device) } else { None };
            (last, [own, device_default])
        };
        defaults.into_iter().for_each(|h| self.drop_default(h));
        let streams = u32::from(last) + u32::from(!default) + self.context_sync;
        (0..streams).for_each(|_| self.devices[device as usize].destroy_context());
        self.give_shared(device, streams);
        if CURRENT.with(Cell::get) == ctx as usize {
            CURRENT.with(|c| c.set(0));
        }
        Ok(())
    }

    /// aclrtSetDevice: makes (or counts one more use of) the device's default context,
    /// whose default stream is the device's own (one stream, none if a context made with
    /// aclrtCreateContext already holds the device), and makes it the thread's current
    /// context.
    pub fn set_device(&self, device: i32) -> Result<(), AclError> {
        let id = self.device(device)?.id();
        let _sets = self.lock_sets();
        let existing = self.lock().defaults.get_mut(&id).map(|(ctx, uses)| {
            *uses += 1;
            *ctx
        });
        let ctx = match existing {
            Some(ctx) => ctx,
            None => {
                let ctx = self.new_context(device, true)? as usize;
                self.lock().defaults.insert(id, (ctx, 1));
                ctx
            }
        };
        CURRENT.with(|c| c.set(ctx));
        Ok(())
    }

    /// aclrtResetDevice(+Force): when the last use goes (or at once with `force`), frees
    /// the default context and every stream created in it (and the device's default stream,
    /// unless a context made with aclrtCreateContext still holds the device). A device with
    /// no default context to release (never set, or reset already: the vendor's page shows
    /// a second thread's aclrtResetDeviceForce failing) is ACL_ERROR_RT_CONTEXT_RELEASE_ERROR,
    /// as the runtime's PrimaryContextRelease answers.
    pub fn reset_device(&self, device: i32, force: bool) -> Result<(), AclError> {
        let id = self.device(device)?.id();
        let _sets = self.lock_sets();
        let last = {
            let mut inner = self.lock();
            match inner.defaults.get_mut(&id) {
                None => return Err(npud_proto::codes::acl::RT_CONTEXT_RELEASE_ERROR),
                Some((ctx, uses)) => {
                    *uses = if force { 0 } else { uses.saturating_sub(1) };
                    let ctx = *ctx;
                    (*uses == 0).then(|| {
                        inner.defaults.remove(&id);
                        ctx
                    })
                }
            }
        };
        match last {
            Some(ctx) => {
                // Like the driver, resetting the device frees the events made on it.
                let events: Vec<usize> =
                    self.lock().events.iter().filter(|(_, (d, _))| *d == id).map(|(h, _)| *h).collect();
                for e in events {
                    let _ = self.destroy_event(e as Handle);
                }
                self.drop_builds_of(id);
                self.drop_context(ctx as Handle, true)
            }
            None => Ok(()),
        }
    }

    pub fn set_current(&self, ctx: Handle) -> Result<(), AclError> {
        if !self.lock().contexts.contains_key(&(ctx as usize)) {
            return Err(INVALID_PARAM);
        }
        CURRENT.with(|c| c.set(ctx as usize));
        Ok(())
    }
}
