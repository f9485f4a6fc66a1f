//! Green contexts (CUDA 12.4+, the driver API's "Green Contexts" section): a context made
//! from a set of a device's resources, with streams of its own.
//!
//! The documented flow: cuDeviceGetDevResource gives the device's SMs as a resource,
//! cuDevResourceGenerateDesc turns resources into a descriptor, and cuGreenCtxCreate makes
//! the context ("This API will retain the primary context on device dev, which is released
//! when the green context is destroyed"; CU_GREEN_CTX_DEFAULT_STREAM is required). Its
//! streams come from cuGreenCtxStreamCreate ("CU_STREAM_NON_BLOCKING: This must be
//! specified"; the context current to the thread is ignored; out-of-range priorities are
//! clamped), or from cuStreamCreate with the CUcontext cuCtxFromGreenCtx gives current.
//! cuGreenCtxDestroy "does not destroy streams created via cuGreenCtxStreamCreate,
//! cuStreamCreate, or cuStreamCreateWithPriority. Users are expected to destroy these
//! streams explicitly using cuStreamDestroy to avoid resource leaks." Once it has run it
//! is too late: on an H100 (driver 580.159.04, docs/hardware.md) every call on such a
//! stream, cuStreamDestroy included, answers CUDA_ERROR_CONTEXT_IS_DESTROYED (709), and
//! the streams keep their device memory (about 0.5 MiB each there) until the process
//! exits. So here they stay in the device's budget, answering 709, until the process ends.
//! Splitting resources (cuDevSmResourceSplitByCount) is not modelled.
//!
//! `CUdevResource` is 144 bytes: its type, 92 bytes the driver keeps for itself (here: a
//! mark and the device's ordinal, so a descriptor knows its device), then the SM figures
//! (`sm.smCount` at byte 96).

use crate::*;
use npud_proto::codes::cuda::INVALID_RESOURCE_TYPE;
use std::collections::HashSet;

/// CU_DEV_RESOURCE_TYPE_SM, the one type there is to ask for.
const RESOURCE_SM: u32 = 1;
/// CU_GREEN_CTX_DEFAULT_STREAM.
const DEFAULT_STREAM: u32 = 1;
const RESOURCE_BYTES: usize = 144;
const SM_COUNT_AT: usize = 96;
/// What this driver writes into a resource's private bytes, to know its own again.
const MARK: u32 = 0x6e70_7564;

#[derive(Default)]
pub(crate) struct Green {
    /// Descriptors: handle → (ordinal, SMs).
    descs: HashMap<usize, (i32, u32)>,
    /// Green contexts: handle → ordinal.
    contexts: HashMap<usize, i32>,
    /// Each green context's CUcontext (cuCtxFromGreenCtx): green handle → context handle.
    converted: HashMap<usize, usize>,
    /// Streams whose green context was destroyed: held until the process exits.
    orphans: HashSet<usize>,
}

impl Green {
    /// Whether stream `s` was left behind by its destroyed green context.
    pub(crate) fn orphaned(&self, s: usize) -> bool {
        self.orphans.contains(&s)
    }

    /// The green context a stream made in context `ctx` belongs to: `ctx` itself, or the
    /// one `ctx` was converted from.
    fn of(&self, ctx: usize) -> Option<usize> {
        match self.contexts.contains_key(&ctx) {
            true => Some(ctx),
            false => self.converted.iter().find(|(_, c)| **c == ctx).map(|(g, _)| *g),
        }
    }
}

/// cuDeviceGetDevResource: the device's SMs, all of them.
///
/// # Safety
/// `resource` points to a `CUdevResource` (144 bytes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetDevResource(dev: i32, resource: *mut u8, kind: u32) -> CuResult {
    let r = runtime!();
    if resource.is_null() {
        return INVALID_VALUE;
    }
    if kind != RESOURCE_SM {
        return INVALID_RESOURCE_TYPE;
    }
    if let Err(e) = r.physical(dev) {
        return e;
    }
    let mut bytes = [0u8; RESOURCE_BYTES];
    bytes[..4].copy_from_slice(&RESOURCE_SM.to_ne_bytes());
    bytes[4..8].copy_from_slice(&MARK.to_ne_bytes());
    bytes[8..12].copy_from_slice(&dev.to_ne_bytes());
    bytes[SM_COUNT_AT..SM_COUNT_AT + 4].copy_from_slice(&attributes::MULTIPROCESSORS.to_ne_bytes());
    // SAFETY: the caller's CUdevResource, checked non-null.
    unsafe { resource.copy_from_nonoverlapping(bytes.as_ptr(), RESOURCE_BYTES) };
    SUCCESS
}

/// cuDevResourceGenerateDesc: a descriptor of `count` resources, all of one device.
///
/// # Safety
/// `resources` points to `count` `CUdevResource`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevResourceGenerateDesc(desc: *mut usize, resources: *const u8, count: u32) -> CuResult {
    let r = runtime!();
    if desc.is_null() || resources.is_null() || count == 0 {
        return INVALID_VALUE;
    }
    let mut device = None;
    let mut sms = 0u32;
    for i in 0..count as usize {
        let mut bytes = [0u8; RESOURCE_BYTES];
        // SAFETY: the i-th of the caller's resources.
        unsafe { bytes.as_mut_ptr().copy_from_nonoverlapping(resources.add(i * RESOURCE_BYTES), RESOURCE_BYTES) };
        let word = |at: usize| u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let dev = word(8) as i32;
        if word(0) != RESOURCE_SM || word(4) != MARK || device.is_some_and(|d| d != dev) {
            return INVALID_VALUE;
        }
        device = Some(dev);
        sms = sms.saturating_add(word(SM_COUNT_AT));
    }
    let Some(dev) = device else { return INVALID_VALUE };
    let mut inner = r.lock();
    let h = Rt::mint(&mut inner);
    inner.green.descs.insert(h, (dev, sms));
    // SAFETY: checked non-null out-pointer.
    unsafe { put(desc, h) }
}

/// cuGreenCtxCreate: retains the device's primary context until cuGreenCtxDestroy.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGreenCtxCreate(ctx: *mut usize, desc: usize, dev: i32, flags: u32) -> CuResult {
    let r = runtime!();
    if ctx.is_null() || flags != DEFAULT_STREAM {
        return INVALID_VALUE;
    }
    if let Err(e) = r.physical(dev) {
        return e;
    }
    if r.lock().green.descs.get(&desc).is_none_or(|(d, _)| *d != dev) {
        return INVALID_VALUE;
    }
    r.retains()[dev as usize] += 1;
    let mut inner = r.lock();
    let h = Rt::mint(&mut inner);
    inner.green.contexts.insert(h, dev);
    // SAFETY: checked non-null out-pointer.
    unsafe { put(ctx, h) }
}

/// cuGreenCtxStreamCreate: a stream in the green context's device, whatever context is
/// current.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGreenCtxStreamCreate(s: *mut usize, ctx: usize, flags: u32, priority: i32) -> CuResult {
    let r = runtime!();
    if s.is_null() || flags != NON_BLOCKING {
        return INVALID_VALUE;
    }
    let Some(dev) = r.lock().green.contexts.get(&ctx).copied() else { return INVALID_CONTEXT };
    let physical = match r.physical(dev) {
        Ok(p) => p,
        Err(e) => return e,
    };
    // SAFETY: checked non-null out-pointer.
    unsafe { r.create_stream(s, physical, flags, priority, ctx) }
}

/// cuCtxFromGreenCtx: the green context as a CUcontext, to make current (cuCtxSetCurrent)
/// for calls that take the current context, cuStreamCreate among them. One per green
/// context, the same handle each time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxFromGreenCtx(out: *mut usize, green: usize) -> CuResult {
    let r = runtime!();
    if out.is_null() {
        return INVALID_VALUE;
    }
    let mut inner = r.lock();
    let Some(&dev) = inner.green.contexts.get(&green) else { return INVALID_VALUE };
    let Ok(physical) = r.physical(dev) else { return INVALID_DEVICE };
    let ctx = match inner.green.converted.get(&green) {
        Some(&c) => c,
        None => {
            let c = Rt::mint(&mut inner);
            inner.green.converted.insert(green, c);
            inner.contexts.insert(c, physical);
            c
        }
    };
    drop(inner);
    // SAFETY: checked non-null out-pointer.
    unsafe { put(out, ctx) }
}

/// cuGreenCtxDestroy: the context (and its CUcontext) goes, and its primary-context retain
/// with it; the streams made in it stay, answering CONTEXT_IS_DESTROYED, until the
/// process exits.
#[unsafe(no_mangle)]
pub extern "C" fn cuGreenCtxDestroy(ctx: usize) -> CuResult {
    let r = runtime!();
    let dev = {
        let mut inner = r.lock();
        let Some(dev) = inner.green.contexts.remove(&ctx) else { return INVALID_CONTEXT };
        let converted = inner.green.converted.remove(&ctx);
        if let Some(c) = converted {
            inner.contexts.remove(&c);
        }
        let left: Vec<usize> =
            inner.stream_ctx.iter().filter(|(_, c)| **c == ctx || Some(**c) == converted).map(|(s, _)| *s).collect();
        inner.green.orphans.extend(left);
        dev
    };
    cuDevicePrimaryCtxRelease_v2(dev)
}

/// cuStreamGetGreenCtx: the green context a stream was made in (by cuGreenCtxStreamCreate,
/// or with its CUcontext current), or NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetGreenCtx(s: usize, ctx: *mut usize) -> CuResult {
    let r = runtime!();
    let inner = r.lock();
    if let Err(e) = inner.stream(s) {
        return e;
    }
    let made_in = inner.stream_ctx.get(&s).and_then(|c| inner.green.of(*c));
    drop(inner);
    // SAFETY: the caller's out-pointer, checked there.
    unsafe { put(ctx, made_in.unwrap_or(0)) }
}
