//! npud-bench: what npud costs and what it saves, measured on this machine.
//!
//!     cargo build --release --workspace      # the binaries and the fake vendor libraries
//!     target/release/npud-bench [--quick] [--json bench.json]
//!     target/release/npud-bench --node [--quick] [--json node.json]   # only the node rows (issue 59)
//!     target/release/npud-bench --upgrade [--quick] [--json up.json]  # only the upgrade row (issue 75)
//!     target/release/npud-bench --loop create-destroy 10    # for perf record -p <pid>
//!     target/release/npud-bench --crowds --json crowds.json # the crowds alone, every start-up timed
//!
//! Starts its own daemons on temp sockets. Prints a table (with each cost as a ratio to
//! the empty gRPC call of the same run) and writes the figures as JSON.

use npud_tests::bench::{calls, interposer, jain, micros, node, peer, profile, scale, unix_echo};
use npud_tests::contention::{Scenario, run};
use npud_tests::{Client, Daemon, Target};
use serde_json::json;
use std::time::{Duration, Instant};

fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    json!({ "cpu": cpu, "cores": cores, "kernel": kernel, "build": if cfg!(debug_assertions) { "debug" } else { "release" } })
}

async fn clients(d: &Daemon, n: usize) -> Vec<Client> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(Client::connect(Target::Socket(d.socket.clone())).await.expect("connect"));
    }
    out
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let mut quick = false;
    let mut crowds_only = false;
    let mut node_only = false;
    let mut upgrade_only = false;
    let mut json_path = "bench.json".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--json" => json_path = args.next().ok_or_else(|| anyhow::anyhow!("--json needs a file"))?,
            // Internal: the peer tonic server this program starts in a child process.
            "--peer-server" => {
                let socket = args.next().ok_or_else(|| anyhow::anyhow!("--peer-server needs a socket path"))?;
                return peer::serve(std::path::Path::new(&socket)).await;
            }
            // Internal: budget-wire holders for the node's memory row (bench/holders.rs).
            "--wire-holders" => {
                let socket = args.next().ok_or_else(|| anyhow::anyhow!("--wire-holders needs a socket path"))?;
                let spec = args.next().ok_or_else(|| anyhow::anyhow!("--wire-holders needs device:count,..."))?;
                return npud_tests::bench::holders::hold(std::path::Path::new(&socket), &spec);
            }
            // One kind of call back to back, for a profiler (see bench/profile.rs).
            "--loop" => {
                npud_tests::quiet_daemons();
                let call = args.next().ok_or_else(|| anyhow::anyhow!("--loop needs a call"))?;
                let seconds: u64 = args.next().ok_or_else(|| anyhow::anyhow!("--loop needs seconds"))?.parse()?;
                let run_for = Duration::from_secs(seconds);
                let n = if call == "peer-empty" {
                    let peer = peer::Peer::start()?;
                    println!("peer server pid {}", peer.pid());
                    profile::run_peer(&peer, run_for).await?
                } else {
                    let d = Daemon::builder().config("[limits]\nrequests_per_second = 0").start();
                    println!("daemon pid {}", d.pid());
                    profile::run(&d, &call, run_for).await?
                };
                println!("{n} {call} calls in {seconds} s: {:.1} µs each", seconds as f64 * 1e6 / n.max(1) as f64);
                return Ok(());
            }
            // Only the crowds on one device, with every start-up's times in the JSON.
            "--crowds" => crowds_only = true,
            // Only the node's rows (issue 59): an eight-NPU node.
            "--node" => node_only = true,
            // Only the upgrade row (issue 75): start-ups during a handover.
            "--upgrade" => upgrade_only = true,
            "--help" | "-h" => {
                println!(
                    "npud-bench [--quick] [--json FILE] | --crowds [--json FILE] | --node|--upgrade [--quick] [--json FILE] | --loop {{{}}} SECONDS",
                    profile::CALLS.join("|")
                );
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    // npud as a user runs it: the tests' debug log would put a write on every grant.
    npud_tests::quiet_daemons();
    if upgrade_only {
        let upgrade = npud_tests::bench::upgrade::rows(quick);
        for (target, measured, met) in &upgrade.targets {
            println!("{:<72} {:<40} {}", target, measured, verdict(*met));
        }
        let doc = json!({ "machine": machine(), "upgrade": upgrade.json });
        std::fs::write(&json_path, serde_json::to_string_pretty(&doc)?)?;
        println!("wrote {json_path}");
        return Ok(());
    }
    if node_only {
        let node = node::rows(quick);
        for (target, measured, met) in &node.targets {
            println!("{:<72} {:<40} {}", target, measured, verdict(*met));
        }
        let doc = json!({ "machine": machine(), "node": node.json });
        std::fs::write(&json_path, serde_json::to_string_pretty(&doc)?)?;
        println!("wrote {json_path}");
        return Ok(());
    }
    if crowds_only {
        let crowds = interposer::crowds(true, 5);
        let doc = json!({ "machine": machine(), "crowd": crowds.json, "crowd_300x10_rounds": crowds.rounds });
        std::fs::write(&json_path, serde_json::to_string_pretty(&doc)?)?;
        println!("wrote {json_path}");
        return Ok(());
    }
    let started = Instant::now();
    let (warmup, n) = if quick { (200, 1000) } else { (1000, 5000) };
    let run_for = Duration::from_millis(if quick { 500 } else { 3000 });
    let m = machine();
    println!(
        "machine: {} ({} cores), kernel {}, {} build{}",
        m["cpu"],
        m["cores"],
        m["kernel"],
        m["build"],
        if quick { ", quick mode" } else { "" }
    );

    // Floors and per-call costs: the raw socket, the peer tonic server, npud.
    let echo = unix_echo(n);
    let peer_server = peer::Peer::start()?;
    let d = Daemon::builder().config("[limits]\nrequests_per_second = 0\nmax_sessions_per_tenant = 100000").start();
    let client = Client::connect(Target::Socket(d.socket.clone())).await?;
    let calls::Interleaved { peer_empty, empty: npud_empty, singles } =
        calls::interleaved(&client, &peer_server.socket, warmup, n).await;
    let cpu = calls::server_cpu(&client, d.pid(), (&peer_server.socket, peer_server.pid()), warmup, n).await?;
    drop(peer_server);
    let costs = calls::through_daemon(&client, warmup, n).await;
    let mut sim = calls::daemon_layer(warmup, n).await?;
    sim.extend(calls::in_process(warmup, n));
    // The ratios are to the empty call measured interleaved with the peer and the singles.
    let empty = npud_empty.p50();
    let ratio = |x: Duration| x.as_secs_f64() / empty.as_secs_f64();
    let above = |x: Duration| micros(x) - micros(empty);
    println!("\n{:<44} {:>10} {:>10} {:>12} {:>10}", "call (one client)", "p50 µs", "p99 µs", "× empty p50", "+µs p50");
    let mut cost_rows = Vec::new();
    let floors = [
        ("raw Unix-socket echo (64 B), blocking threads", &echo),
        ("peer: plain tonic server, empty call", &peer_empty),
        ("npud: empty call, interleaved with the peer", &npud_empty),
    ];
    for (name, s) in
        floors.into_iter().chain(costs.iter().chain(singles.iter()).chain(sim.iter()).map(|(n, s)| (*n, s)))
    {
        println!(
            "{:<44} {:>10.1} {:>10.1} {:>12.2} {:>+10.1}",
            name,
            micros(s.p50()),
            micros(s.p99()),
            ratio(s.p50()),
            above(s.p50())
        );
        cost_rows.push(json!({ "call": name, "p50_us": micros(s.p50()), "p99_us": micros(s.p99()), "ratio_to_empty": ratio(s.p50()), "above_empty_us": above(s.p50()) }));
    }
    println!("\n{:<44} {:>10} {:>12}", "server CPU per call (all threads)", "µs", "× npud empty");
    let cpu_empty = cpu.get(1).map_or(f64::NAN, |r| r.1);
    let mut cpu_rows = Vec::new();
    for (name, us) in &cpu {
        println!("{:<44} {:>10.1} {:>12.2}", name, us, us / cpu_empty);
        cpu_rows.push(json!({ "call": name, "cpu_us": us, "ratio_to_empty": us / cpu_empty }));
    }
    let empty_vs_peer = empty.as_secs_f64() / peer_empty.p50().as_secs_f64();
    let single_overheads: Vec<(&str, f64)> = singles.iter().map(|(n, s)| (*n, above(s.p50()))).collect();
    let create_ratio = ratio(costs[1].1.p50());
    let create_single_ratio =
        singles.iter().find(|(n, _)| *n == "create stream").map_or(f64::NAN, |(_, s)| ratio(s.p50()));
    let record_ratio = ratio(costs[2].1.p50());

    // Throughput by concurrency.
    println!(
        "\n{:>8} {:>14} {:>14} {:>8} {:>16} {:>8}",
        "clients", "empty ops/s", "record ops/s", "ratio", "create+destroy/s", "ratio"
    );
    let mut tput_rows = Vec::new();
    let mut ratio_at_16 = 0.0;
    let mut pair_ratio_at_16 = 0.0;
    for c in [1usize, 4, 16, 64] {
        let cs = clients(&d, c).await;
        let (e, r, cd) = calls::concurrency(&cs, run_for).await;
        println!("{:>8} {:>14.0} {:>14.0} {:>8.2} {:>16.0} {:>8.2}", c, e, r, r / e, cd, cd / e);
        if c == 16 {
            ratio_at_16 = r / e;
            // A create+destroy pair is two RPCs: compared with pairs of empty calls.
            pair_ratio_at_16 = cd / (e / 2.0);
        }
        tput_rows.push(json!({ "clients": c, "empty_ops_s": e, "record_ops_s": r, "record_ratio": r / e, "create_destroy_s": cd, "create_destroy_ratio": cd / e }));
        for cl in cs {
            let _ = cl.close().await;
        }
    }
    drop(client);
    drop(d);

    // Scale.
    let mut session_rows = Vec::new();
    for count in if quick { vec![1000] } else { vec![1000, 10_000] } {
        let d = Daemon::builder().config("[limits]\nrequests_per_second = 0\nmax_sessions_per_tenant = 20000").start();
        let s = scale::sessions(&d, count).await;
        session_rows.push(
            json!({ "sessions": s.sessions, "open_us_p50": s.open_us_p50, "bytes_per_session": s.bytes_per_session }),
        );
        println!(
            "\n{} sessions: open p50 {:.1} µs, {:.0} bytes resident per session",
            s.sessions, s.open_us_p50, s.bytes_per_session
        );
    }
    let d = Daemon::builder().config("[limits]\nrequests_per_second = 0\n[budget]\npool_max = 0").start();
    let levels = [10, 100, 1000, 2000];
    let st = scale::streams(&d, &levels, if quick { 100 } else { 500 }).await;
    drop(d);
    println!("{} streams live: {:.0} bytes resident per stream", st.live, st.bytes_per_stream);
    print!("create+destroy p50 by live streams:");
    for (live, us) in &st.create_cost {
        print!("  {live}: {us:.1} µs");
    }
    println!();
    print!("  each visit, up and down:");
    for (live, us) in &st.visits {
        print!("  {live}: {us:.1}");
    }
    println!();
    let flat = {
        let first = st.create_cost.first().map_or(0.0, |c| c.1);
        let last = st.create_cost.last().map_or(0.0, |c| c.1);
        last <= first * 1.25 + 5.0
    };

    // Contention: the jobs scenario at full size.
    let scenario = |policy: &str| Scenario {
        policy: policy.into(),
        profile: "atlas-training".into(),
        jobs: 40,
        streams_per_job: 60,
        hold: Duration::from_secs(1),
        wait: Duration::from_secs(60),
    };
    let managed = run(&scenario("managed"));
    let passthrough = run(&scenario("passthrough"));
    let hold_ms = 1000.0;
    let fairness = jain(&managed.grant_ms.iter().map(|w| hold_ms / (w + hold_ms)).collect::<Vec<_>>());
    println!(
        "\n{:<12} {:>6} {:>7} {:>7} {:>10} {:>10} {:>9} {:>9}",
        "40x60 jobs", "ok", "failed", "leaked", "grant p50", "grant p99", "Jain", "makespan"
    );
    for (o, j) in [(&managed, Some(fairness)), (&passthrough, None)] {
        println!(
            "{:<12} {:>6} {:>7} {:>7} {:>8.0}ms {:>8.0}ms {:>9} {:>8.2}s",
            o.scenario.policy,
            o.succeeded,
            o.failed,
            o.leaked_streams,
            o.p50(),
            o.p99(),
            j.map_or("-".into(), |j| format!("{j:.3}")),
            o.makespan.as_secs_f64()
        );
    }

    // The interposer: an unmodified program's start-up, and crowds of real processes.
    let interposer = interposer::rows(quick);

    // Reclaim.
    let d = Daemon::builder().args(&["--lease", "1s"]).start();
    let holders = if quick { 5 } else { 20 };
    let reclaimed = scale::reclaim(&d, holders, 50).await;
    drop(d);
    println!(
        "\nreclaim: {holders} clients x 50 streams SIGKILLed, ledger back to baseline after {:.0} ms (lease 1 s)",
        reclaimed.as_secs_f64() * 1e3
    );

    // Targets, as ratios of this run (issues 20 and 33).
    let per_rpc_create = create_ratio / 2.0;
    let bytes_per_session = session_rows.last().and_then(|r| r["bytes_per_session"].as_f64()).unwrap_or(f64::MAX);
    let sessions_measured = session_rows.last().and_then(|r| r["sessions"].as_u64()).unwrap_or(0);
    let mut targets: Vec<(String, String, bool)> = vec![(
        "npud's empty call <= 1.1x the plain tonic server's".into(),
        format!("{empty_vs_peer:.2}x ({:.1} vs {:.1} µs)", micros(empty), micros(peer_empty.p50())),
        empty_vs_peer <= 1.1,
    )];
    for (name, us) in &single_overheads {
        targets.push((format!("{name} adds <= 15 µs p50 above the empty call"), format!("{us:+.1} µs"), *us <= 15.0));
    }
    targets.extend([
        (
            "create+destroy pairs/s at 16 clients >= 0.8x empty pairs/s".into(),
            format!("{pair_ratio_at_16:.2}x"),
            pair_ratio_at_16 >= 0.8,
        ),
        (
            "create cost flat from 10 to 2,000 live streams".into(),
            st.create_cost.iter().map(|(_, us)| format!("{us:.0}")).collect::<Vec<_>>().join("/") + " µs",
            flat,
        ),
        (
            format!("{sessions_measured} sessions <= 1 KiB each"),
            format!("{bytes_per_session:.0} B"),
            bytes_per_session <= 1024.0,
        ),
        ("record throughput at 16 clients >= 0.8x empty".into(), format!("{ratio_at_16:.2}x"), ratio_at_16 >= 0.8),
        ("zero failed jobs under the managed policy".into(), format!("{} failed", managed.failed), managed.failed == 0),
        (
            "create stream p50 <= 1.08x the empty call's".into(),
            format!("{create_single_ratio:.2}x"),
            create_single_ratio <= 1.08,
        ),
    ]);
    targets.extend(interposer.targets.iter().cloned());
    println!("\ntargets:");
    for (what, measured, ok) in &targets {
        println!("  {:<58} {:<28} {}", what, measured, verdict(*ok));
    }
    println!("total {:.1} s", started.elapsed().as_secs_f64());

    let doc = json!({
        "machine": m,
        "quick": quick,
        "floor": {
            "unix_echo_p50_us": micros(echo.p50()), "unix_echo_p99_us": micros(echo.p99()),
            "peer_tonic_empty_p50_us": micros(peer_empty.p50()), "peer_tonic_empty_p99_us": micros(peer_empty.p99()),
            "empty_grpc_p50_us": micros(empty),
        },
        "calls": cost_rows,
        "server_cpu": cpu_rows,
        "throughput": tput_rows,
        "sessions": session_rows,
        "streams": { "live": st.live, "bytes_per_stream": st.bytes_per_stream, "create_cost": st.create_cost.iter().map(|(l, us)| json!({"live": l, "p50_us": us})).collect::<Vec<_>>(), "visits": st.visits.iter().map(|(l, us)| json!({"live": l, "p50_us": us})).collect::<Vec<_>>() },
        "contention": [managed.to_json(), passthrough.to_json()],
        "jain_fairness_managed": fairness,
        "reclaim_ms": reclaimed.as_secs_f64() * 1e3,
        "interposer": interposer.json,
        "targets": targets.iter().map(|(what, measured, ok)| json!({ "target": what, "measured": measured, "met": ok })).collect::<Vec<_>>(),
        "ratios": {
            "empty_vs_peer": empty_vs_peer, "create_destroy_pair_ratio": create_ratio, "create_destroy_per_rpc_ratio": per_rpc_create,
            "record_query_ratio": record_ratio, "record_throughput_ratio_16": ratio_at_16, "create_destroy_pair_throughput_ratio_16": pair_ratio_at_16,
        },
        "seconds": started.elapsed().as_secs_f64(),
    });
    std::fs::write(&json_path, serde_json::to_string_pretty(&doc)?)?;
    println!("wrote {json_path}");
    Ok(())
}
