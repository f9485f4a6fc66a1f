//! Whether a peer's process still runs, asked of the kernel by pid (a pidfd: pidfd_open(2)
//! and a poll that does not wait), never through `/proc`, which npud may read through a
//! configured root that is not its own pid namespace's.
//!
//! A connection can outlive the process that opened it: a child made without the C
//! library's fork handlers, or a process the descriptor was passed to, keeps it open. The
//! device frees what a process held when it exits, so npud must too (`daemon::exits`).

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, pidfd_open};

/// What the kernel says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Running,
    /// Exited: gone, or a zombie its parent has not reaped (its resources are freed).
    Exited,
    /// Not known: pid 0 (a TCP peer, or one outside npud's pid namespace), a kernel without
    /// pidfds (before 5.3), or no descriptor left to ask with.
    Unknown,
}

/// Asks the kernel whether process `pid` (a thread-group id, as peer credentials give)
/// still runs. Holds no descriptor past the call.
pub fn of(pid: u32) -> Liveness {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Liveness::Unknown;
    };
    let fd = match pidfd_open(pid, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(Errno::SRCH) => return Liveness::Exited,
        Err(_) => return Liveness::Unknown,
    };
    // A pidfd reads as readable once the whole process has exited.
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    match poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })) {
        Ok(0) => Liveness::Running,
        Ok(_) if fds[0].revents().contains(PollFlags::IN) => Liveness::Exited,
        _ => Liveness::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_pid_zero_is_unknown() {
        assert_eq!(of(std::process::id()), Liveness::Running);
        assert_eq!(of(0), Liveness::Unknown);
        assert_eq!(of(u32::MAX), Liveness::Unknown, "not a pid at all");
    }

    #[test]
    fn a_child_that_exited_reads_as_exited_before_and_after_it_is_reaped() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        // Not reaped yet: a zombie, whose resources the kernel has already freed.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while of(pid) == Liveness::Running {
            assert!(std::time::Instant::now() < deadline, "true never exited");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(of(pid), Liveness::Exited, "a zombie has exited");
        child.wait().expect("reaped");
        // Reaped: the pid names nothing (unless already reused, which 30 s of a test's
        // pids do not reach).
        assert_eq!(of(pid), Liveness::Exited);
    }
}
