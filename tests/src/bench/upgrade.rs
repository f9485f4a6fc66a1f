//! The upgrade row of npud-bench (issue 75): processes that start while one npud hands the
//! node over to its successor (the DaemonSet's `maxSurge: 1` rollout), each requiring
//! npud: how many fail (the target is none) and the longest wait the handover added to a
//! start-up, against the same start-ups with npud steady in the same run.

use super::native::node_daemon;
use super::{Rows, Samples};
use crate::native::{acl_apps, acl_builder, acl_command};
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Streams each start-up makes (its default stream included), as the start-up row's.
const STREAMS: u32 = 70;

/// The upgrade rows: `processes` start-ups spread over a handover.
pub fn rows(quick: bool) -> Rows {
    let processes = if quick { 20 } else { 40 };
    let (program, _) = acl_apps();
    let dir = tempfile::tempdir().expect("temp dir");
    let shared = dir.path().join("budget");
    let mut old = node_daemon(&shared, 1, "", &[]);
    let command = |d: &crate::Daemon| {
        let mut cmd = acl_command(program, &shared, Some((d, STREAMS)));
        cmd.args([(STREAMS - 1).to_string().as_str(), "0"]).env("NPUD_REQUIRED", "1");
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        cmd
    };
    let time = |mut cmd: Command| {
        let t = Instant::now();
        let ok = cmd.status().is_ok_and(|s| s.success());
        (t.elapsed(), ok)
    };
    command(&old).status().ok();
    let steady = Samples((0..processes).map(|_| time(command(&old)).0).collect());
    // The successor, on the same socket and state, stands by (ready) as the new pod would.
    let next = acl_builder(&shared, &[])
        .env("NPU_SIM_DEVICES", "1")
        .socket(&old.socket)
        .state_dir(&shared.with_file_name("state"))
        .start();
    // Start-ups every 5 ms; the old npud is told to stop a quarter of the way in.
    let started = Instant::now();
    let runs: Vec<_> = (0..processes)
        .map(|i| {
            if i == processes / 4 {
                old.signal("TERM");
            }
            let cmd = command(&next);
            let run = std::thread::spawn(move || time(cmd));
            std::thread::sleep(Duration::from_millis(5));
            run
        })
        .collect();
    let during: Vec<(Duration, bool)> = runs.into_iter().map(|r| r.join().unwrap_or((Duration::ZERO, false))).collect();
    let window = started.elapsed();
    let stopped = old.wait_exit(Duration::from_secs(60)).is_some();
    let failed = during.iter().filter(|(_, ok)| !ok).count();
    let longest = during.iter().map(|(d, _)| *d).max().unwrap_or_default();
    let added = longest.saturating_sub(steady.p50());
    let took_over = next.log().contains("took over the socket");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "\nupgrade: {processes} start-ups of {STREAMS} streams over {:.0} ms, the npud serving them handing over \
         midway: {failed} failed; the slowest {:.1} ms, {:.1} ms above a steady start-up's p50 ({:.1} ms){}",
        ms(window),
        ms(longest),
        ms(added),
        ms(steady.p50()),
        if took_over && stopped { "" } else { " (the successor did not take over!)" }
    );
    let targets = vec![(
        format!("{processes} start-ups during an upgrade (a handover), 0 failed"),
        format!("{failed} failed, longest added wait {:.1} ms", ms(added)),
        failed == 0 && took_over && stopped,
    )];
    let json = json!({
        "processes": processes, "streams": STREAMS, "failed": failed, "took_over": took_over,
        "steady_p50_ms": ms(steady.p50()), "longest_ms": ms(longest), "longest_added_ms": ms(added),
    });
    Rows { json, targets }
}
