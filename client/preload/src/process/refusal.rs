//! Refusals, and what the program can read of them.
//!
//! A hook that refuses returns the vendor's own "no stream resource" code, so a program
//! cannot tell npud's refusal from the device's by the code. It can by the message:
//! AscendCL's `aclGetRecentErrMsg` "obtains and clears" the error messages of the calling
//! thread's failed calls, the latest on top, and torch_npu puts that text in the exception
//! a failed stream creation raises. So each refusal is kept for its thread until the
//! program reads it (`ffi::acl::aclGetRecentErrMsg` puts it above the vendor's messages),
//! besides the line it prints on standard error.

use std::cell::RefCell;

thread_local! {
    /// This thread's latest refusal not yet read.
    static UNREAD: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// npud refused (or the wait expired, or npud is required and unreachable): the hook
/// returns its vendor's "no stream resource" code instead of creating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

impl Refused {
    /// Refuses for `why`: a line on standard error, and the thread's message.
    pub fn because(why: &str) -> Refused {
        eprintln!("npud-preload: {why}");
        Refused::quietly(why)
    }

    /// Refuses for `why` without the stderr line (one said so already): the thread's
    /// message only.
    pub fn quietly(why: &str) -> Refused {
        let _ = UNREAD.try_with(|u| *u.borrow_mut() = Some(format!("npud: {why}")));
        Refused
    }
}

/// The calling thread's refusal not yet read, which reading clears.
pub fn take_unread() -> Option<String> {
    UNREAD.try_with(|u| u.borrow_mut().take()).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_read_once_by_its_own_thread_and_the_latest_wins() {
        let _ = Refused::quietly("first");
        let _ = Refused::quietly("no budget for 71 streams on device 0: over the quota");
        let other = std::thread::spawn(take_unread).join().unwrap_or(Some("panicked".into()));
        assert_eq!(other, None, "another thread has read nothing of it");
        assert_eq!(take_unread().as_deref(), Some("npud: no budget for 71 streams on device 0: over the quota"));
        assert_eq!(take_unread(), None, "reading clears it");
    }
}
