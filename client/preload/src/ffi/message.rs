//! `aclGetRecentErrMsg`: what a program reads after a failed AscendCL call, npud's refusal
//! included (see `process::refusal`).

use super::acl::LIBRARY;
use super::real;
use crate::process::refusal;
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_void};

type MessageFn = unsafe extern "C" fn() -> *const c_char;

thread_local! {
    /// The text last answered on this thread. The vendor's page: only the pointer the
    /// most recent call returned is valid, so one buffer per thread is enough.
    static ANSWERED: RefCell<CString> = RefCell::new(CString::default());
}

/// aclGetRecentErrMsg "obtains and clears" the messages of the calling thread's failed
/// calls, the latest on top. Where npud refused one of this thread's calls since the last
/// read, its reason is on top; the vendor's own messages follow (read, so cleared, as the
/// program's call would have). Otherwise the vendor's answer, untouched.
#[unsafe(no_mangle)]
pub extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    let vendor = match real!(&LIBRARY, aclGetRecentErrMsg: MessageFn) {
        // SAFETY: the vendor's function, which takes nothing.
        Some(f) => unsafe { f() },
        None => std::ptr::null(),
    };
    let Some(ours) = refusal::take_unread() else { return vendor };
    let mut text = ours.into_bytes();
    if !vendor.is_null() {
        // SAFETY: the vendor returns a NUL-terminated string, valid until its next call.
        let theirs = unsafe { CStr::from_ptr(vendor) }.to_bytes();
        if !theirs.is_empty() {
            text.push(b'\n');
            text.extend_from_slice(theirs);
        }
    }
    text.retain(|b| *b != 0);
    let Ok(text) = CString::new(text) else { return vendor };
    ANSWERED
        .try_with(|a| {
            *a.borrow_mut() = text;
            a.borrow().as_ptr()
        })
        .unwrap_or(vendor)
}

/// Our hook for the name, if it is this one.
pub(crate) fn ours(name: &[u8]) -> Option<*mut c_void> {
    (name == b"aclGetRecentErrMsg").then_some(aclGetRecentErrMsg as *mut c_void)
}
