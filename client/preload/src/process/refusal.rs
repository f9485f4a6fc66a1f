//! Refusals: what a hook returns instead of creating, and why.

/// npud refused (or the wait expired, or npud is required and unreachable): the hook
/// returns its vendor's "no stream resource" code instead of creating. `why` is the
/// reason, which the program can read as its failed call's error message
/// (`ffi::errors`: `aclGetRecentErrMsg`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub why: String,
}

impl Refused {
    /// Refuses for `why`, said on standard error too.
    pub fn because(why: String) -> Refused {
        eprintln!("npud-preload: {why}");
        Refused { why }
    }

    /// Refuses for `why`, without the stderr line (one said so already).
    pub fn quietly(why: String) -> Refused {
        Refused { why }
    }
}
