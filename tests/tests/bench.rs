//! Issue 10: the benchmark program runs (quick mode), prints its targets and writes JSON.
//! No timing is asserted here: speed belongs in BENCHMARKS.md, not in a noisy CI test.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::bin;
use std::process::Command;

#[test]
fn npud_bench_quick_runs_and_writes_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = Command::new(bin("npud-bench")).args(["--quick", "--json"]).arg(&json).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    for needle in [
        "× empty p50",
        "record ops/s",
        "sessions: open p50",
        "40x60 jobs",
        "reclaim:",
        "targets:",
        "under the interposer",
        "start-up taken apart",
        "authority rewrite of a request",
        "peer: plain tonic server, empty call",
        "create stream",
        "query event",
        "server CPU per call",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(doc["floor"]["empty_grpc_p50_us"].as_f64().unwrap() > 0.0);
    assert!(doc["floor"]["peer_tonic_empty_p50_us"].as_f64().unwrap() > 0.0, "the peer tonic server was measured");
    // Programs ran under the interposer against the stand-in as against npud (each run
    // asserts the program's success).
    let parts = &doc["interposer"]["decomposed"];
    assert!(parts["standin_ms"].as_f64().unwrap() > 0.0 && parts["npud_ms"].as_f64().unwrap() > 0.0, "{parts}");
    let targets = doc["targets"].as_array().unwrap();
    assert!(targets.len() >= 9, "every target has a verdict: {targets:?}");
    assert!(targets.iter().all(|t| t["met"].is_boolean() && t["target"].is_string()));
    assert_eq!(doc["throughput"].as_array().unwrap().len(), 4);
    // Both servers' CPU was read: a server that did the calls used some.
    let cpu = doc["server_cpu"].as_array().unwrap();
    assert_eq!(cpu.len(), 5, "{cpu:?}");
    assert!(cpu.iter().all(|r| r["cpu_us"].as_f64().unwrap() > 0.0), "{cpu:?}");
    assert_eq!(doc["contention"][0]["failed"], 0, "the managed policy never fails a job");
    assert_eq!(doc["contention"][0]["leaked_streams"], 0);
    assert_eq!(doc["interposer"]["acquires_per_process"], 1.0, "one round trip admits a whole start-up");
    let crowd = |i: usize| doc["interposer"]["crowd"][i].clone();
    assert!(crowd(2)["run"].as_str().unwrap().contains("under the interposer"), "{}", crowd(2));
    assert_eq!(crowd(2)["failed"], 0, "no process fails under the interposer");
    assert_eq!(
        (crowd(3)["processes"].as_u64(), crowd(3)["failed"].as_u64()),
        (Some(300), Some(0)),
        "nor in a crowd of 300"
    );
    assert!(text.contains("the library's own load cost"), "the load cost on its own row:\n{text}");
    // Issue 59: the node's TP-8 start-up, measured on both sides.
    assert!(text.contains("TP-8 start-up under the interposer"), "{text}");
    let node = &doc["interposer"]["node"];
    assert!(node["tp8_native_p50_ms"].as_f64().unwrap() > 0.0 && node["tp8_ratio"].as_f64().unwrap() > 0.0, "{node}");
    // Issue 75: start-ups while npud hands the node over, none failed; the start-up rows
    // restated as the time npud adds.
    let upgrade = &doc["interposer"]["upgrade"];
    assert_eq!((upgrade["failed"].as_u64(), upgrade["took_over"].as_bool()), (Some(0), Some(true)), "{upgrade}");
    assert!(doc["interposer"]["startup_added_ms"].is_f64() && node["tp8_added_ms_per_process"].is_f64(), "{node}");
    assert!(text.contains("the npud serving them handing over midway"), "{text}");
    // Start-ups alternate so that each kind follows each kind; the halves are printed.
    assert!(text.contains("start-ups run native, interposed, interposed, native"), "{text}");
    let halves = doc["interposer"]["startup_ratio_by_half"].as_array().unwrap();
    assert!(halves.len() == 2 && halves.iter().all(|r| r.as_f64().unwrap() > 0.0), "{halves:?}");
    // Each crowd's timeline accounts for every process: ready in the first wave, ready
    // after a release (each with its hand-off), or failed.
    // 0-3: 40 x 61 native, restarted, interposed; 300 x 10 interposed. 4: 40 x 61 with the
    // kubelet's restart back-off; 5: 300 x 10 native, restarted (issue 59).
    for i in 0..6 {
        let (c, t) = (crowd(i), &crowd(i)["timeline"]);
        let ready = t["first_wave"].as_u64().unwrap() + t["later"].as_u64().unwrap();
        // Plain native failures stay failed; restarted ones start in the end.
        let gave_up = if i == 0 { c["failed"].as_u64().unwrap() } else { 0 };
        assert_eq!(ready + gave_up, c["processes"].as_u64().unwrap(), "{c}");
        assert_eq!(t["failures"], c["failed"], "{c}");
        assert!(t["makespan_ms"].as_f64().unwrap() >= t["first_wave_last_ready_ms"].as_f64().unwrap(), "{c}");
    }
    assert_eq!(crowd(2)["timeline"]["first_wave"], 33, "the device holds 33 processes of 61 at once");
    assert!(crowd(4)["run"].as_str().unwrap().contains("kubelet"), "{}", crowd(4));
    assert!(crowd(4)["failed"].as_u64().unwrap() > 0, "natively some fail, and wait out the back-off: {}", crowd(4));
    assert!(crowd(4)["makespan_s"].as_f64().unwrap() > 10.0, "the kubelet's first back-off is 10 s: {}", crowd(4));
    let rounds = &doc["interposer"]["crowd_300x10_rounds"];
    assert_eq!(rounds["interposed_failed"], 0, "{rounds}");
    assert!(!rounds["restarted_makespans_s"].as_array().unwrap().is_empty(), "{rounds}");
    // Issue 59: a crowd on each of eight devices at once, npud's CPU per process and its
    // memory with the node full.
    let crowds = &node["crowds"];
    assert_eq!(crowds["interposed_failed"], 0, "no process fails under the interposer on the node: {crowds}");
    assert!(crowds["npud_cpu_ms_per_process_beyond_idle"][0].as_f64().unwrap() > 0.0, "{crowds}");
    let memory = &node["memory"];
    assert_eq!(memory["holders"], 1000, "{memory}");
    assert!(memory["booked"].as_u64().unwrap() >= 8 * 2000, "every device's budget is booked: {memory}");
    assert!(memory["rss_full_kib"].as_u64().unwrap() > memory["rss_idle_kib"].as_u64().unwrap(), "{memory}");
    // The create cost is taken up and down: every level visited twice.
    assert_eq!(doc["streams"]["visits"].as_array().unwrap().len(), 8, "{}", doc["streams"]);
    assert!(text.contains("timelines, ms from each crowd's start"), "{text}");

    // BENCHMARKS.md's tables are generated from this JSON: the generator must read it.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/bench-report.py");
    let out = Command::new("python3").arg(&script).arg(&json).arg(&json).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}\n{}", String::from_utf8_lossy(&out.stderr));
    for needle in [
        "## Results (run 2 of 2)",
        "| crowd on one device",
        "| 300 x 10, under the interposer",
        "2 quick runs",
        "| the node (8 NPUs)",
        "300 x 10 makespans, round by round",
    ] {
        assert!(report.contains(needle), "missing {needle:?} in\n{report}");
    }
    for t in targets {
        let row = format!("| {} |", t["target"].as_str().unwrap());
        assert!(report.contains(&row), "the report has no row for {row}:\n{report}");
    }
}
