//! The process's heap as its allocator counts it. The `npud` binary installs a counting
//! allocator and hands its reader in here; a program that embeds the library without one
//! reads nothing, and the metrics leave the heap out.

use std::sync::OnceLock;

/// Bytes allocated now, and the most ever allocated at once.
pub type Reader = fn() -> (usize, usize);

static READER: OnceLock<Reader> = OnceLock::new();

/// Installs the allocator's reader (once; later calls change nothing).
pub fn install(reader: Reader) {
    let _ = READER.set(reader);
}

/// The heap now and its peak, where a counting allocator is installed.
pub fn read() -> Option<(usize, usize)> {
    READER.get().map(|r| r())
}
