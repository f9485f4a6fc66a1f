//! Test helper: a scriptable client in its own process. It reads one command per line on
//! stdin and answers one JSON line each; it connects only on its first command, so a test
//! can first plant a fake cgroup for its pid (container identity) or run it under another
//! uid. Commands: tenant, create N, create-on DEVICE N WAIT_MS, destroy-all, list, get H,
//! destroy H, sync H, query H, status,
//! event-create, event-record E S, event-sync E, wait-event S E, reports MS, set-quota T N,
//! launch S, subscribe T S; and, on a budget-wire session of its own (kept open, its
//! holdings with it), declare DEVICE N (after a restart: streams it says it holds); and
//! race DEVICES ROUNDS COUNT: a budget session per device (presenting `$NPUD_ALLOCATION`'s
//! token), all asking for COUNT at once each round, answering the most granted together.

use npud_client::{Client, EventOptions, StreamOptions, Target, proto};
use serde_json::{Value, json};
use std::io::BufRead;
use std::time::Duration;
use tokio_stream::StreamExt;

fn err(e: npud_client::Error) -> Value {
    json!({ "error": format!("{:?}", e.code().unwrap_or(tonic::Code::Unknown)), "reason": e.reason().map(|r| r.as_str_name()), "message": e.to_string() })
}

async fn run(client: &Client, words: &[&str]) -> Result<Value, npud_client::Error> {
    let num = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok()).unwrap_or(0);
    let ok = json!({ "ok": true });
    Ok(match words.first().copied().unwrap_or("") {
        "tenant" => json!({ "tenant": client.tenant() }),
        "create" => {
            let streams = client.device(0).create_streams(num(1) as u32, StreamOptions::default()).await?;
            json!({ "handles": streams.into_iter().map(|s| s.leak()).collect::<Vec<_>>() })
        }
        "create-on" => {
            let options = StreamOptions { wait: Duration::from_millis(num(3)), ..Default::default() };
            let streams = client.device(num(1) as u32).create_streams(num(2) as u32, options).await?;
            json!({ "handles": streams.into_iter().map(|s| s.leak()).collect::<Vec<_>>() })
        }
        "destroy-all" => {
            let list = client.streams().list(proto::ListStreamsRequest {}).await?.into_inner().streams;
            let handles: Vec<u64> = list.iter().map(|s| s.handle).collect();
            if !handles.is_empty() {
                client.streams().destroy(proto::DestroyStreamsRequest { handles: handles.clone() }).await?;
            }
            json!({ "destroyed": handles.len() })
        }
        "list" => {
            let list = client.streams().list(proto::ListStreamsRequest {}).await?.into_inner().streams;
            json!({ "handles": list.iter().map(|s| s.handle).collect::<Vec<_>>() })
        }
        "get" => {
            json!({ "handle": client.streams().get(proto::GetStreamRequest { handle: num(1) }).await?.into_inner().handle })
        }
        "destroy" => {
            client.streams().destroy(proto::DestroyStreamsRequest { handles: vec![num(1)] }).await?;
            ok
        }
        "sync" => {
            client.streams().synchronize(proto::SynchronizeStreamRequest { handle: num(1), timeout_ms: 1000 }).await?;
            ok
        }
        "query" => {
            json!({ "state": client.streams().query(proto::QueryStreamRequest { handle: num(1) }).await?.into_inner().state })
        }
        "event-create" => json!({ "handle": client.device(0).create_event(EventOptions::default()).await?.leak() }),
        "event-record" => {
            client.events().record(proto::RecordEventRequest { event: num(1), stream: num(2) }).await?;
            ok
        }
        "event-sync" => {
            client.events().synchronize(proto::SynchronizeEventRequest { handle: num(1), timeout_ms: 1000 }).await?;
            ok
        }
        "wait-event" => {
            client.streams().wait_event(proto::StreamWaitEventRequest { stream: num(1), event: num(2) }).await?;
            ok
        }
        "subscribe" => {
            client.subscribe(num(1), num(2)).await?;
            ok
        }
        "launch" => json!({ "callback": client.launch_callback(num(1), vec![7], false).await? }),
        "reports" => {
            let mut stream = client.report_stream(0).await?;
            let mut streams = Vec::new();
            let deadline = tokio::time::Instant::now() + Duration::from_millis(num(1));
            while let Ok(Some(Ok(r))) = tokio::time::timeout_at(deadline, stream.next()).await {
                streams.push(match r.kind {
                    Some(proto::report::Kind::Callback(c)) => c.stream,
                    Some(proto::report::Kind::Exception(e)) => e.stream,
                    None => 0,
                });
            }
            json!({ "reports": streams.len(), "streams": streams })
        }
        "status" => {
            let s = client.status().await?;
            let mut tenants: Vec<String> = s.tenants.iter().map(|t| t.tenant.clone()).collect();
            tenants.extend(s.native_holders.iter().map(|h| h.tenant.clone()));
            tenants.extend(s.allocations.iter().map(|a| a.tenant.clone()));
            tenants.sort();
            tenants.dedup();
            json!({
                "tenants": tenants,
                "sessions": s.sessions,
                "streams": s.streams,
                "events": s.events,
                "pool_hits": s.pool_hits,
                "hardware_creations": s.hardware_creations,
                "callbacks_in_flight": s.callbacks_in_flight,
            })
        }
        "set-quota" => {
            let req = proto::SetQuotaRequest {
                tenant: words.get(1).unwrap_or(&"").to_string(),
                max_streams: Some(num(2) as u32),
                ..Default::default()
            };
            client.admin().set_quota(req).await?;
            ok
        }
        other => json!({ "error": "UnknownCommand", "message": format!("unknown command {other:?}") }),
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let target = match std::env::args().nth(1) {
        Some(t) if t.starts_with("http") => Target::Endpoint(t),
        Some(t) => Target::Socket(t.into()),
        None => anyhow::bail!("usage: npud-peer SOCKET|URL"),
    };
    println!("{}", json!({ "pid": std::process::id() }));
    let mut client: Option<Client> = None;
    let mut sessions = Vec::new();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        if let (["declare", device, count], Target::Socket(socket)) = (words.as_slice(), &target) {
            let (device, count) = (device.parse().unwrap_or(0), count.parse().unwrap_or(0));
            let mut w = npud_tests::wire::Wire::hello(socket, Default::default());
            let call = npud_proto::v1::budget_call::Call::Declare(npud_proto::v1::DeclareBudgetRequest {
                device,
                count,
                ..Default::default()
            });
            let answer = match w.call(call) {
                Ok(npud_proto::v1::budget_reply::Reply::Declared(d)) => json!({ "accepted": d.accepted }),
                Ok(other) => json!({ "error": "Unexpected", "message": format!("{other:?}") }),
                Err(e) => json!({ "error": "Refused", "message": e.message }),
            };
            sessions.push(w);
            println!("{answer}");
            continue;
        }
        if let (["race", devices, rounds, count], Target::Socket(socket)) = (words.as_slice(), &target) {
            let n = |w: &str| w.parse::<u32>().unwrap_or(0);
            println!("{}", race(socket, n(devices), n(rounds), n(count)));
            continue;
        }
        if client.is_none() {
            match Client::connect(target.clone()).await {
                Ok(c) => client = Some(c),
                Err(e) => {
                    println!("{}", err(e));
                    continue;
                }
            }
        }
        let Some(c) = client.as_ref() else { continue };
        let answer = run(c, &words).await.unwrap_or_else(err);
        println!("{answer}");
    }
    Ok(())
}

/// A budget session per device, every round asking for `count` on its device at once
/// (none waits), then giving back what it got: the most granted together in a round.
fn race(socket: &std::path::Path, devices: u32, rounds: u32, count: u32) -> Value {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Barrier};
    let token = std::env::var_os("NPUD_ALLOCATION")
        .and_then(|p| npud_proto::read_allocation_token(std::path::Path::new(&p)))
        .unwrap_or_default();
    let hello = npud_proto::v1::BudgetHello { allocation: token, ..Default::default() };
    let meet = Arc::new(Barrier::new(devices as usize));
    let (granted, most) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let threads: Vec<_> = (0..devices)
        .map(|d| {
            let (socket, hello, meet) = (socket.to_path_buf(), hello.clone(), Arc::clone(&meet));
            let (granted, most) = (Arc::clone(&granted), Arc::clone(&most));
            std::thread::spawn(move || {
                let mut w = npud_tests::wire::Wire::hello(&socket, hello);
                for _ in 0..rounds {
                    meet.wait();
                    let got = matches!(w.acquire(d, count, 0), Ok(npud_proto::v1::budget_reply::Reply::Acquired(_)));
                    if got {
                        granted.fetch_add(count, Ordering::SeqCst);
                    }
                    if meet.wait().is_leader() {
                        most.fetch_max(granted.swap(0, Ordering::SeqCst), Ordering::SeqCst);
                    }
                    meet.wait();
                    if got {
                        let release = npud_proto::v1::ReleaseBudgetRequest { device: d, count, ..Default::default() };
                        let _ = w.call(npud_proto::v1::budget_call::Call::Release(release));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    json!({ "most": most.load(Ordering::SeqCst), "rounds": rounds })
}
