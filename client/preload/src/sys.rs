//! Three calls std does not offer, the interposer's only unsafe code outside `ffi`:
//! - a receive that never blocks, whatever the socket's mode. Toggling the socket's mode
//!   around a read would cost two more system calls on every poll of the answer spin
//!   (`wire`), and would race the watcher's probe;
//! - a send that never raises SIGPIPE: a write to a connection npud has closed (killed, or
//!   restarted under the pod) would otherwise kill the program, whose default action for
//!   SIGPIPE the interposer must not change, and which std ignores only in Rust programs;
//! - a coarse monotonic clock, read around every stream creation and destroy;
//! - whether the process runs set-uid, set-gid or with file capabilities (`AT_SECURE`),
//!   and an open with the real uid's rights for such a process.

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

/// Writes all of `buf` to `stream` (blocking, within the socket's write timeout) with
/// `MSG_NOSIGNAL`: a closed peer is an `EPIPE` error, never a signal to the program.
pub fn send_all(stream: &UnixStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: a live descriptor borrowed from `stream`, and `buf.len()` readable bytes.
        let n = unsafe { libc::send(stream.as_raw_fd(), buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        match usize::try_from(n) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => buf = &buf[n.min(buf.len())..],
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
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

/// Whether the kernel started this program set-uid, set-gid or with file capabilities
/// (`getauxval(AT_SECURE)`, as glibc's loader decides its own secure mode): its caller's
/// environment is then nobody's to trust (ld.so(8)).
pub fn secure() -> bool {
    // SAFETY: getauxval reads the auxiliary vector the kernel gave the process; it takes
    // a constant and has no side effect.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// Opens `path` for reading with the rights of the user who ran the program, not the
/// set-uid owner's: the filesystem uid and gid are the real ones around the open (per
/// thread, `setfsuid`/`setfsgid`; never `seteuid`, which would change the whole
/// process's identity under the program). Never follows a link at the last component,
/// never blocks on a FIFO.
pub fn open_as_caller(path: &std::path::Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    // SAFETY: getuid/getgid read the process's credentials; setfsuid/setfsgid change only
    // the calling thread's filesystem ids and return the previous ones, restored below.
    let (old_gid, old_uid) = unsafe {
        let old_gid = libc::setfsgid(libc::getgid());
        let old_uid = libc::setfsuid(libc::getuid());
        (old_gid, old_uid)
    };
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    // SAFETY: restores this thread's filesystem ids read above.
    unsafe {
        libc::setfsuid(old_uid as libc::uid_t);
        libc::setfsgid(old_gid as libc::gid_t);
    }
    opened
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With SIGPIPE at its default action (terminate), as in a C program, a send to a peer
    /// that has gone is an error, and the process lives on.
    #[test]
    fn a_send_to_a_closed_peer_is_an_error_not_a_signal() {
        // SAFETY: sets this test process's SIGPIPE disposition back to the default; no
        // handler is installed. The Rust test harness had it ignored.
        let before = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(theirs);
        let sent = send_all(&ours, b"a call npud will never read");
        // SAFETY: restores the disposition read above.
        unsafe { libc::signal(libc::SIGPIPE, before) };
        assert_eq!(sent.map_err(|e| e.raw_os_error()), Err(Some(libc::EPIPE)));
    }
}
