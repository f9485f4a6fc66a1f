//! Scale: many sessions, the whole stream budget live, create cost as streams pile up,
//! and how fast SIGKILLed clients' streams come back.

use super::{Samples, micros};
use crate::{Daemon, bin};
use npud_client::{Client, SessionOptions, Target, proto};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Debug, Clone)]
pub struct SessionScale {
    pub sessions: usize,
    pub open_us_p50: f64,
    pub bytes_per_session: f64,
}

/// Opens `n` sessions on one connection and measures time and memory per session.
pub async fn sessions(d: &Daemon, n: usize) -> SessionScale {
    let observer =
        Client::connect_with(Target::Socket(d.socket.clone()), SessionOptions { renew: false, ..Default::default() })
            .await
            .expect("connect");
    let mut svc = proto::session_service_client::SessionServiceClient::new(observer.channel());
    let before = rss_kib(d.pid());
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        svc.open(proto::OpenSessionRequest { name: String::new(), lease_ms: 600_000 }).await.expect("open");
        times.push(t.elapsed());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = rss_kib(d.pid());
    SessionScale {
        sessions: n,
        open_us_p50: micros(Samples(times).p50()),
        bytes_per_session: (after.saturating_sub(before) * 1024) as f64 / n as f64,
    }
}

#[derive(Debug, Clone)]
pub struct StreamScale {
    pub live: usize,
    pub bytes_per_stream: f64,
    /// (live streams, create+destroy p50 µs), both visits of each level together.
    pub create_cost: Vec<(usize, f64)>,
    /// The same for each visit in order, up and down: what moves with time shows here.
    pub visits: Vec<(usize, f64)>,
}

/// Fills the device to its whole budget, measuring create+destroy at several fill levels.
///
/// The levels are visited up and then down again (10, 100, 1000, 2000, 2000, 1000, 100,
/// 10), each level's cost the median of both visits' samples together: measured only on
/// the way up, the first level was also the first measurement, and a quick run read it
/// 337 µs against 437 µs at every later level (issue 59), whatever the count of live
/// streams. A cost that grows with the live count still shows; one that moves with time
/// or warm-up no longer reads as one.
pub async fn streams(d: &Daemon, levels: &[usize], iterations: usize) -> StreamScale {
    let c = Client::connect(Target::Socket(d.socket.clone())).await.expect("connect");
    let capacity = c.devices().await.expect("devices")[0].capacity as usize;
    let mut held = Vec::new();
    let before = rss_kib(d.pid());
    let mut svc = c.streams();
    let visits: Vec<usize> = levels.iter().chain(levels.iter().rev()).copied().collect();
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); levels.len()];
    let mut by_visit = Vec::new();
    for (i, &level) in visits.iter().enumerate() {
        let target = level.min(capacity.saturating_sub(1));
        while held.len() < target {
            let n = (target - held.len()).min(512) as u32;
            let made = svc
                .create(proto::CreateStreamsRequest { device: 0, count: n, ..Default::default() })
                .await
                .expect("fill");
            held.extend(made.into_inner().streams.into_iter().map(|s| s.handle));
        }
        if held.len() > target {
            let handles = held.split_off(target);
            for chunk in handles.chunks(512) {
                svc.destroy(proto::DestroyStreamsRequest { handles: chunk.to_vec() }).await.expect("empty");
            }
        }
        let slot = if i < levels.len() { i } else { visits.len() - 1 - i };
        let mut this = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let start = Instant::now();
            let made = svc
                .create(proto::CreateStreamsRequest { device: 0, count: 1, ..Default::default() })
                .await
                .expect("create");
            svc.destroy(proto::DestroyStreamsRequest { handles: vec![made.into_inner().streams[0].handle] })
                .await
                .expect("destroy");
            this.push(start.elapsed());
        }
        samples[slot].extend_from_slice(&this);
        by_visit.push((held.len(), micros(Samples(this).p50())));
    }
    let create_cost = levels
        .iter()
        .zip(samples)
        .map(|(&level, t)| (level.min(capacity.saturating_sub(1)), micros(Samples(t).p50())))
        .collect();
    while held.len() < capacity {
        let n = (capacity - held.len()).min(512) as u32;
        let made =
            svc.create(proto::CreateStreamsRequest { device: 0, count: n, ..Default::default() }).await.expect("fill");
        held.extend(made.into_inner().streams.into_iter().map(|s| s.handle));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = rss_kib(d.pid());
    let live = held.len();
    let _ = c.close().await;
    StreamScale {
        live,
        bytes_per_stream: (after.saturating_sub(before) * 1024) as f64 / live as f64,
        create_cost,
        visits: by_visit,
    }
}

/// K client processes hold streams; all are SIGKILLed; how long until the ledger is back.
pub async fn reclaim(d: &Daemon, clients: usize, streams_each: u32) -> Duration {
    let mut holders = Vec::new();
    for _ in 0..clients {
        let mut child = Command::new(bin("npud-holder"))
            .arg(&d.socket)
            .arg(streams_each.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("holder");
        let out = child.stdout.take().expect("stdout");
        for line in BufReader::new(out).lines() {
            if line.expect("line") == "ready" {
                break;
            }
        }
        holders.push(child);
    }
    let observer = Client::connect(Target::Socket(d.socket.clone())).await.expect("connect");
    assert_eq!(observer.devices().await.expect("devices")[0].in_use as usize, clients * streams_each as usize);
    let killed = Instant::now();
    for h in &mut holders {
        let _ = h.kill();
    }
    for h in &mut holders {
        let _ = h.wait();
    }
    loop {
        let dev = &observer.devices().await.expect("devices")[0];
        if dev.in_use == 0 && dev.draining == 0 {
            return killed.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
