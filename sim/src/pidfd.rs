//! Whether a process of this pid namespace still runs, asked through a pidfd (pidfd_open(2),
//! Linux 5.3): open, one poll(2), close. Reading `/proc/<pid>/stat` walked a path and had
//! the kernel format some fifty fields; the budget asks it of every holder of a device each
//! time the device is counted, and npud counts a device on every exit in a crowd (issue
//! 59), so those reads were a sixth of npud's CPU there, charged to npud though they are
//! the fake driver's work.
//!
//! A pidfd reads as readable once the whole process has ended (every thread, as the driver
//! frees a process's streams when its last thread goes), zombie or reaped. None is kept
//! open: the fake must not hold descriptors in the processes that load it (npud sizes its
//! connections by its descriptors).
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Whether process `pid` runs; None where the kernel cannot say through a pidfd (no
/// pidfd_open, a filter refusing it, or no descriptor left): the caller asks `/proc`.
pub fn alive(pid: u32) -> Option<bool> {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return Some(false) };
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd == -1 {
        return match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => Some(false),
            _ => None,
        };
    }
    // SAFETY: a descriptor the kernel just opened for us, owned by nothing else; closed
    // when `fd` drops.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, no wait.
    match unsafe { libc::poll(&mut p, 1, 0) } {
        -1 => None,
        _ => Some(p.revents & libc::POLLIN == 0),
    }
}

#[cfg(test)]
mod tests {
    use super::alive;

    /// A child is alive until it exits; once ended (a zombie not yet reaped, then
    /// reaped) it reads as gone; this process lives.
    #[test]
    fn a_child_lives_until_it_ends_and_its_zombie_is_gone() {
        let mut child = std::process::Command::new("sleep").arg("60").spawn().expect("spawn sleep");
        let pid = child.id();
        assert_eq!(alive(pid), Some(true));
        assert_eq!(alive(std::process::id()), Some(true));
        child.kill().expect("kill");
        // Not reaped yet: a zombie has ended; its streams would be freed.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while alive(pid) != Some(false) {
            assert!(std::time::Instant::now() < deadline, "a killed child still reads alive");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.wait().expect("reap");
        assert_eq!(alive(pid), Some(false), "reaped: no such process");
        assert_eq!(alive(u32::MAX), Some(false), "a pid the kernel never gives");
    }

    /// A process whose main thread left while another runs still lives (its streams
    /// stay until its last thread goes), as `/proc` says of it.
    #[test]
    fn a_process_whose_main_thread_left_lives() {
        let script = "import threading,time,os\nt=threading.Thread(target=time.sleep,args=(30,))\nt.start()\nprint(os.getpid(),flush=True)\nimport ctypes\nctypes.CDLL(None).pthread_exit(None)\n";
        let Ok(mut child) =
            std::process::Command::new("python3").args(["-c", script]).stdout(std::process::Stdio::piped()).spawn()
        else {
            eprintln!("SKIPPED: no python3 to make a process whose main thread leaves");
            return;
        };
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().expect("stdout")), &mut line)
            .expect("its pid");
        // The kernel shows the leader as a zombie once the main thread left.
        let leader_gone = || {
            std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
                .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !leader_gone() {
            assert!(std::time::Instant::now() < deadline, "the main thread never left");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(alive(child.id()), Some(true), "its other thread runs");
        let _ = child.kill();
        let _ = child.wait();
    }
}
