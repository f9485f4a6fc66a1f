//! Finding the vendors' real functions: the three vendor libraries the hooks stand in
//! for, each found however the program loaded it, and glibc's own `dlsym`, which every
//! lookup here goes through (never our own `dlsym`, whose answers would be our hooks).
//! The lowest layer of `ffi`: it uses nothing of the hooks.

use super::Handle;
use std::ffi::{CStr, c_char, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// AscendCL (`libascendcl.so`; `libacl_rt.so` in the open runtime's packaging).
pub(super) static ACL: Vendor = Vendor::new(&[c"libascendcl.so", c"libacl_rt.so"]);
/// The runtime layer below AscendCL, which GE and HCCL call too.
pub(super) static RUNTIME: Vendor = Vendor::new(&[c"libruntime.so"]);
/// The CUDA driver.
pub(super) static CUDA: Vendor = Vendor::new(&[c"libcuda.so.1", c"libcuda.so"]);

/// Most sonames a [`Vendor`] is looked up by.
const MAX_SONAMES: usize = 4;

/// One vendor library: where its real functions are found.
pub(crate) struct Vendor {
    /// A handle the program looked one of our names up with: the library, however it was
    /// loaded.
    pub(super) handle: AtomicPtr<c_void>,
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
pub(super) fn find(library: &Vendor, name: &CStr, ours: *mut c_void) -> *mut c_void {
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
/// library `$lib`, resolved once. The name's C string is made at compile time.
macro_rules! real {
    ($lib:expr, $name:ident : $ty:ty) => {
        real!($lib, $name: $ty, $name as *mut ::std::ffi::c_void)
    };
    ($lib:expr, $name:ident : $ty:ty, $ours:expr) => {{
        use ::std::sync::atomic::{AtomicPtr, Ordering};
        static CACHE: AtomicPtr<::std::ffi::c_void> = AtomicPtr::new(::std::ptr::null_mut());
        const NAME: &::std::ffi::CStr = match ::std::ffi::CStr::from_bytes_with_nul(
            concat!(stringify!($name), "\0").as_bytes(),
        ) {
            Ok(name) => name,
            Err(_) => panic!("an identifier has no NUL in it"),
        };
        let mut p = CACHE.load(Ordering::Acquire);
        if p.is_null() {
            p = $crate::ffi::vendor::find($lib, NAME, $ours);
            CACHE.store(p, Ordering::Release);
        }
        // SAFETY: p is the vendor's definition of this very name; $ty is its C signature.
        (!p.is_null()).then(|| unsafe { ::std::mem::transmute::<*mut ::std::ffi::c_void, $ty>(p) })
    }};
}
pub(super) use real;

type DlsymFn = unsafe extern "C" fn(Handle, *const c_char) -> Handle;

/// glibc's `dlsym`, once found. Our `dlsym`'s entry point jumps through it, so it is read
/// there as a plain pointer-sized word (that entry never passes a lookup on before it is
/// set).
pub(super) static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(null_mut());

/// glibc's own `dlsym`, found with `dlvsym` so our hook is never in the way.
pub(super) fn real_dlsym() -> Option<DlsymFn> {
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
