//! Building blocks of npud-bench: latency samples, throughput runs, the floors.

pub mod calls;
pub mod cpu;
pub mod holders;
pub mod interposer;
pub mod native;
pub mod node;
pub mod peer;
pub mod profile;
pub mod scale;
pub mod standin;
pub mod timeline;
pub mod upgrade;

use std::time::{Duration, Instant};

/// A group of npud-bench's rows: what the JSON report gets, and each target with what this
/// run measured and whether it was met.
pub struct Rows {
    pub json: serde_json::Value,
    /// (target, what this run measured, met).
    pub targets: Vec<(String, String, bool)>,
}

/// Latency samples of one measured call.
#[derive(Debug, Clone, Default)]
pub struct Samples(pub Vec<Duration>);

impl Samples {
    pub fn percentile(&self, p: f64) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
        v[rank.min(v.len() - 1)]
    }
    pub fn p50(&self) -> Duration {
        self.percentile(50.0)
    }
    pub fn p99(&self) -> Duration {
        self.percentile(99.0)
    }
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Times `iterations` runs of `op` after `warmup` unmeasured ones.
pub async fn measure<F, Fut>(warmup: usize, iterations: usize, mut op: F) -> Samples
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..warmup {
        op().await;
    }
    let mut out = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t = Instant::now();
        op().await;
        out.push(t.elapsed());
    }
    Samples(out)
}

/// The same for a blocking operation.
pub fn measure_blocking(warmup: usize, iterations: usize, mut op: impl FnMut()) -> Samples {
    for _ in 0..warmup {
        op();
    }
    let mut out = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t = Instant::now();
        op();
        out.push(t.elapsed());
    }
    Samples(out)
}

/// A raw Unix-socket echo round trip (64 bytes): the physical floor of this machine.
pub fn unix_echo(iterations: usize) -> Samples {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("echo.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = [0u8; 64];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let mut c = std::os::unix::net::UnixStream::connect(&path).expect("connect");
    let mut buf = [7u8; 64];
    let samples = measure_blocking(1000, iterations, || {
        c.write_all(&buf).expect("write");
        c.read_exact(&mut buf).expect("read");
    });
    drop(c);
    let _ = server.join();
    samples
}

/// Runs `clients` concurrent loops of `op` for `duration`; returns operations per second.
pub async fn throughput<F, Fut>(clients: usize, duration: Duration, make: impl Fn(usize) -> F) -> f64
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let deadline = Instant::now() + duration;
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let mut op = make(i);
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    op().await;
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap_or(0);
    }
    total as f64 / duration.as_secs_f64()
}

/// Jain's fairness index of allocations: 1 is perfectly fair, 1/n is one takes all.
pub fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares == 0.0 { 1.0 } else { sum * sum / (x.len() as f64 * squares) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index_bounds() {
        assert!((jain(&[1.0, 1.0, 1.0]) - 1.0).abs() < 1e-9);
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-9);
    }

    #[test]
    fn percentiles() {
        let s = Samples((1..=100).map(Duration::from_micros).collect());
        assert_eq!(s.p50(), Duration::from_micros(51));
        assert_eq!(s.p99(), Duration::from_micros(99));
    }
}
