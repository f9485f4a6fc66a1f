//! Issue 2: the daemon, its socket, sessions, the ledger and stream lifecycle, through the
//! real binaries.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::{Daemon, StreamOptions, bin, eventually, eventually_async, failure, proto::ErrorReason};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;
use tonic::Code;

#[test]
fn npuctl_creates_and_destroys_streams_and_the_ledger_follows() {
    let d = Daemon::start();
    let before = d.device0();
    assert_eq!(before["capacity"], 2046, "2048 - default stream - internal sync stream");
    assert_eq!(before["in_use"], 0);
    let created =
        d.npuctl_json(&["stream", "create", "--count", "4", "--flags", "fast-launch,fast-sync", "--priority", "2"]);
    let created = created.as_array().expect("array of streams");
    assert_eq!(created.len(), 4);
    for s in created {
        assert_eq!(s["device"], 0);
        assert_eq!(s["priority"], 2);
        assert_eq!(s["flags"], 3);
        assert!(s["handle"].as_u64().is_some());
    }
    let after = d.device0();
    assert_eq!(after["in_use"], 4);
    assert_eq!(after["available"], 2042);
    // Streams made by one npuctl call are visible to the next (named session).
    let listed = d.npuctl_json(&["stream", "list"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(4));
    let handles: Vec<String> = created.iter().map(|s| s["handle"].to_string()).collect();
    let mut args = vec!["stream", "destroy"];
    args.extend(handles.iter().map(String::as_str));
    assert_eq!(d.npuctl_json(&args)["destroyed"], 4);
    assert!(eventually(Duration::from_secs(5), || d.in_use() == 0));
    assert_eq!(d.device0()["available"], 2046);
}

/// A handle read by a JSON tool that keeps numbers as doubles (jq, JavaScript) comes back
/// exact, and npuctl accepts it as printed.
#[test]
fn a_handle_survives_a_round_trip_through_jq() {
    let d = Daemon::start();
    let out = d.npuctl(&["-o", "json", "stream", "create", "--count", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let exact: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    for s in exact.as_array().expect("array") {
        let h = s["handle"].as_u64().expect("a number");
        assert_eq!(h as f64 as u64, h, "handle {h} is exact as a double");
    }
    let handle = exact[0]["handle"].as_u64().expect("a number").to_string();
    // The same through jq itself, when the machine has it, exactly as a user pipes it.
    let through_jq =
        Command::new("jq").arg(".[0].handle").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().ok().map(
            |mut jq| {
                use std::io::Write;
                jq.stdin.take().expect("stdin").write_all(&out.stdout).expect("write to jq");
                let o = jq.wait_with_output().expect("jq");
                String::from_utf8_lossy(&o.stdout).trim().to_string()
            },
        );
    if let Some(printed) = through_jq {
        assert_eq!(printed, handle, "jq prints the handle npuctl printed");
    }
    let queried = d.npuctl_json(&["stream", "query", &handle]);
    assert_eq!(queried["handle"].to_string(), handle);
    assert_eq!(d.npuctl_json(&["stream", "destroy", &handle])["destroyed"], 1);
}

#[tokio::test]
async fn creating_past_the_budget_is_resource_exhausted_with_the_numbers() {
    let d = Daemon::builder().args(&["--sim-profile", "atlas-200i-a2"]).start();
    let c = d.client().await;
    let dev = c.device(0);
    let held = dev.create_streams(500, StreamOptions::default()).await.expect("500 of 510");
    // More than the device can ever hand out: refused at once.
    let (code, reason, e) = failure(dev.create_streams(511, StreamOptions::default()).await);
    assert_eq!((code, reason), (Code::ResourceExhausted, ErrorReason::BudgetExhausted));
    assert!(e.to_string().contains("capacity is 510"), "{e}");
    // Would fit an empty device but not now, and no wait was allowed: the numbers explain why.
    let (code, reason, e) = failure(dev.create_streams(20, StreamOptions::default()).await);
    assert_eq!((code, reason), (Code::ResourceExhausted, ErrorReason::GrantWaitExpired));
    assert_eq!(e.figure("capacity"), Some(510));
    assert_eq!(e.figure("in_use"), Some(500));
    assert_eq!(e.figure("queue_position"), Some(1));
    assert!(e.to_string().contains("in use 500"), "{e}");
    assert_eq!(d.in_use(), 500, "a refused request changes nothing");
    drop(held);
}

#[tokio::test]
async fn invalid_requests_are_invalid_argument_and_change_nothing() {
    let d = Daemon::start();
    let c = d.client().await;
    let cases: Vec<(u32, u32, StreamOptions, ErrorReason)> = vec![
        (0, 0, StreamOptions::default(), ErrorReason::InvalidCount),
        (0, 5000, StreamOptions::default(), ErrorReason::InvalidCount),
        (7, 1, StreamOptions::default(), ErrorReason::InvalidDevice),
        (0, 1, StreamOptions { priority: 8, ..Default::default() }, ErrorReason::InvalidPriority),
        (0, 1, StreamOptions { priority: -1, ..Default::default() }, ErrorReason::InvalidPriority),
        (0, 1, StreamOptions { flags: 0x21, ..Default::default() }, ErrorReason::InvalidFlags),
    ];
    for (device, count, options, want) in cases {
        let (code, reason, e) = failure(c.device(device).create_streams(count, options.clone()).await);
        assert_eq!((code, reason), (Code::InvalidArgument, want), "device {device} count {count} {options:?}: {e}");
    }
    assert_eq!(d.in_use(), 0);
    // The CLI says so in one line and exits non-zero.
    let out = d.npuctl(&["stream", "create", "--flags", "fast-launch,device-use-only"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("DEVICE_USE_ONLY cannot be combined"), "{err}");
    assert_eq!(err.trim().lines().count(), 1);
    let out = d.npuctl(&["stream", "create", "--count", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_sigkilled_client_leaks_nothing_once_its_lease_lapses() {
    let d = Daemon::builder().args(&["--lease", "2s"]).start();
    let mut holder =
        npud_tests::Reaped::spawn(Command::new(bin("npud-holder")).arg(&d.socket).arg("8").stdout(Stdio::piped()));
    let mut lines = BufReader::new(holder.stdout.take().expect("stdout")).lines();
    let mut handles = 0;
    for line in lines.by_ref() {
        let line = line.expect("line");
        if line == "ready" {
            break;
        }
        handles += 1;
    }
    assert_eq!(handles, 8);
    assert_eq!(d.in_use(), 8);
    // Alive and renewing: the streams stay well past one lease.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(d.in_use(), 8, "a live client keeps its streams");
    holder.kill().expect("SIGKILL the client");
    holder.wait().expect("reap");
    assert!(eventually(Duration::from_secs(30), || d.in_use() == 0), "streams were not reclaimed:\n{}", d.log());
    let sessions = d.npuctl_json(&["session", "list"]);
    assert!(sessions.as_array().expect("array").iter().all(|s| s["name"] == "npuctl"), "{sessions}");
}

#[tokio::test]
async fn another_tenants_handle_is_not_found_and_indistinguishable_from_a_missing_one() {
    let d = Daemon::builder().tcp().start();
    let mine = d.client().await;
    let theirs = d.tcp_client().await;
    assert_ne!(mine.tenant(), theirs.tenant());
    let s = mine.device(0).create_stream(StreamOptions::default()).await.expect("create");
    let foreign = s.handle();
    let missing = foreign + 1_000;
    let mut svc = theirs.streams();
    for handle in [foreign, missing] {
        let r = svc.get(npud_tests::proto::GetStreamRequest { handle }).await.map_err(npud_tests::Error::from);
        let (code, reason, e) = failure(r);
        assert_eq!((code, reason), (Code::NotFound, ErrorReason::UnknownHandle));
        assert_eq!(e.to_string(), format!("no such handle {handle}"));
    }
    let r = svc
        .destroy(npud_tests::proto::DestroyStreamsRequest { handles: vec![foreign] })
        .await
        .map_err(npud_tests::Error::from);
    assert_eq!(failure(r).0, Code::NotFound);
    let listed = svc.list(npud_tests::proto::ListStreamsRequest {}).await.expect("list").into_inner().streams;
    assert!(listed.is_empty(), "another tenant's streams are invisible");
    // Via the CLI as that tenant, too.
    let endpoint = d.endpoint.clone().expect("tcp");
    let out = Command::new(bin("npuctl"))
        .args(["--endpoint", &endpoint, "stream", "query", &foreign.to_string()])
        .output()
        .expect("npuctl");
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(s.is_done().await.expect("still mine"));
}

#[test]
fn a_stale_socket_from_a_crashed_daemon_does_not_block_a_new_one() {
    let mut first = Daemon::start();
    let socket = first.socket.clone();
    first.kill9();
    assert!(socket.exists(), "SIGKILL leaves the socket file behind");
    // A new daemon on the same path starts and serves.
    let out = Command::new(bin("npud"))
        .arg("--socket")
        .arg(&socket)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut child = out;
    assert!(eventually(Duration::from_secs(10), || { std::os::unix::net::UnixStream::connect(&socket).is_ok() }));
    let listed =
        Command::new(bin("npuctl")).arg("--socket").arg(&socket).args(["device", "list"]).output().expect("npuctl");
    assert!(listed.status.success());
    let _ = Command::new("kill").args(["-s", "TERM", &child.id().to_string()]).status();
    let status = child.wait().expect("exit");
    assert!(status.success(), "SIGTERM exits 0");
    assert!(!socket.exists(), "graceful shutdown removes the socket");
}

#[test]
fn a_live_daemons_socket_is_never_stolen() {
    let d = Daemon::start();
    let out = Command::new(bin("npud")).arg("--socket").arg(&d.socket).output().expect("npud");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("another npud is serving"));
    assert_eq!(d.device0()["in_use"], 0, "the first daemon still serves");
}

#[test]
fn bad_configuration_exits_64_before_binding() {
    let dir = tempfile::tempdir().expect("tmp");
    let socket = dir.path().join("s.sock");
    let config = dir.path().join("bad.toml");
    let cases = [
        "lease = \"forever\"",
        "[budget]\nbatch_size = 0",
        "[[tenants]]\nname = \"a\"\nmax_streams = 4\nreserved_streams = 8",
        "colour = \"blue\"",
        "[sim]\nprofile = \"atlas-9000\"",
        "[[tenants]]\nname = \"a\"\nprocess_streams = 0",
        "[[tenants]]\nname = \"a\"\nprocess_streams = 100000",
        // Names npud derives for unmapped peers cannot be claimed by a configured tenant.
        "[[tenants]]\nname = \"root\"\nuids = [1004]",
        "[[tenants]]\nname = \"uid-65534\"\nuids = [1004]",
        "[[tenants]]\nname = \"tcp-anonymous\"\ncert_names = [\"alice\"]",
        "[[tenants]]\nname = \"root\"\nadmin = true",
        "[[tenants]]\nname = \"container-0123456789ab\"\nuids = [1004]",
    ];
    for text in cases {
        std::fs::write(&config, text).expect("write");
        let out =
            Command::new(bin("npud")).arg("--socket").arg(&socket).arg("--config").arg(&config).output().expect("npud");
        assert_eq!(out.status.code(), Some(64), "{text}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!socket.exists(), "nothing was bound for {text}");
    }
    let out =
        Command::new(bin("npud")).args(["--socket"]).arg(&socket).args(["--sim-devices", "0"]).output().expect("npud");
    assert_eq!(out.status.code(), Some(64));
    // A config or TLS file that never ends is refused after 1 MiB, not read for ever.
    for flags in [
        &["--config", "/dev/zero"][..],
        &["--listen", "127.0.0.1:0", "--tls-cert", "/dev/zero", "--tls-key", "/dev/zero"],
    ] {
        let out = Command::new(bin("npud")).arg("--socket").arg(&socket).args(flags).output().expect("npud");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{flags:?}: {err}");
        assert!(err.contains("/dev/zero") && err.contains("larger than"), "{flags:?}: {err}");
    }
    // A socket path the kernel cannot bind is a configuration error too.
    let long = dir.path().join("d".repeat(120)).join("n.sock");
    let out = Command::new(bin("npud")).arg("--socket").arg(&long).output().expect("npud");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("must be shorter than 108"), "{err}");
}

/// The contract: a failure is one line on stderr and a non-zero exit, usage errors too.
#[test]
fn npuctl_usage_errors_are_one_line() {
    let cases: [&[&str]; 4] = [
        &["stream", "create", "--count", "x"],
        &["bogus"],
        &["stream", "create", "--flags"],
        &["-o", "yaml", "device", "list"],
    ];
    for args in cases {
        let out = Command::new(bin("npuctl")).args(args).output().expect("npuctl");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err:?}");
        assert!(err.starts_with("npuctl: "), "{err}");
    }
    // What is missing or wrong is named on that line, not left to the lines clap puts below.
    let named: [(&[&str], &str); 4] = [
        (&["run"], "not provided: <CMD>..."),
        (&["stream", "destroy"], "not provided: <HANDLE>..."),
        (&["stream", "create", "--session", ""], "a session needs a name"),
        (&["--endpoint", "https://127.0.0.1:1", "run", "--", "true"], "--endpoint cannot be used"),
    ];
    for (args, says) in named {
        let out = Command::new(bin("npuctl")).args(args).output().expect("npuctl");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err:?}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let help = Command::new(bin("npuctl")).arg("--help").output().expect("npuctl");
    assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains("Usage:"));
}

/// A TLS file that never ends is refused after 1 MiB, not read for ever (the same for the
/// allocation token, of which only a line is read).
#[test]
fn npuctl_reads_its_files_with_a_bound() {
    let out = Command::new(bin("npuctl"))
        .args(["--endpoint", "https://127.0.0.1:1", "--tls-ca", "/dev/zero", "device", "list"])
        .output()
        .expect("npuctl");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("/dev/zero") && err.contains("larger than"), "{err}");
    let d = Daemon::start();
    let out = Command::new(bin("npuctl"))
        .arg("--socket")
        .arg(&d.socket)
        .env("NPUD_ALLOCATION", "/dev/zero")
        .args(["device", "list"])
        .output()
        .expect("npuctl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn the_rust_client_destroys_on_drop_and_closes_sessions() {
    let d = Daemon::start();
    let c = d.client().await;
    {
        let _streams = c.device(0).create_streams(3, StreamOptions::default()).await.expect("create");
        assert_eq!(d.in_use(), 3);
    }
    let destroyed = eventually_async(Duration::from_secs(5), || async { d.in_use() == 0 }).await;
    assert!(destroyed, "dropped streams are destroyed");
    let kept = c.device(0).create_streams(2, StreamOptions::default()).await.expect("create");
    let (streams, _) = c.close().await.expect("close");
    assert_eq!(streams, 2);
    assert_eq!(d.in_use(), 0);
    let (code, reason, _) = failure(kept[0].sync().await);
    assert_eq!((code, reason), (Code::NotFound, ErrorReason::UnknownHandle), "its streams went with it");
    let (code, reason, _) = failure(c.renew().await);
    assert_eq!((code, reason), (Code::NotFound, ErrorReason::UnknownSession));
}
