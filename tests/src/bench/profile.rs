//! `npud-bench --loop CALL SECONDS`: one client making one kind of call back to back
//! against a fresh daemon, for a profiler to watch (`perf record -p <pid>` with the pid it
//! prints). What BENCHMARKS.md's profiles were taken with. `peer-empty` makes the same
//! empty call against the plain tonic server (`peer.rs`) instead, for the comparison.

use npud_client::{Client, Target, proto};
use std::time::{Duration, Instant};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

/// The calls a loop can make.
pub const CALLS: &[&str] = &["empty", "peer-empty", "create-destroy", "record"];

/// The plain tonic server's empty call back to back for `run_for`; returns how many were made.
pub async fn run_peer(peer: &crate::bench::peer::Peer, run_for: Duration) -> anyhow::Result<u64> {
    let mut health = HealthClient::new(npud_client::channel(&Target::Socket(peer.socket.clone())).await?);
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < run_for {
        health.check(HealthCheckRequest { service: String::new() }).await?;
        n += 1;
    }
    Ok(n)
}

/// Runs `call` for `run_for` against `d`; returns how many were made.
pub async fn run(d: &crate::Daemon, call: &str, run_for: Duration) -> anyhow::Result<u64> {
    let client = Client::connect(Target::Socket(d.socket.clone())).await?;
    let mut health = HealthClient::new(client.channel());
    let mut streams = client.streams();
    let mut events = client.events();
    let stream = client.device(0).create_stream(npud_client::StreamOptions::default()).await?;
    let event = client.device(0).create_event(npud_client::EventOptions::default()).await?;
    let (sh, eh) = (stream.handle(), event.handle());
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < run_for {
        match call {
            "empty" => {
                health.check(HealthCheckRequest { service: String::new() }).await?;
            }
            "create-destroy" => {
                let made = streams
                    .create(proto::CreateStreamsRequest { device: 0, count: 1, ..Default::default() })
                    .await?
                    .into_inner();
                let handles = made.streams.iter().map(|s| s.handle).collect();
                streams.destroy(proto::DestroyStreamsRequest { handles }).await?;
            }
            "record" => {
                events.record(proto::RecordEventRequest { event: eh, stream: sh }).await?;
            }
            other => anyhow::bail!("unknown call {other:?}; one of {}", CALLS.join(", ")),
        }
        n += 1;
    }
    Ok(n)
}
