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
//! [`acl`] holds the AscendCL hooks, [`errors`] what a program reads of a failed AscendCL
//! call, [`cuda`] the CUDA driver's hooks, [`dlsym`] our `dlsym`.

mod acl;
mod capture;
mod cuda;
mod dlsym;
mod errors;
mod rt;

use dlsym::real_dlsym;

use crate::process::Process;
use std::cell::Cell;
use std::ffi::{CStr, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

type Handle = *mut c_void;

/// What a hook answers when the real function could not be found.
use npud_proto::codes::acl::RT_INTERNAL_ERROR as INTERNAL;

static PROCESS: AtomicPtr<Process> = AtomicPtr::new(null_mut());

thread_local! {
    /// Hooks entered on this thread: a vendor function that calls another hooked name
    /// (a fallback from CreateStreamWithConfig to CreateStream, say) is counted once.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Most sonames a [`Vendor`] is looked up by.
const MAX_SONAMES: usize = 4;

/// One vendor library: where its real functions are found.
pub(crate) struct Vendor {
    /// A handle the program looked one of our names up with: the library, however it was
    /// loaded.
    handle: AtomicPtr<c_void>,
    sonames: &'static [&'static CStr],
    /// The handle found for each soname (null: not loaded when last looked for). A found
    /// one stays valid: the reference `dlopen` took is never dropped.
    found: [AtomicPtr<c_void>; MAX_SONAMES],
    /// The loader's count of objects ever loaded (`dlpi_adds`) when the sonames still
    /// missing were last looked for; until it moves, they are not looked for again.
    /// glibc's `RTLD_NOLOAD` search walks the whole library path for a name that is not
    /// loaded (about 80 failed `openat`/`stat` each); once per hooked name, that was most of what
    /// the interposer added to a process's start-up.
    searched_at: AtomicU64,
}

impl Vendor {
    pub(crate) const fn new(sonames: &'static [&'static CStr]) -> Vendor {
        assert!(sonames.len() <= MAX_SONAMES, "too many sonames for one vendor library");
        Vendor {
            handle: AtomicPtr::new(null_mut()),
            sonames,
            found: [const { AtomicPtr::new(null_mut()) }; MAX_SONAMES],
            searched_at: AtomicU64::new(u64::MAX),
        }
    }

    /// The handles of this library's sonames that are loaded, looking again only for those
    /// not found before and only when the process has loaded something since.
    fn loaded(&self) -> impl Iterator<Item = Handle> + '_ {
        let adds = loader_adds();
        if adds.is_none_or(|adds| self.searched_at.load(Ordering::Acquire) != adds) {
            for (soname, found) in self.sonames.iter().zip(&self.found) {
                if found.load(Ordering::Acquire).is_null() && loaded_by_name(soname) {
                    // SAFETY: RTLD_NOLOAD only finds an object that is already loaded; a
                    // found handle is kept (one reference) for the life of the process,
                    // like the library itself.
                    let h = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
                    found.store(h, Ordering::Release);
                }
            }
            self.searched_at.store(adds.unwrap_or(u64::MAX), Ordering::Release);
        }
        self.found.iter().take(self.sonames.len()).map(|f| f.load(Ordering::Acquire))
    }
}

/// Whether a loaded object's file name starts with `soname` (`libascendcl.so` finds
/// `/usr/local/Ascend/.../libascendcl.so`, `libcuda.so.1` finds `libcuda.so.1`): only then
/// is it worth asking `dlopen`, which for a name that is not loaded searches every
/// directory of the library path first.
fn loaded_by_name(soname: &CStr) -> bool {
    unsafe extern "C" fn matches(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> libc::c_int {
        // SAFETY: the loader passes a valid info; `data` is the soname below, alive for
        // this call; dlpi_name is null or NUL-terminated.
        let (name, soname) = unsafe { ((*info).dlpi_name, *(data as *const &CStr)) };
        if name.is_null() {
            return 0;
        }
        // SAFETY: as above.
        let path = unsafe { CStr::from_ptr(name) }.to_bytes();
        let file = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
        libc::c_int::from(file.starts_with(soname.to_bytes()))
    }
    // SAFETY: `matches` matches the callback's C signature and only reads through `data`.
    unsafe { libc::dl_iterate_phdr(Some(matches), (&raw const soname).cast_mut().cast()) != 0 }
}

/// The dynamic loader's count of objects loaded so far (None where it does not say).
fn loader_adds() -> Option<u64> {
    unsafe extern "C" fn first(info: *mut libc::dl_phdr_info, size: usize, data: *mut c_void) -> libc::c_int {
        let has_adds = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + std::mem::size_of::<u64>();
        if size >= has_adds {
            // SAFETY: the loader passes a valid info of `size` bytes, which holds
            // dlpi_adds; `data` is the u64 below, alive for this call.
            unsafe { *(data as *mut u64) = (*info).dlpi_adds };
        }
        1 // the first object is enough: the counters are the same in every one
    }
    let mut adds = u64::MAX;
    // SAFETY: `first` matches the callback's C signature and only writes through `data`.
    unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut adds).cast()) };
    (adds != u64::MAX).then_some(adds)
}

/// The vendor's definition of `name`, never `ours`.
fn vendor(library: &Vendor, name: &CStr, ours: *mut c_void) -> *mut c_void {
    let Some(dlsym) = real_dlsym() else { return null_mut() };
    let handles = std::iter::once(library.handle.load(Ordering::Acquire)).chain(library.loaded());
    for h in handles.filter(|h| !h.is_null()) {
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
