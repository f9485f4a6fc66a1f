//! Per-call costs through the daemon and in-process, and throughput by concurrency.

use super::{Samples, measure, measure_blocking, throughput};
use npud_client::{Client, EventOptions, StreamOptions, proto};
use std::time::Duration;
use tokio_stream::StreamExt;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

type Streams = proto::stream_service_client::StreamServiceClient<npud_client::SessionChannel>;

/// One stream created and destroyed again, one RPC each.
async fn create_and_destroy(mut s: Streams) {
    let made = s
        .create(proto::CreateStreamsRequest { device: 0, count: 1, ..Default::default() })
        .await
        .expect("create")
        .into_inner();
    s.destroy(proto::DestroyStreamsRequest { handles: vec![made.streams[0].handle] }).await.expect("destroy");
}

/// Cost of each measured call, one client, sequential.
pub async fn through_daemon(client: &Client, warmup: usize, n: usize) -> Vec<(&'static str, Samples)> {
    let mut out = Vec::new();
    let mut health = HealthClient::new(client.channel());
    out.push((
        "empty gRPC call (health check)",
        measure(warmup, n, || {
            let mut h = health.clone();
            async move {
                h.check(HealthCheckRequest { service: String::new() }).await.expect("health");
            }
        })
        .await,
    ));
    let _ = health.check(HealthCheckRequest { service: String::new() }).await;
    let streams = client.streams();
    out.push(("create+destroy stream", measure(warmup, n, || create_and_destroy(streams.clone())).await));
    let stream = client.device(0).create_stream(StreamOptions::default()).await.expect("stream");
    let event = client.device(0).create_event(EventOptions::default()).await.expect("event");
    let (sh, eh) = (stream.handle(), event.handle());
    let events = client.events();
    out.push((
        "record+query event",
        measure(warmup, n, || {
            let mut e = events.clone();
            async move {
                e.record(proto::RecordEventRequest { event: eh, stream: sh }).await.expect("record");
                e.query(proto::QueryEventRequest { handle: eh }).await.expect("query");
            }
        })
        .await,
    ));
    client.subscribe(1, sh).await.expect("subscribe");
    let mut reports = client.report_stream(0).await.expect("reports");
    let reports_ref = &mut reports;
    let mut launched = Vec::with_capacity(n + warmup);
    for _ in 0..warmup + n {
        let t = std::time::Instant::now();
        client.launch_callback(sh, vec![1], false).await.expect("launch");
        reports_ref.next().await.expect("a report").expect("ok");
        launched.push(t.elapsed());
    }
    out.push(("launch+deliver callback", Samples(launched.split_off(warmup))));
    drop((stream, event));
    out
}

/// The floor rows and the single RPCs the targets bound, measured interleaved (one client
/// each, sequential): every round makes one call of each kind, so a noisy neighbour slows
/// them all alike and the ratios of one run stay comparable.
pub struct Interleaved {
    /// The same health check against a plain tonic server with default settings (`peer.rs`).
    pub peer_empty: Samples,
    /// npud's empty call (the health check).
    pub empty: Samples,
    pub singles: Vec<(&'static str, Samples)>,
}

pub async fn interleaved(client: &Client, peer: &std::path::Path, warmup: usize, n: usize) -> Interleaved {
    let channel = npud_client::channel(&npud_client::Target::Socket(peer.to_path_buf())).await.expect("the peer");
    let (mut peer_health, mut health) = (HealthClient::new(channel), HealthClient::new(client.channel()));
    let (mut streams, mut events) = (client.streams(), client.events());
    let stream = client.device(0).create_stream(StreamOptions::default()).await.expect("stream");
    let event = client.device(0).create_event(EventOptions::default()).await.expect("event");
    let (sh, eh) = (stream.handle(), event.handle());
    let mut rows: [Vec<Duration>; 6] = Default::default();
    let check = || HealthCheckRequest { service: String::new() };
    for _ in 0..warmup + n {
        let mut t = std::time::Instant::now();
        let mut lap = |row: &mut Vec<Duration>| {
            row.push(t.elapsed());
            t = std::time::Instant::now();
        };
        peer_health.check(check()).await.expect("peer health");
        lap(&mut rows[0]);
        health.check(check()).await.expect("health");
        lap(&mut rows[1]);
        let made = streams
            .create(proto::CreateStreamsRequest { device: 0, count: 1, ..Default::default() })
            .await
            .expect("create")
            .into_inner();
        lap(&mut rows[2]);
        streams.destroy(proto::DestroyStreamsRequest { handles: vec![made.streams[0].handle] }).await.expect("destroy");
        lap(&mut rows[3]);
        events.record(proto::RecordEventRequest { event: eh, stream: sh }).await.expect("record");
        lap(&mut rows[4]);
        events.query(proto::QueryEventRequest { handle: eh }).await.expect("query");
        lap(&mut rows[5]);
    }
    drop((stream, event));
    let [peer_empty, empty, create, destroy, record, query] = rows.map(|mut v| Samples(v.split_off(warmup)));
    Interleaved {
        peer_empty,
        empty,
        singles: vec![
            ("create stream", create),
            ("destroy stream", destroy),
            ("record event", record),
            ("query event", query),
        ],
    }
}

/// Microseconds of server CPU (all threads) per call, one client, sequential: the peer's
/// empty call, npud's, and npud's RPCs. `peer` is the peer server's socket and process id.
pub async fn server_cpu(
    client: &Client,
    daemon: u32,
    peer: (&std::path::Path, u32),
    warmup: usize,
    n: usize,
) -> anyhow::Result<Vec<(&'static str, f64)>> {
    use super::cpu::per_call;
    let channel = npud_client::channel(&npud_client::Target::Socket(peer.0.to_path_buf())).await?;
    let (peer_health, health) = (HealthClient::new(channel), HealthClient::new(client.channel()));
    let (streams, events) = (client.streams(), client.events());
    let stream = client.device(0).create_stream(StreamOptions::default()).await?;
    let event = client.device(0).create_event(EventOptions::default()).await?;
    let (sh, eh) = (stream.handle(), event.handle());
    let check = || HealthCheckRequest { service: String::new() };
    let mut out = Vec::new();
    for (name, pid, health) in
        [("peer: plain tonic server, empty call", peer.1, peer_health), ("npud: empty call", daemon, health)]
    {
        let cpu = per_call(pid, warmup, n, || {
            let mut h = health.clone();
            async move {
                h.check(check()).await.expect("health");
            }
        })
        .await?;
        out.push((name, cpu));
    }
    out.push((
        "create+destroy stream (2 RPCs)",
        per_call(daemon, warmup, n, || create_and_destroy(streams.clone())).await?,
    ));
    out.push((
        "record event",
        per_call(daemon, warmup, n, || {
            let mut e = events.clone();
            async move {
                e.record(proto::RecordEventRequest { event: eh, stream: sh }).await.expect("record");
            }
        })
        .await?,
    ));
    out.push((
        "query event",
        per_call(daemon, warmup, n, || {
            let mut e = events.clone();
            async move {
                e.query(proto::QueryEventRequest { handle: eh }).await.expect("query");
            }
        })
        .await?,
    ));
    drop((stream, event));
    Ok(out)
}

/// The same calls through npud's own layers (tenancy resolved, session, quota, ledger,
/// pool, registry) on the simulator, without gRPC: what npud's work costs per call, so
/// the single-RPC rows can be split into npud's work and the transport's.
pub async fn daemon_layer(warmup: usize, n: usize) -> anyhow::Result<Vec<(&'static str, Samples)>> {
    use npud::daemon::streams::CreateRequest;
    use std::time::Instant;
    let args = <npud::config::Args as clap::Parser>::try_parse_from(["npud", "--socket", "/nonexistent/npud.sock"])?;
    let daemon = npud::Daemon::open(npud::Config::load(&args)?)?;
    let caller = npud::types::Caller { tenant: "bench".into(), admin: false, uid: 0 };
    let (session, ..) = daemon.open_session(&caller, "bench", 0)?;
    let request = CreateRequest { device: 0, count: 1, priority: 0, flags: 0, wait: Duration::ZERO };
    let (mut create, mut destroy) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..warmup + n {
        let t = Instant::now();
        let (made, _) = daemon.create_streams(&caller, session, request).await?;
        let created = t.elapsed();
        let t = Instant::now();
        daemon.destroy_streams(&caller, &[made[0].handle])?;
        if i >= warmup {
            create.push(created);
            destroy.push(t.elapsed());
        }
    }
    let stream = daemon.create_streams(&caller, session, request).await?.0[0].handle;
    let (event, _) = daemon.create_event(&caller, session, 0, 0, false)?;
    let (mut record, mut query) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..warmup + n {
        let t = Instant::now();
        daemon.record_event(&caller, event, stream)?;
        let recorded = t.elapsed();
        let t = Instant::now();
        daemon.query_event(&caller, event)?;
        if i >= warmup {
            record.push(recorded);
            query.push(t.elapsed());
        }
    }
    daemon.close_session(&caller, session, "").await?;
    Ok(vec![
        ("create stream (npud's layers, no gRPC)", Samples(create)),
        ("destroy stream (npud's layers, no gRPC)", Samples(destroy)),
        ("record event (npud's layers, no gRPC)", Samples(record)),
        ("query event (npud's layers, no gRPC)", Samples(query)),
    ])
}

/// The same work against npu-sim in-process: what the daemon adds is the difference.
pub fn in_process(warmup: usize, n: usize) -> Vec<(&'static str, Samples)> {
    use npu_sim::{Profile, SimDevice, SimOptions};
    let dev = SimDevice::new(0, Profile::default(), SimOptions::default());
    dev.create_context().expect("context");
    let mut out = Vec::new();
    out.push((
        "create+destroy stream (in-process sim)",
        measure_blocking(warmup, n, || {
            let s = dev.create_stream(0, 0).expect("create");
            dev.destroy_stream(s).expect("destroy");
        }),
    ));
    let s = dev.create_stream(0, 0).expect("stream");
    let e = dev.create_event(npu_sim::flags::EVENT_DEFAULT, true).expect("event");
    out.push((
        "record+query event (in-process sim)",
        measure_blocking(warmup, n, || {
            dev.record_event(e, s).expect("record");
            dev.event_state(e).expect("query");
        }),
    ));
    let (tx, rx) = std::sync::mpsc::channel();
    dev.set_report_sink(std::sync::Arc::new(move |r| {
        let _ = tx.send(r);
    }));
    let mut id = 0;
    out.push((
        "launch+deliver callback (in-process sim)",
        measure_blocking(warmup, n, || {
            id += 1;
            dev.launch_callback(s, id, false).expect("launch");
            rx.recv().expect("report");
        }),
    ));
    // What normalising `:authority` on the Unix socket adds to each new connection's first
    // request: a fresh rewriter (its HPACK tables included) over a grpcio-style request.
    let request = grpcio_style_request();
    out.push((
        "authority rewrite of a request (in-process)",
        measure_blocking(warmup, n, || {
            let mut r = npud::tenancy::authority::AuthorityRewriter::default();
            r.feed(&request).expect("a well-formed request");
            assert!(!r.output().is_empty());
        }),
    ));
    out
}

/// The client preface, an empty SETTINGS, a gRPC request's HEADERS as grpc-core sends them
/// on a Unix socket (the socket path as `:authority`) and its DATA.
fn grpcio_style_request() -> Vec<u8> {
    fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u8, payload: &[u8]) {
        let len = payload.len();
        out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags, 0, 0, 0, stream]);
        out.extend_from_slice(payload);
    }
    let headers: [(&[u8], &[u8]); 8] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/grpc.health.v1.Health/Check"),
        (b":authority", b"/run/npud/npud.sock"),
        (b"te", b"trailers"),
        (b"content-type", b"application/grpc"),
        (b"user-agent", b"grpc-python/1.85.1 grpc-c/50.0.0 (linux; chttp2)"),
        (b"grpc-accept-encoding", b"identity, deflate, gzip"),
    ];
    let block = loona_hpack::Encoder::new().encode(headers);
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut out, 0x4, 0, 0, &[]);
    frame(&mut out, 0x1, 0x4, 1, &block);
    frame(&mut out, 0x0, 0x1, 1, &[0, 0, 0, 0, 0]);
    out
}

/// Operations per second with `clients` concurrent clients, each on its own connection:
/// (empty call, record event, create+destroy stream). The three alternate in three rounds
/// of a third of `duration` each, so drift on a shared machine hits them alike.
pub async fn concurrency(clients: &[Client], duration: Duration) -> (f64, f64, f64) {
    let mut pairs = Vec::new();
    for c in clients {
        let s = c.device(0).create_stream(StreamOptions::default()).await.expect("stream").leak();
        let e = c.device(0).create_event(EventOptions::default()).await.expect("event").leak();
        pairs.push((s, e));
    }
    let slice = duration / 3;
    let (mut empty, mut record, mut create) = (0.0, 0.0, 0.0);
    for _ in 0..3 {
        empty += throughput(clients.len(), slice, |i| {
            let h = HealthClient::new(clients[i].channel());
            move || {
                let mut h = h.clone();
                async move {
                    let _ = h.check(HealthCheckRequest { service: String::new() }).await;
                }
            }
        })
        .await;
        record += throughput(clients.len(), slice, |i| {
            let events = clients[i].events();
            let (s, e) = pairs[i];
            move || {
                let mut ev = events.clone();
                async move {
                    let _ = ev.record(proto::RecordEventRequest { event: e, stream: s }).await;
                }
            }
        })
        .await;
        create += throughput(clients.len(), slice, |i| {
            let streams = clients[i].streams();
            move || {
                let mut st = streams.clone();
                async move {
                    if let Ok(made) = st
                        .create(proto::CreateStreamsRequest {
                            device: 0,
                            count: 1,
                            wait_ms: 1000,
                            ..Default::default()
                        })
                        .await
                    {
                        let _ = st
                            .destroy(proto::DestroyStreamsRequest {
                                handles: vec![made.into_inner().streams[0].handle],
                            })
                            .await;
                    }
                }
            }
        })
        .await;
    }
    (empty / 3.0, record / 3.0, create / 3.0)
}
