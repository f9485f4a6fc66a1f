//! Soak: a bounded run at steady load with churn. Clients keep creating and destroying
//! streams and events, running callbacks, closing and re-opening sessions, and some just
//! vanish (their leases lapse). Every sample records the daemon's memory, threads, file
//! descriptors and handle counts. The verdict fails if memory or descriptors grow, or if
//! anything is left over once the load stops.
//!
//!     cargo build --release --workspace --bins
//!     target/release/npud-soak --duration 10m --clients 8 --json soak.json

use npud_tests::{Client, Daemon, EventOptions, StreamOptions, Target};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    at_s: f64,
    rss_kib: u64,
    threads: u64,
    fds: u64,
    sessions: u32,
    streams: u32,
    events: u32,
    callbacks: u32,
    pooled: u32,
    ops_per_s: f64,
}

fn proc_status(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

async fn worker(target: Target, id: u64, stop: Arc<AtomicBool>, ops: Arc<AtomicU64>) {
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        let Ok(client) = Client::connect(target.clone()).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let dev = client.device(0);
        for i in 0..50u64 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let n = 1 + ((id + i) % 8) as u32;
            let Ok(streams) =
                dev.create_streams(n, StreamOptions { wait: Duration::from_secs(5), ..Default::default() }).await
            else {
                continue;
            };
            let ev = dev.create_event(EventOptions::default()).await.ok();
            let s = &streams[0];
            let _ = s.delay(Duration::from_micros(200)).await;
            if let Some(e) = &ev {
                let _ = s.record(e).await;
            }
            if i % 10 == 0 {
                let _ = client.subscribe(id, s.handle()).await;
                let _ = client.launch_callback(s.handle(), vec![1; 64], false).await;
            }
            let _ = s.sync().await;
            for st in streams {
                let _ = st.close().await;
            }
            if let Some(e) = ev {
                let _ = e.close().await;
            }
            ops.fetch_add(u64::from(n) + 6, Ordering::Relaxed);
        }
        // Churn: most sessions close, every fifth client just vanishes and its lease lapses.
        if !round.is_multiple_of(5) {
            let _ = client.close().await;
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut duration = Duration::from_secs(60);
    let mut clients = 8u64;
    let mut every = Duration::from_secs(5);
    let mut json_path = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| anyhow::anyhow!("{flag} needs a value"));
        match flag.as_str() {
            "--duration" => duration = npud_tests::parse_duration(&value()?)?,
            "--clients" => clients = value()?.parse()?,
            "--sample" => every = npud_tests::parse_duration(&value()?)?,
            "--json" => json_path = Some(value()?),
            "--help" | "-h" => {
                println!("npud-soak [--duration 60s|10m] [--clients N] [--sample 5s] [--json FILE]");
                return Ok(());
            }
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    anyhow::ensure!((1..=256).contains(&clients), "--clients must be 1..=256");
    let daemon = Daemon::builder().args(&["--lease", "1s"]).config("check_invariants = true").start();
    let pid = daemon.pid();
    let observer = Client::connect(Target::Socket(daemon.socket.clone())).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..clients)
        .map(|id| tokio::spawn(worker(Target::Socket(daemon.socket.clone()), id, Arc::clone(&stop), Arc::clone(&ops))))
        .collect();
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut last_ops = 0;
    let mut last_at = started;
    let sample = |at: Instant, ops_per_s: f64| {
        let observer = observer.clone();
        async move {
            let s = observer.status().await.ok()?;
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count() as u64).unwrap_or(0);
            Some(Sample {
                at_s: at.duration_since(started).as_secs_f64(),
                rss_kib: proc_status(pid, "VmRSS:"),
                threads: proc_status(pid, "Threads:"),
                fds,
                sessions: s.sessions,
                streams: s.streams,
                events: s.events,
                callbacks: s.callbacks_in_flight,
                pooled: s.devices[0].pooled,
                ops_per_s,
            })
        }
    };
    println!(
        "{:>7} {:>9} {:>7} {:>5} {:>8} {:>7} {:>6} {:>9} {:>6} {:>9}",
        "time", "rss KiB", "threads", "fds", "sessions", "streams", "events", "callbacks", "pooled", "ops/s"
    );
    let print = |s: &Sample| {
        println!(
            "{:>6.0}s {:>9} {:>7} {:>5} {:>8} {:>7} {:>6} {:>9} {:>6} {:>9.0}",
            s.at_s, s.rss_kib, s.threads, s.fds, s.sessions, s.streams, s.events, s.callbacks, s.pooled, s.ops_per_s
        );
    };
    while started.elapsed() < duration {
        tokio::time::sleep(every.min(duration.saturating_sub(started.elapsed())).max(Duration::from_millis(10))).await;
        let now = Instant::now();
        let total = ops.load(Ordering::Relaxed);
        let rate = (total - last_ops) as f64 / now.duration_since(last_at).as_secs_f64();
        (last_ops, last_at) = (total, now);
        if let Some(s) = sample(now, rate).await {
            print(&s);
            samples.push(s);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    // Let the vanished clients' leases lapse, then look at what is left.
    let mut end = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(s) = sample(Instant::now(), 0.0).await {
            end = Some(s);
            if s.sessions == 1 && s.streams == 0 && s.events == 0 && s.callbacks == 0 {
                break;
            }
        }
    }
    let end = end.ok_or_else(|| anyhow::anyhow!("no final sample"))?;
    println!("after the load stopped:");
    print(&end);
    let violations = observer.status().await?.invariant_violations;
    let warm = samples.get(samples.len() / 4).copied().unwrap_or_default();
    let last = samples.last().copied().unwrap_or_default();
    let rss_growth = last.rss_kib as f64 - warm.rss_kib as f64;
    let rss_ok = rss_growth <= (warm.rss_kib as f64 * 0.10).max(4096.0);
    let fds_ok = last.fds <= warm.fds + 8;
    let threads_ok = last.threads <= warm.threads + 8;
    let clean = end.sessions == 1 && end.streams == 0 && end.events == 0 && end.callbacks == 0;
    let verdict = rss_ok && fds_ok && threads_ok && clean && violations == 0;
    println!(
        "rss {} -> {} KiB ({:+.0} KiB), fds {} -> {}, threads {} -> {}, left over: {} sessions {} streams {} events {} callbacks, invariant violations {violations}",
        warm.rss_kib,
        last.rss_kib,
        rss_growth,
        warm.fds,
        last.fds,
        warm.threads,
        last.threads,
        end.sessions - 1,
        end.streams,
        end.events,
        end.callbacks
    );
    println!("verdict: {}", if verdict { "ok" } else { "FAILED" });
    if let Some(path) = json_path {
        let rows: Vec<_> = samples
            .iter()
            .map(|s| serde_json::json!({"t": s.at_s, "rss_kib": s.rss_kib, "threads": s.threads, "fds": s.fds, "sessions": s.sessions, "streams": s.streams, "events": s.events, "ops_per_s": s.ops_per_s}))
            .collect();
        std::fs::write(
            path,
            serde_json::to_string_pretty(
                &serde_json::json!({"samples": rows, "verdict": verdict, "rss_growth_kib": rss_growth}),
            )?,
        )?;
    }
    anyhow::ensure!(verdict, "the soak failed");
    Ok(())
}
