//! The C ABI: the exported AscendCL, runtime-layer and CUDA hooks, the `dlsym` hook, and
//! finding the real vendor functions. The only unsafe code of the interposer; every hook
//! catches panics (one unwinding out of `extern "C"` would abort the host process) and
//! falls back to the plain vendor call.
//!
//! Finding the real function never goes through our own `dlsym` and never assumes a
//! soname: first the handle the program itself looked the vendor library up with
//! (MindSpore and torch_npu `dlopen` AscendCL `RTLD_LOCAL`, where `RTLD_NEXT` finds
//! nothing; a static cudart `dlopen`s libcuda), then an already loaded library by its
//! known sonames (`RTLD_NOLOAD`), then `RTLD_NEXT`.
//!
//! Layered, each module using only those before it (and this one's hook wrappers):
//! [`vendor`] finds real functions; [`errors`] is what a program reads of a failed
//! AscendCL call; [`ascend`] asks AscendCL's two layers for the thread's device and
//! context and holds the hook bodies they share; [`acl`] the AscendCL hooks; [`capture`]
//! graph capture at both layers; [`rt`] the runtime layer's hooks; [`cuda`] the CUDA
//! driver's; [`dlsym`] our `dlsym`, which knows every hook by name.

mod acl;
mod ascend;
mod capture;
mod cuda;
mod dlsym;
mod errors;
mod launch;
mod rt;
mod vendor;

use crate::process::Process;
use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

type Handle = *mut c_void;

/// What a hook answers when the real function could not be found.
use npud_proto::codes::acl::RT_INTERNAL_ERROR as INTERNAL;

static PROCESS: AtomicPtr<Process> = AtomicPtr::new(null_mut());

thread_local! {
    /// Hooks entered on this thread: a vendor function that calls another hooked name
    /// (a fallback from CreateStreamWithConfig to CreateStream, say) is counted once.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// `asked`, no more urgent than the process's tenant may give a stream
/// (`Process::priority`); as asked before the process has heard from npud.
pub(crate) fn capped_priority(asked: i32) -> i32 {
    let p = PROCESS.load(Ordering::Acquire);
    // SAFETY: PROCESS only ever holds a leaked Box, never freed.
    unsafe { p.as_ref() }.map_or(asked, |p| p.priority(asked))
}

/// The calling process's state; a forked child gets a fresh one. The parent's is leaked in
/// the child on purpose: its locks may be held by threads that do not exist there.
///
/// A fork is noticed by a `pthread_atfork` child handler, not by asking the pid on every
/// hook: `getpid` is a system call, and it was a third of the hooks' cost around each
/// stream creation. `fork(3)` runs the handler; a child made by a raw `clone` or `_Fork`
/// that goes on calling the vendor library keeps the parent's state, and neither vendor
/// supports using a device in such a child.
pub(crate) fn process() -> &'static Process {
    loop {
        let p = PROCESS.load(Ordering::Acquire);
        // SAFETY: PROCESS only ever holds a leaked Box, never freed.
        if let Some(existing) = unsafe { p.as_ref() } {
            return existing;
        }
        watch_forks();
        let fresh = Box::into_raw(Box::new(Process::new(std::process::id())));
        match PROCESS.compare_exchange(p, fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: just leaked above and published; never freed.
            Ok(_) => return unsafe { &*fresh },
            // SAFETY: `fresh` was never published, so this is its only owner.
            Err(_) => drop(unsafe { Box::from_raw(fresh) }),
        }
    }
}

/// Registers [`forked`] once per process image (a child inherits the registration).
fn watch_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that stores to an atomic and closes one descriptor,
        // both async-signal-safe; pthread_atfork keeps the function pointer, which is 'static.
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    });
}

/// In a child just forked: the next hook makes the child's own state, and the parent's
/// connection to npud is closed here. A child that kept it open would keep the parent's
/// session, and everything booked to it, alive after the parent exits: a grant, or an ask
/// still waiting in npud's queue (another thread of the parent may be in a call at the
/// moment of the fork, so the descriptor is taken from outside the connection's lock).
extern "C" fn forked() {
    // The parent's state is left behind, leaked and never touched again in this process.
    PROCESS.store(null_mut(), Ordering::Release);
    if let Some(fd) = crate::wire::take_open_fd() {
        // SAFETY: the parent's socket, inherited and still open (the descriptor is cleared
        // before a connection closes); its owner is leaked with the parent's state and
        // never touches it again in this process, so nothing closes it twice.
        unsafe { libc::close(fd) };
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

/// A runtime's initialisation (`aclInit`, `cuInit`): the real call, then, when it
/// succeeded (0 in both APIs), the hello to npud (see `Process::prepare`).
pub(crate) fn init<T: Copy + PartialEq + From<u8>>(real: impl Fn() -> T, failed: T) -> T {
    hook_or(
        |p| {
            let rc = real();
            if rc == T::from(0) {
                p.prepare();
            }
            rc
        },
        &real,
        failed,
    )
}

/// [`hook_or`] for AscendCL, whose internal error is 507000.
pub(crate) fn hook(interposed: impl FnOnce(&'static Process) -> i32, plain: impl FnOnce() -> i32) -> i32 {
    hook_or(interposed, plain, INTERNAL)
}
