//! The one socket call std does not offer: a receive that never blocks, whatever the
//! socket's mode. Toggling the socket's mode around a read would cost two more system
//! calls on every poll of the answer spin (`wire`), and would race the watcher's probe.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// Reads what `stream` holds now into `buf`: Ok(0) at the end of the stream,
/// `WouldBlock` when nothing has come yet.
pub fn recv_now(stream: &UnixStream, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: a live descriptor borrowed from `stream`, and a buffer of `buf.len()` bytes
    // that recv only writes into.
    let n = unsafe { libc::recv(stream.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}
