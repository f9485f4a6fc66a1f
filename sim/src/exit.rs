//! A function to run when the process exits normally (`atexit(3)`): the shared budget's
//! lives file is removed then (`shared`). The one libc call std does not wrap.
#![allow(unsafe_code)]

/// Registers `f` to run at a normal exit (not at a kill, which the budget's sweep covers).
pub fn at_exit(f: extern "C" fn()) {
    // SAFETY: atexit takes a function of no arguments and no result, which `f` is; it
    // only records it.
    unsafe {
        libc::atexit(f);
    }
}
