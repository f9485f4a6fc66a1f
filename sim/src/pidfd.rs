//! Whether a process of this pid namespace still runs, asked through a pidfd kept open for
//! it (pidfd_open(2), Linux 5.3): one poll(2) per question, where reading
//! `/proc/<pid>/stat` took an open, a read the kernel formats some fifty fields for, and a
//! close. The budget asks it of every holder of a device each time the device is counted,
//! and npud counts a device on every exit in a crowd (issue 59): those reads were a
//! sixth of npud's CPU there, charged to npud though they are the fake driver's.
//!
//! A pidfd reads as readable once the whole process has ended (every thread, as the
//! driver frees a process's streams when its last thread goes), zombie or reaped. It names
//! one process, not a pid: one found ended is asked again by a fresh pidfd, so a pid the
//! kernel gave to a new process is seen alive.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The most pidfds one process keeps; past it they are all let go and opened again as
/// asked (a budget's holders are a few hundred).
const MAX_KEPT: usize = 1024;

/// Pidfds kept per pid.
#[derive(Default)]
pub struct Pidfds {
    kept: HashMap<u32, OwnedFd>,
}

impl Pidfds {
    /// Whether process `pid` runs; None where the kernel cannot say through a pidfd (no
    /// pidfd_open, or no descriptor left): the caller asks `/proc` instead.
    pub fn alive(&mut self, pid: u32) -> Option<bool> {
        if let Some(fd) = self.kept.get(&pid) {
            if !ended(fd)? {
                return Some(true);
            }
            // Ended: that process is gone, but the pid may name a new one now.
            self.kept.remove(&pid);
        }
        let fd = match open(pid) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Some(false),
            Err(_) => return None,
        };
        let ended = ended(&fd)?;
        if !ended {
            if self.kept.len() >= MAX_KEPT {
                self.kept.clear();
            }
            self.kept.insert(pid, fd);
        }
        Some(!ended)
    }
}

impl Pidfds {
    /// Lets go of the pidfds of processes `holds` says no longer hold anything: a kept
    /// descriptor lives no longer than its holder's line.
    pub fn keep_only(&mut self, holds: impl Fn(u32) -> bool) {
        self.kept.retain(|pid, _| holds(*pid));
    }
}

fn open(pid: u32) -> std::io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    match fd {
        -1 => Err(std::io::Error::last_os_error()),
        // SAFETY: a descriptor the kernel just opened for us, owned by nothing else.
        fd => Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }),
    }
}

/// Whether the process `fd` names has ended; None if poll(2) failed.
fn ended(fd: &OwnedFd) -> Option<bool> {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, no wait.
    match unsafe { libc::poll(&mut p, 1, 0) } {
        -1 => None,
        _ => Some(p.revents & libc::POLLIN != 0),
    }
}

#[cfg(test)]
mod tests {
    use super::Pidfds;

    /// A child is alive until it exits; once ended (a zombie not yet reaped, then
    /// reaped) it reads as gone; this process lives.
    #[test]
    fn a_child_lives_until_it_ends_and_its_zombie_is_gone() {
        let mut fds = Pidfds::default();
        let mut child = std::process::Command::new("sleep").arg("60").spawn().expect("spawn sleep");
        let pid = child.id();
        assert_eq!(fds.alive(pid), Some(true));
        assert_eq!(fds.alive(std::process::id()), Some(true));
        child.kill().expect("kill");
        // Not reaped yet: a zombie has ended; its streams would be freed.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while fds.alive(pid) != Some(false) {
            assert!(std::time::Instant::now() < deadline, "a killed child still reads alive");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.wait().expect("reap");
        assert_eq!(fds.alive(pid), Some(false), "reaped: no such process");
        assert_eq!(fds.alive(u32::MAX), Some(false), "a pid the kernel never gives");
    }
}
