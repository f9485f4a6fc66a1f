//! The interposer's cost and effect: an unmodified program's start-up natively and under
//! the interposer, the round trips it makes, and the 40×60 scenario with real processes.

use super::Samples;
use crate::native::{acl_apps, acl_command, acl_daemon};
use crate::{free_port, metric};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Startup {
    pub streams: u32,
    pub native: Samples,
    pub interposed: Samples,
    /// Budget calls per interposed process, and the acquires among them.
    pub calls_per_process: f64,
    pub acquires_per_process: f64,
}

/// `runs` processes that each create `streams` (default stream included), hold nothing
/// and exit, natively and then with the interposer.
pub fn startup(streams: u32, runs: usize) -> Startup {
    let (program, _) = acl_apps();
    let dir = tempfile::tempdir().expect("temp dir");
    let shared = dir.path().join("budget");
    let port = free_port();
    let d = acl_daemon(&shared, None, &["--metrics", &format!("127.0.0.1:{port}")]);
    let created = (streams - 1).to_string();
    let time = |interposed: bool| {
        let mut cmd = acl_command(program, &shared, interposed.then_some((&d, streams)));
        cmd.args([created.as_str(), "0"]).stdout(Stdio::null());
        let t = Instant::now();
        let status = cmd.status().expect("run the program");
        assert!(status.success(), "the program failed ({status})");
        t.elapsed()
    };
    let calls = || {
        ["hello", "acquire", "release", "created", "share", "declare"]
            .iter()
            .map(|c| metric(port, &format!("npud_budget_calls_total{{call=\"{c}\"}}")).unwrap_or(0.0))
            .sum::<f64>()
    };
    // One of each first, so both sides run with warm page caches.
    time(false);
    time(true);
    let native = Samples((0..runs).map(|_| time(false)).collect());
    let (calls_before, acquires_before) = (calls(), metric(port, "npud_budget_calls_total{call=\"acquire\"}"));
    let interposed = Samples((0..runs).map(|_| time(true)).collect());
    // The quiet-batch report comes from a watcher thread; let the last one land.
    std::thread::sleep(Duration::from_millis(200));
    let acquires =
        metric(port, "npud_budget_calls_total{call=\"acquire\"}").unwrap_or(0.0) - acquires_before.unwrap_or(0.0);
    Startup {
        streams,
        native,
        interposed,
        calls_per_process: (calls() - calls_before) / runs as f64,
        acquires_per_process: acquires / runs as f64,
    }
}

#[derive(Debug, Clone)]
pub struct Crowd {
    pub processes: usize,
    pub failed: usize,
    pub makespan: Duration,
    /// Waves of processes the device holds at once, times the hold: the best any schedule
    /// can do.
    pub ideal: Duration,
}

/// `processes` programs of `streams` streams each (default included) started at once on
/// one device, holding `hold`; under npud when `managed`.
pub fn crowd(processes: usize, streams: u32, hold: Duration, managed: bool) -> Crowd {
    let (program, _) = acl_apps();
    let dir = tempfile::tempdir().expect("temp dir");
    let shared = dir.path().join("budget");
    let d = acl_daemon(&shared, None, &[]);
    let capacity = d.device0()["capacity"].as_u64().unwrap_or(0) as usize;
    let per_wave = (capacity / streams as usize).max(1);
    let waves = processes.div_ceil(per_wave) as u32;
    let (created, hold_ms) = ((streams - 1).to_string(), hold.as_millis().to_string());
    let t = Instant::now();
    let children: Vec<_> = (0..processes)
        .map(|_| {
            let mut cmd = acl_command(program, &shared, managed.then_some((&d, streams)));
            cmd.args([created.as_str(), hold_ms.as_str()]).stdout(Stdio::null());
            if managed {
                cmd.env("NPUD_WAIT", "10m");
            }
            cmd.spawn().expect("spawn the program")
        })
        .collect();
    let failed = children.into_iter().filter_map(|mut c| c.wait().ok()).filter(|s| !s.success()).count();
    Crowd { processes, failed, makespan: t.elapsed(), ideal: hold * waves }
}
