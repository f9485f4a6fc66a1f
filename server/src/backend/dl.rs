//! The vendor-neutral part of the raw binding layer: a shared library opened with
//! libloading, symbols resolved lazily and cached, and the trampoline that runs a Rust
//! closure when C calls back. A missing library or symbol is an error naming both.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    #[error("cannot load {path}: {message}")]
    Library { path: PathBuf, message: String },
    #[error("{path} has no symbol {symbol}: {message}")]
    Symbol { path: PathBuf, symbol: &'static str, message: String },
}

/// A missing library or symbol is an unsupported operation, with no vendor code.
impl From<LoadError> for crate::backend::BackendError {
    fn from(e: LoadError) -> Self {
        crate::backend::BackendError {
            kind: crate::backend::ErrorKind::Unsupported,
            native_code: 0,
            message: e.to_string(),
        }
    }
}

pub struct Lib {
    lib: libloading::Library,
    path: PathBuf,
    /// symbol name -> address (0 when absent), filled on first use.
    symbols: Mutex<HashMap<&'static str, usize>>,
}

impl std::fmt::Debug for Lib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lib").field("path", &self.path).finish()
    }
}

/// Calls exported C function `$name` of `$lib` with the given signature and arguments.
/// Expands to `Result<R, LoadError>`.
macro_rules! call {
    ($lib:expr, $name:literal, fn($($t:ty),*) -> $r:ty, $($arg:expr),*) => {{
        match $lib.symbol($name) {
            Err(e) => Err(e),
            Ok(addr) => {
                // SAFETY: `addr` is the address of the exported C function `$name`, whose
                // signature is the one written here (shared/reference); the library stays
                // loaded as long as the `Lib`. Pointer arguments are valid out-pointers
                // to the caller's locals or opaque handles the library itself returned.
                let f = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> $r>(addr) };
                // SAFETY: as above; these vendor calls are thread-safe C functions.
                Ok(unsafe { f($($arg),*) })
            }
        }
    }};
}
pub(crate) use call;

impl Lib {
    /// Opens the library. Nothing is resolved yet.
    pub fn open(path: &Path) -> Result<Lib, LoadError> {
        // SAFETY: loading a shared library runs its initialisers; the vendor library (or
        // one the operator pointed us at on purpose) is trusted to be well-behaved.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| LoadError::Library { path: path.to_path_buf(), message: described(&e) })?;
        Ok(Lib { lib, path: path.to_path_buf(), symbols: Mutex::new(HashMap::new()) })
    }

    /// Opens the first of `candidates` that loads; else says, for every one, why not.
    pub fn open_first(what: &str, candidates: &[PathBuf]) -> Result<Lib, String> {
        let mut tried = Vec::new();
        for path in candidates {
            match Lib::open(path) {
                Ok(lib) => return Ok(lib),
                Err(LoadError::Library { message, .. }) => tried.push(format!("{}: {message}", path.display())),
                Err(e) => tried.push(e.to_string()),
            }
        }
        Err(format!("cannot load {what}; tried, in this order:\n  {}", tried.join("\n  ")))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lookup(&self, name: &'static str) -> Result<usize, String> {
        let mut cache = self.symbols.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&addr) = cache.get(name) {
            return if addr == 0 { Err("not exported".into()) } else { Ok(addr) };
        }
        // SAFETY: only the symbol's address is read; it is cast to its documented C
        // signature at the call site.
        let found = unsafe { self.lib.get::<*const c_void>(name.as_bytes()) }.map(|s| *s as usize);
        cache.insert(name, found.as_ref().copied().unwrap_or(0));
        found.map_err(|e| described(&e))
    }

    pub fn symbol(&self, name: &'static str) -> Result<usize, LoadError> {
        self.lookup(name).map_err(|message| LoadError::Symbol { path: self.path.clone(), symbol: name, message })
    }

    /// Whether an optional symbol exists (newer API, or a test fake's hooks).
    pub fn has(&self, name: &'static str) -> bool {
        self.lookup(name).is_ok()
    }
}

/// libloading's message with the loader's reason under it: its own says only "dlopen
/// failed", and `dlerror` (no such file, not an ELF object, a missing dependency) is in
/// the error's source.
fn described(e: &libloading::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

/// A one-shot Rust closure handed to C as `user_data`.
pub type Thunk = Box<dyn FnOnce() + Send>;

/// A boxed one-shot closure on its way to C as `user_data`. It owns the closure until a
/// launch succeeds ([`UserData::launched`]: the trampoline takes it then); dropped before
/// that (the launch failed, or an error returned early), it frees the closure, so no path
/// can leak it or free it twice.
pub struct UserData<F> {
    ptr: *mut F,
}

impl<F> UserData<F> {
    pub fn new(f: F) -> Self {
        Self { ptr: Box::into_raw(Box::new(f)) }
    }

    /// The pointer as the C API takes it.
    pub fn raw(&self) -> usize {
        self.ptr as usize
    }

    /// The launch succeeded: the vendor calls the trampoline once, which frees it.
    pub fn launched(self) {
        std::mem::forget(self);
    }
}

impl<F> Drop for UserData<F> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `Box::into_raw` in `new` and was never handed to a
        // successful launch (`launched` forgets `self`), so nothing else will take it.
        drop(unsafe { Box::from_raw(self.ptr) });
    }
}

/// The C entry point of host callbacks: runs the boxed closure once.
pub unsafe extern "C" fn callback_trampoline(user_data: *mut c_void) {
    // SAFETY: the vendor runtime passes back exactly the user data of one successful
    // launch, which came from a `UserData<Thunk>`, and calls us once.
    let f = unsafe { Box::from_raw(user_data.cast::<Thunk>()) };
    // A panic must not unwind into C.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
}

/// The calling OS thread's id, as AscendCL's aclrtSubscribeReport expects it.
pub fn current_thread_id() -> u64 {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() as u64 }
}
