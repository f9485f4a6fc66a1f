//! CPU time a server process spends per call, all its threads together.
//!
//! Latency on a shared machine moves with the neighbours; the CPU a server burns per call
//! does not (much). Where a latency ratio misses its target, this says whether the server
//! does more work or only waits longer.

use std::future::Future;

/// On-CPU nanoseconds of every live thread of `pid` (`/proc/<pid>/task/*/schedstat`).
/// Threads that exit during a measurement take their time with them; the servers measured
/// here keep theirs (tokio's workers) for the process's life.
pub fn cpu_ns(pid: u32) -> std::io::Result<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path().join("schedstat");
        // A thread that ended between the listing and the read has nothing left to count.
        let Ok(text) = std::fs::read_to_string(path) else { continue };
        let on_cpu = text.split_whitespace().next().and_then(|f| f.parse::<u64>().ok());
        total += on_cpu.ok_or_else(|| std::io::Error::other(format!("unreadable schedstat: {text:?}")))?;
    }
    Ok(total)
}

/// Microseconds of `pid`'s CPU per run of `op`, over `n` runs after `warmup` unmeasured ones.
pub async fn per_call<F, Fut>(pid: u32, warmup: usize, n: usize, mut op: F) -> std::io::Result<f64>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    for _ in 0..warmup {
        op().await;
    }
    let before = cpu_ns(pid)?;
    for _ in 0..n {
        op().await;
    }
    let used = cpu_ns(pid)?.saturating_sub(before);
    Ok(used as f64 / 1e3 / n.max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another process, as the bench measures: a single-threaded busy loop, so no thread
    /// comes or goes between the readings (this test binary's own test threads do).
    #[test]
    fn a_busy_process_is_counted() {
        let busy = crate::Reaped::spawn(std::process::Command::new("sh").args(["-c", "while :; do :; done"]));
        let before = cpu_ns(busy.id()).expect("the child's schedstat");
        let t = std::time::Instant::now();
        // Wait until 10 ms of its CPU show up; on a loaded machine that may take longer.
        while cpu_ns(busy.id()).expect("the child's schedstat").saturating_sub(before) < 10_000_000 {
            assert!(t.elapsed() < std::time::Duration::from_secs(60), "a minute of spinning counted as < 10 ms");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
