//! Two calls std does not offer, the interposer's only unsafe code outside `ffi`:
//! - a receive that never blocks, whatever the socket's mode. Toggling the socket's mode
//!   around a read would cost two more system calls on every poll of the answer spin
//!   (`wire`), and would race the watcher's probe;
//! - a coarse monotonic clock, read around every stream creation and destroy.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Reads what `stream` holds now into `buf`: Ok(0) at the end of the stream,
/// `WouldBlock` when nothing has come yet.
pub fn recv_now(stream: &UnixStream, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: a live descriptor borrowed from `stream`, and a buffer of `buf.len()` bytes
    // that recv only writes into.
    let n = unsafe { libc::recv(stream.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// `CLOCK_MONOTONIC_COARSE`: the time of the last tick (1-4 ms old), read from the vDSO
/// without a system call and in a few nanoseconds, where `Instant::now` costs tens on a
/// virtual machine. Good enough for quiet periods of tens of milliseconds.
pub fn coarse_now() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the local it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    match rc {
        0 => Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_nsec).unwrap_or(0)),
        _ => Duration::ZERO,
    }
}
