//! The contention scenario: N jobs, each a separate `npuctl` process that asks for S
//! streams with a wait, holds them, and closes its session, all against one device.
//! A job that fails exits without closing its session, like a framework process that
//! dies half-way through start-up: what it took stays taken ("leaked") until its lease.

use crate::{Daemon, bin};
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Scenario {
    pub policy: String,
    pub profile: String,
    pub jobs: usize,
    pub streams_per_job: u32,
    pub hold: Duration,
    pub wait: Duration,
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub scenario: Scenario,
    pub succeeded: usize,
    pub failed: usize,
    /// Streams still held by failed jobs once every job has ended.
    pub leaked_streams: u64,
    pub grant_ms: Vec<f64>,
    pub makespan: Duration,
    pub failure_reasons: Vec<String>,
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

impl Outcome {
    pub fn p50(&self) -> f64 {
        percentile(&self.grant_ms, 50.0)
    }
    pub fn p99(&self) -> f64 {
        percentile(&self.grant_ms, 99.0)
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "policy": self.scenario.policy,
            "profile": self.scenario.profile,
            "jobs": self.scenario.jobs,
            "streams_per_job": self.scenario.streams_per_job,
            "hold_ms": self.scenario.hold.as_millis() as u64,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "leaked_streams": self.leaked_streams,
            "grant_ms_p50": self.p50(),
            "grant_ms_p99": self.p99(),
            "makespan_ms": self.makespan.as_millis() as u64,
        })
    }
}

pub fn run(scenario: &Scenario) -> Outcome {
    let daemon = Daemon::builder().args(&["--policy", &scenario.policy, "--sim-profile", &scenario.profile]).start();
    let started = Instant::now();
    let socket = daemon.socket.clone();
    let npuctl = bin("npuctl");
    let threads: Vec<_> = (0..scenario.jobs)
        .map(|job| {
            let (socket, npuctl, s) = (socket.clone(), npuctl.clone(), scenario.clone());
            std::thread::spawn(move || {
                let session = format!("job-{job}");
                let asked = Instant::now();
                let out = Command::new(&npuctl)
                    .arg("--socket")
                    .arg(&socket)
                    .args(["-o", "json", "stream", "create", "--flags", "fast-launch,fast-sync", "--session", &session])
                    .args(["--count", &s.streams_per_job.to_string(), "--wait", &format!("{}ms", s.wait.as_millis())])
                    .output();
                let granted = asked.elapsed();
                match out {
                    Ok(o) if o.status.success() => {
                        std::thread::sleep(s.hold);
                        let _ = Command::new(&npuctl)
                            .arg("--socket")
                            .arg(&socket)
                            .args(["session", "close", &session])
                            .output();
                        Ok(granted)
                    }
                    Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
                    Err(e) => Err(e.to_string()),
                }
            })
        })
        .collect();
    let mut outcome = Outcome {
        scenario: scenario.clone(),
        succeeded: 0,
        failed: 0,
        leaked_streams: 0,
        grant_ms: Vec::new(),
        makespan: Duration::ZERO,
        failure_reasons: Vec::new(),
    };
    for t in threads {
        match t.join() {
            Ok(Ok(granted)) => {
                outcome.succeeded += 1;
                outcome.grant_ms.push(granted.as_secs_f64() * 1e3);
            }
            Ok(Err(reason)) => {
                outcome.failed += 1;
                outcome.failure_reasons.push(reason);
            }
            Err(_) => outcome.failed += 1,
        }
    }
    outcome.makespan = started.elapsed();
    outcome.grant_ms.sort_by(f64::total_cmp);
    outcome.leaked_streams = daemon.in_use();
    outcome
}
