//! What a program reads after a failed AscendCL call, npud's refusals included: the
//! thread's last error (`aclrtGetLastError`, `aclrtPeekAtLastError`) and its messages
//! (`aclGetRecentErrMsg`). A refusal reads as the device's own failure would have: the
//! same code, returned and recorded as the thread's last error, and npud's reason on top
//! of the messages (torch_npu puts that text in the exception a failed creation raises).

use super::vendor::{ACL, real};
use crate::process::Refused;
use std::cell::{Cell, RefCell};
use std::ffi::{CStr, CString, c_char, c_void};

type MessageFn = unsafe extern "C" fn() -> *const c_char;
type LastErrorFn = unsafe extern "C" fn(i32) -> i32;

/// `aclrtLastErrLevel`'s only level.
const THREAD_LEVEL: i32 = 0;

thread_local! {
    /// The text last answered on this thread. The vendor's page: only the pointer the
    /// most recent call returned is valid, so one buffer per thread is enough.
    static ANSWERED: RefCell<CString> = RefCell::new(CString::default());
    /// The code this thread's latest refusal returned, until aclrtGetLastError reads it
    /// (0: none).
    static REFUSED: Cell<i32> = const { Cell::new(0) };
    /// Why, until aclGetRecentErrMsg reads it (the two are read and cleared apart).
    static UNREAD: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A hook refuses with the vendor's `code` for `refusal`'s reason: the thread's last
/// error and its newest message, as the runtime records its own failures. Returns `code`.
pub(crate) fn refused(code: i32, refusal: Refused) -> i32 {
    let _ = REFUSED.try_with(|r| r.set(code));
    let _ = UNREAD.try_with(|u| *u.borrow_mut() = Some(format!("npud: {}", refusal.why)));
    code
}

/// aclrtPeekAtLastError: the thread's latest refusal, else the vendor's answer.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtPeekAtLastError(level: i32) -> i32 {
    let Some(real) = real!(&ACL, aclrtPeekAtLastError: LastErrorFn) else { return super::INTERNAL };
    match REFUSED.try_with(Cell::get) {
        Ok(code) if code != 0 && level == THREAD_LEVEL => code,
        // SAFETY: the vendor function, called as the program called it.
        _ => unsafe { real(level) },
    }
}

/// aclrtGetLastError: the thread's latest refusal, else the vendor's answer; either way
/// the vendor's record is read too, so cleared, as one record of the thread would be.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtGetLastError(level: i32) -> i32 {
    let Some(real) = real!(&ACL, aclrtGetLastError: LastErrorFn) else { return super::INTERNAL };
    // SAFETY: the vendor function, called as the program called it.
    let theirs = unsafe { real(level) };
    if level != THREAD_LEVEL {
        return theirs;
    }
    match REFUSED.try_with(|r| r.replace(0)) {
        Ok(code) if code != 0 => code,
        _ => theirs,
    }
}

/// aclGetRecentErrMsg "obtains and clears" the messages of the calling thread's failed
/// calls, the latest on top. Where npud refused one of this thread's calls since the last
/// read, its reason is on top; the vendor's own messages follow (read, so cleared, as the
/// program's call would have). Otherwise the vendor's answer, untouched.
#[unsafe(no_mangle)]
pub extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    let vendor = match real!(&ACL, aclGetRecentErrMsg: MessageFn) {
        // SAFETY: the vendor's function, which takes nothing.
        Some(f) => unsafe { f() },
        None => std::ptr::null(),
    };
    let Some(ours) = UNREAD.try_with(|u| u.borrow_mut().take()).ok().flatten() else { return vendor };
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

/// Our hook for an error-reading name, if it is one of these.
pub(crate) fn ours(name: &[u8]) -> Option<*mut c_void> {
    Some(match name {
        b"aclGetRecentErrMsg" => aclGetRecentErrMsg as *mut c_void,
        b"aclrtPeekAtLastError" => aclrtPeekAtLastError as *mut c_void,
        b"aclrtGetLastError" => aclrtGetLastError as *mut c_void,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message as the program reads it: copied out before the next call.
    fn read() -> Option<String> {
        let p = aclGetRecentErrMsg();
        // SAFETY: null, or the NUL-terminated answer, valid until this thread's next call.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    #[test]
    fn a_refusal_is_its_threads_message_once_and_the_latest_wins() {
        // No vendor library in a unit test: only our messages are there.
        refused(207008, Refused::quietly("first".into()));
        refused(207008, Refused::quietly("device 0: no budget for 71 streams".into()));
        let other = std::thread::spawn(read).join().unwrap_or(Some("panicked".into()));
        assert_eq!(other, None, "another thread has nothing to read");
        assert_eq!(read().as_deref(), Some("npud: device 0: no budget for 71 streams"));
        assert_eq!(read(), None, "reading cleared it");
    }
}
