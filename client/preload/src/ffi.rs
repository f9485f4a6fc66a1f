//! The C ABI: the exported AscendCL hooks, the `dlsym` hook, and finding the real vendor
//! functions. The only unsafe code of the interposer; every hook catches panics (one
//! unwinding out of `extern "C"` would abort the host process) and falls back to the plain
//! vendor call.
//!
//! Finding the real function never goes through our own `dlsym` and never assumes a
//! soname: first the handle the program itself looked AscendCL up with (MindSpore and
//! torch_npu `dlopen` it `RTLD_LOCAL`, where `RTLD_NEXT` finds nothing), then an already
//! loaded `libascendcl.so` or `libacl_rt.so` (`RTLD_NOLOAD`), then `RTLD_NEXT`.

use crate::process::Process;
use std::cell::Cell;
use std::ffi::{CStr, c_char, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

type Handle = *mut c_void;
type DlsymFn = unsafe extern "C" fn(Handle, *const c_char) -> Handle;

/// ACL_ERROR_RT_INTERNAL_ERROR: the real function could not be found.
const INTERNAL: i32 = 507000;

static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
/// A handle the program looked an `aclrt*` name up with: the vendor library, however it
/// was loaded.
static VENDOR: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
static PROCESS: AtomicPtr<Process> = AtomicPtr::new(null_mut());

thread_local! {
    /// Hooks entered on this thread: a vendor function that calls another hooked name
    /// (a fallback from CreateStreamWithConfig to CreateStream, say) is counted once.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// glibc's own `dlsym`, found with `dlvsym` so our hook is never in the way.
fn real_dlsym() -> Option<DlsymFn> {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p.is_null() {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
            // SAFETY: dlvsym with RTLD_NEXT and NUL-terminated names; it only reads them.
            p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !p.is_null() {
                break;
            }
        }
        if p.is_null() {
            return None;
        }
        REAL_DLSYM.store(p, Ordering::Release);
    }
    // SAFETY: p is glibc's dlsym, whose C signature DlsymFn spells out.
    Some(unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(p) })
}

/// The vendor's definition of `name`, never `ours`.
fn vendor(name: &CStr, ours: *mut c_void) -> *mut c_void {
    let Some(dlsym) = real_dlsym() else { return null_mut() };
    let mut handles = vec![VENDOR.load(Ordering::Acquire)];
    for soname in [c"libascendcl.so", c"libacl_rt.so"] {
        // SAFETY: RTLD_NOLOAD only finds an object that is already loaded; a found handle
        // is kept (one reference) for the life of the process, like the library itself.
        handles.push(unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) });
    }
    for h in handles.into_iter().filter(|h| !h.is_null()) {
        // SAFETY: a live handle and a NUL-terminated name.
        let p = unsafe { dlsym(h, name.as_ptr()) };
        if !p.is_null() && p != ours {
            return p;
        }
    }
    // SAFETY: as above, with the RTLD_NEXT pseudo-handle.
    let p = unsafe { dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if p == ours { null_mut() } else { p }
}

/// The real function behind a hook (or any vendor name, with `ours` null), resolved once.
macro_rules! real {
    ($name:ident : $ty:ty) => {
        real!($name: $ty, $name as *mut c_void)
    };
    ($name:ident : $ty:ty, $ours:expr) => {{
        static CACHE: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
        let mut p = CACHE.load(Ordering::Acquire);
        if p.is_null() {
            let name = CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()).unwrap_or(c"");
            p = vendor(name, $ours);
            CACHE.store(p, Ordering::Release);
        }
        // SAFETY: p is the vendor's definition of this very name; $ty is its C signature.
        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
    }};
}

/// The calling process's state; a forked child gets a fresh one. The parent's is leaked in
/// the child on purpose: its locks may be held by threads that do not exist there.
fn process() -> &'static Process {
    let pid = std::process::id();
    loop {
        let p = PROCESS.load(Ordering::Acquire);
        // SAFETY: PROCESS only ever holds a leaked Box, never freed.
        if let Some(existing) = unsafe { p.as_ref() }
            && existing.pid == pid
        {
            return existing;
        }
        let fresh = Box::into_raw(Box::new(Process::new(pid)));
        match PROCESS.compare_exchange(p, fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: just leaked above and published; never freed.
            Ok(_) => return unsafe { &*fresh },
            // SAFETY: `fresh` was never published, so this is its only owner.
            Err(_) => drop(unsafe { Box::from_raw(fresh) }),
        }
    }
}

/// Runs `interposed` for the outermost hook on this thread, `plain` for nested ones and if
/// anything panics.
fn hook(interposed: impl FnOnce(&'static Process) -> i32, plain: impl FnOnce() -> i32) -> i32 {
    let outer = DEPTH.try_with(|d| {
        let depth = d.get();
        d.set(depth + 1);
        depth == 0
    });
    if outer != Ok(true) {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
        return plain();
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| interposed(process())));
    let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    result.unwrap_or_else(|_| {
        eprintln!("npud-preload: an interposer hook failed; calling the vendor directly");
        INTERNAL
    })
}

type IntFn = unsafe extern "C" fn(i32) -> i32;
type PtrFn = unsafe extern "C" fn(Handle) -> i32;
type OutFn = unsafe extern "C" fn(*mut Handle) -> i32;
type OutIntFn = unsafe extern "C" fn(*mut Handle, i32) -> i32;
type ConfigFn = unsafe extern "C" fn(*mut Handle, u32, u32) -> i32;
type CountFn = unsafe extern "C" fn(*mut u32) -> i32;
type DeviceFn = unsafe extern "C" fn(*mut i32) -> i32;

/// The device of the calling thread's current context.
fn current_device(p: &Process) -> u32 {
    if let Some(get) = real!(aclrtGetDevice: DeviceFn, null_mut()) {
        let mut d = -1;
        // SAFETY: the vendor function with an out-pointer to a local.
        if unsafe { get(&mut d) } == 0
            && let Ok(d) = u32::try_from(d)
        {
            return d;
        }
    }
    p.context_device(current_context()).unwrap_or(0)
}

fn current_context() -> usize {
    let mut ctx: Handle = null_mut();
    match real!(aclrtGetCurrentContext: OutFn, null_mut()) {
        // SAFETY: the vendor function with an out-pointer to a local.
        Some(get) if unsafe { get(&mut ctx) } == 0 => ctx as usize,
        _ => 0,
    }
}

/// Admits one stream on the current device, runs `create`, and books the outcome.
fn create_one(p: &'static Process, out: *mut Handle, create: impl FnOnce() -> i32) -> i32 {
    if out.is_null() {
        return create(); // the vendor's own INVALID_PARAM
    }
    let device = current_device(p);
    if let Err(code) = p.admit(device, 1) {
        return code;
    }
    let rc = create();
    if rc == 0 {
        // SAFETY: the vendor filled the caller's non-null out-pointer.
        p.stream_created(unsafe { *out } as usize, device, current_context());
    } else {
        p.not_created(device, 1);
    }
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetDevice(device: i32) -> i32 {
    let Some(real) = real!(aclrtSetDevice: IntFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function, called as the program called it.
    hook(
        |p| {
            let Ok(id) = u32::try_from(device) else { return unsafe { real(device) } };
            let first = !p.device_is_set(id);
            if first && let Err(code) = p.admit(id, 1) {
                return code;
            }
            let rc = unsafe { real(device) };
            if rc != 0 {
                if first {
                    p.not_created(id, 1);
                }
                return rc;
            }
            p.device_set(id, first.then(current_context));
            0
        },
        || unsafe { real(device) },
    )
}

fn reset(device: i32, force: bool, real: IntFn) -> i32 {
    // SAFETY (both closures): the vendor function, called as the program called it.
    hook(
        |p| {
            let rc = unsafe { real(device) };
            if rc == 0
                && let Ok(id) = u32::try_from(device)
            {
                p.device_reset(id, force);
            }
            rc
        },
        || unsafe { real(device) },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDevice(device: i32) -> i32 {
    real!(aclrtResetDevice: IntFn).map_or(INTERNAL, |real| reset(device, false, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDeviceForce(device: i32) -> i32 {
    real!(aclrtResetDeviceForce: IntFn).map_or(INTERNAL, |real| reset(device, true, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtCreateContext(ctx: *mut Handle, device: i32) -> i32 {
    let Some(real) = real!(aclrtCreateContext: OutIntFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's arguments.
    hook(
        |p| {
            let Ok(id) = u32::try_from(device) else { return unsafe { real(ctx, device) } };
            if ctx.is_null() {
                return unsafe { real(ctx, device) };
            }
            if let Err(code) = p.admit(id, 1) {
                return code;
            }
            let rc = unsafe { real(ctx, device) };
            if rc == 0 {
                // SAFETY: the vendor filled the caller's non-null out-pointer.
                p.context_created(unsafe { *ctx } as usize, id);
            } else {
                p.not_created(id, 1);
            }
            rc
        },
        || unsafe { real(ctx, device) },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyContext(ctx: Handle) -> i32 {
    let Some(real) = real!(aclrtDestroyContext: PtrFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's handle.
    hook(
        |p| {
            let rc = unsafe { real(ctx) };
            if rc == 0 {
                p.context_destroyed(ctx as usize);
            }
            rc
        },
        || unsafe { real(ctx) },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtCreateStream(stream: *mut Handle) -> i32 {
    let Some(real) = real!(aclrtCreateStream: OutFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's out-pointer.
    hook(|p| create_one(p, stream, || unsafe { real(stream) }), || unsafe { real(stream) })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtCreateStreamWithConfig(stream: *mut Handle, priority: u32, flag: u32) -> i32 {
    let Some(real) = real!(aclrtCreateStreamWithConfig: ConfigFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's arguments.
    hook(
        |p| create_one(p, stream, || unsafe { real(stream, priority, flag) }),
        || unsafe { real(stream, priority, flag) },
    )
}

fn destroy(stream: Handle, real: PtrFn) -> i32 {
    // SAFETY (both closures): the vendor function with the caller's handle.
    hook(
        |p| {
            let rc = unsafe { real(stream) };
            if rc == 0 {
                p.stream_destroyed(stream as usize);
            }
            rc
        },
        || unsafe { real(stream) },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyStream(stream: Handle) -> i32 {
    real!(aclrtDestroyStream: PtrFn).map_or(INTERNAL, |real| destroy(stream, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyStreamForce(stream: Handle) -> i32 {
    real!(aclrtDestroyStreamForce: PtrFn).map_or(INTERNAL, |real| destroy(stream, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtGetStreamAvailableNum(count: *mut u32) -> i32 {
    let Some(real) = real!(aclrtGetStreamAvailableNum: CountFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's out-pointer, which it
    // filled when it returned 0.
    hook(
        |p| {
            let rc = unsafe { real(count) };
            if rc == 0 && !count.is_null() {
                let device = current_device(p);
                unsafe { *count = p.available(device, *count) };
            }
            rc
        },
        || unsafe { real(count) },
    )
}

/// Our hook for an exact AscendCL name, if we interpose it.
fn ours(name: &[u8]) -> Option<*mut c_void> {
    Some(match name {
        b"aclrtSetDevice" => aclrtSetDevice as *mut c_void,
        b"aclrtResetDevice" => aclrtResetDevice as *mut c_void,
        b"aclrtResetDeviceForce" => aclrtResetDeviceForce as *mut c_void,
        b"aclrtCreateContext" => aclrtCreateContext as *mut c_void,
        b"aclrtDestroyContext" => aclrtDestroyContext as *mut c_void,
        b"aclrtCreateStream" => aclrtCreateStream as *mut c_void,
        b"aclrtCreateStreamWithConfig" => aclrtCreateStreamWithConfig as *mut c_void,
        b"aclrtDestroyStream" => aclrtDestroyStream as *mut c_void,
        b"aclrtDestroyStreamForce" => aclrtDestroyStreamForce as *mut c_void,
        b"aclrtGetStreamAvailableNum" => aclrtGetStreamAvailableNum as *mut c_void,
        _ => return None,
    })
}

/// `dlsym` as glibc's, except that a program looking up one of our AscendCL names in the
/// vendor's handle gets our hook (torch_npu ≤ 26.0 and MindSpore find the runtime this
/// way). The pass-through path takes no lock and allocates nothing: Rust's std and the
/// dynamic loader call it too.
///
/// # Safety
/// The same contract as dlsym(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: Handle, name: *const c_char) -> Handle {
    let Some(real) = real_dlsym() else { return null_mut() };
    // SAFETY: forwarded exactly as called.
    let sym = unsafe { real(handle, name) };
    if sym.is_null() || name.is_null() || handle.is_null() || handle == libc::RTLD_NEXT {
        return sym;
    }
    // SAFETY: dlsym's contract: name is a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    if !bytes.starts_with(b"aclrt") {
        return sym;
    }
    match ours(bytes) {
        Some(hook) => {
            VENDOR.store(handle, Ordering::Release);
            hook
        }
        None => sym,
    }
}
