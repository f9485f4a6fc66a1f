//! The C ABI: the exported AscendCL hooks, the `dlsym` hook, and finding the real vendor
//! functions. The only unsafe code of the interposer; every hook catches panics (one
//! unwinding out of `extern "C"` would abort the host process) and falls back to the plain
//! vendor call.
//!
//! Finding the real function never goes through our own `dlsym` and never assumes a
//! soname: first the handle the program itself looked the vendor library up with
//! (MindSpore and torch_npu `dlopen` AscendCL `RTLD_LOCAL`, where `RTLD_NEXT` finds
//! nothing; a static cudart `dlopen`s libcuda), then an already loaded library by its
//! known sonames (`RTLD_NOLOAD`), then `RTLD_NEXT`.
//!
//! [`acl`] holds the AscendCL hooks, [`cuda`] the CUDA driver's.

mod acl;
mod cuda;

use crate::process::Process;
use std::cell::Cell;
use std::ffi::{CStr, c_char, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

type Handle = *mut c_void;
type DlsymFn = unsafe extern "C" fn(Handle, *const c_char) -> Handle;

/// What a hook answers when the real function could not be found.
use npud_proto::codes::acl::RT_INTERNAL_ERROR as INTERNAL;

static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
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

/// One vendor library: where its real functions are found.
pub(crate) struct Vendor {
    /// A handle the program looked one of our names up with: the library, however it was
    /// loaded.
    handle: AtomicPtr<c_void>,
    sonames: &'static [&'static CStr],
}

impl Vendor {
    pub(crate) const fn new(sonames: &'static [&'static CStr]) -> Vendor {
        Vendor { handle: AtomicPtr::new(null_mut()), sonames }
    }
}

/// The vendor's definition of `name`, never `ours`.
fn vendor(library: &Vendor, name: &CStr, ours: *mut c_void) -> *mut c_void {
    let Some(dlsym) = real_dlsym() else { return null_mut() };
    let mut handles = vec![library.handle.load(Ordering::Acquire)];
    for soname in library.sonames {
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

/// The real function behind a hook (or any vendor name, with `ours` null) in the vendor
/// library `$lib`, resolved once.
macro_rules! real {
    ($lib:expr, $name:ident : $ty:ty) => {
        real!($lib, $name: $ty, $name as *mut c_void)
    };
    ($lib:expr, $name:ident : $ty:ty, $ours:expr) => {{
        static CACHE: std::sync::atomic::AtomicPtr<c_void> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
        let mut p = CACHE.load(std::sync::atomic::Ordering::Acquire);
        if p.is_null() {
            let name = CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()).unwrap_or(c"");
            p = super::vendor($lib, name, $ours);
            CACHE.store(p, std::sync::atomic::Ordering::Release);
        }
        // SAFETY: p is the vendor's definition of this very name; $ty is its C signature.
        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
    }};
}
use real;

/// The calling process's state; a forked child gets a fresh one. The parent's is leaked in
/// the child on purpose: its locks may be held by threads that do not exist there.
pub(crate) fn process() -> &'static Process {
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

/// Runs `interposed` for the outermost hook on this thread, `plain` for nested ones; if
/// anything panics, answers `failed` (an unwinding panic would abort the host).
pub(crate) fn hook_or<T>(interposed: impl FnOnce(&'static Process) -> T, plain: impl FnOnce() -> T, failed: T) -> T {
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
        eprintln!("npud-preload: an interposer hook failed");
        failed
    })
}

/// [`hook_or`] for AscendCL, whose internal error is 507000.
pub(crate) fn hook(interposed: impl FnOnce(&'static Process) -> i32, plain: impl FnOnce() -> i32) -> i32 {
    hook_or(interposed, plain, INTERNAL)
}

/// `dlsym` as glibc's, except that a program looking up one of our AscendCL or CUDA
/// driver names in the vendor's handle gets our hook (torch_npu ≤ 26.0 and MindSpore find
/// the runtime this way, a static cudart finds `cuGetProcAddress` this way). The pass-through path takes no lock and allocates nothing: Rust's std and the
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
    let (library, hook) = if bytes.starts_with(b"aclrt") || bytes.starts_with(b"aclmdl") {
        (&acl::LIBRARY, acl::ours(bytes))
    } else if bytes.starts_with(b"cu") {
        (&cuda::LIBRARY, cuda::ours(bytes))
    } else {
        return sym;
    };
    match hook {
        Some(hook) => {
            library.handle.store(handle, Ordering::Release);
            hook
        }
        None => sym,
    }
}
