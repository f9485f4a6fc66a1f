//! The interposer's rows of npud-bench (issue 33): an unmodified program's start-up
//! natively and interposed, what loading the library alone costs, and crowds of real
//! processes on one device, each with its target.

use super::native::{self, Run};
use super::timeline::{self, Summary};
use serde_json::json;
use std::time::Duration;

/// The interposer's rows: start-up, the library's load, and crowds of processes.
pub struct Interposer {
    pub json: serde_json::Value,
    /// (target, what this run measured, met).
    pub targets: Vec<(String, String, bool)>,
}

pub fn rows(quick: bool) -> Interposer {
    let startup = native::startup(70, if quick { 20 } else { 60 });
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let native_p50 = startup.native.p50().as_secs_f64();
    let startup_ratio = startup.interposed.p50().as_secs_f64() / native_p50;
    let load_ms = ms(startup.load.1.p50()) - ms(startup.load.0.p50());
    println!("\n{:<52} {:>10} {:>10} {:>12}", "process start-up, 70 streams", "p50 ms", "p99 ms", "× native");
    let rows = [
        ("native (no npud)", &startup.native),
        ("under the interposer", &startup.interposed),
        ("`true`, no vendor call, natively", &startup.load.0),
        ("`true` with the interposer loaded", &startup.load.1),
    ];
    for (name, s) in rows {
        let r = s.p50().as_secs_f64() / native_p50;
        println!("{:<52} {:>10.3} {:>10.3} {:>12.2}", name, ms(s.p50()), ms(s.p99()), r);
    }
    println!(
        "the library's own load cost: {load_ms:.3} ms of the interposed start-up's {:.3} ms above native",
        ms(startup.interposed.p50()) - ms(startup.native.p50())
    );
    let (after_native, after_interposed) = startup.by_order;
    println!(
        "start-ups run native, interposed, interposed, native: × native {after_native:.3} in the first half of the \
         rounds, {after_interposed:.3} in the second, {startup_ratio:.3} over both"
    );
    println!(
        "budget calls per interposed process, start-up and exit: {:.1} ({:.1} acquire; the first goes in the hello's write, \
         the batch's `created` comes from the watcher off the program's path, the exit's close is no call)",
        startup.calls_per_process, startup.acquires_per_process
    );
    let node = node(quick);
    let crowds = crowds(false);
    let [native_crowd, restarted, interposed, many] = &crowds.runs;
    let vs_native = interposed.makespan.as_secs_f64() / native_crowd.makespan.as_secs_f64();
    let vs_restarted = interposed.makespan.as_secs_f64() / restarted.makespan.as_secs_f64();
    let mut targets = node.targets;
    targets.extend([
        (
            "interposed 70-stream start-up <= 1.10x native".into(),
            format!("{startup_ratio:.2}x ({:.2} vs {:.2} ms)", ms(startup.interposed.p50()), ms(startup.native.p50())),
            startup_ratio <= 1.10,
        ),
        (
            "<= 3 budget round trips per interposed start-up and exit".into(),
            format!("{:.1}", startup.calls_per_process),
            startup.calls_per_process <= 3.0,
        ),
        (
            "interposer: one acquire per process start-up".into(),
            format!("{:.1}", startup.acquires_per_process),
            startup.acquires_per_process <= 1.0,
        ),
        (
            "40x61 processes under the interposer, 0 failed".into(),
            format!("{} failed", interposed.failed),
            interposed.failed == 0,
        ),
        (
            "40x61 interposed makespan <= 1.15x native's".into(),
            format!("{vs_native:.2}x ({} native failed)", native_crowd.failed),
            vs_native <= 1.15,
        ),
        (
            "40x61 interposed makespan <= 1.15x native's with restarts".into(),
            format!("{vs_restarted:.2}x"),
            vs_restarted <= 1.15,
        ),
        (
            "300x10 under the interposer: 0 failed, <= 2x hold x waves".into(),
            format!(
                "{} failed, {:.2}s vs {:.2}s",
                many.failed,
                many.makespan.as_secs_f64(),
                2.0 * many.ideal.as_secs_f64()
            ),
            many.failed == 0 && many.makespan <= many.ideal * 2,
        ),
    ]);
    let json = json!({
        "startup_streams": startup.streams,
        "native_p50_ms": ms(startup.native.p50()), "interposed_p50_ms": ms(startup.interposed.p50()),
        "startup_ratio": startup_ratio, "startup_ratio_by_half": [after_native, after_interposed],
        "true_p50_ms": ms(startup.load.0.p50()), "true_preloaded_p50_ms": ms(startup.load.1.p50()), "load_ms": load_ms,
        "calls_per_process": startup.calls_per_process, "acquires_per_process": startup.acquires_per_process,
        "node": node.json,
        "crowd": crowds.json,
    });
    Interposer { json, targets }
}

/// The crowds on one device, each with its timeline.
pub struct Crowds {
    /// 40 x 61 native, restarted, interposed; 300 x 10 interposed.
    pub runs: [native::Crowd; 4],
    pub json: serde_json::Value,
}

/// Runs and prints the crowds (`npud-bench --crowds` runs only these). With `lives`, the
/// JSON holds every start-up's times too.
pub fn crowds(lives: bool) -> Crowds {
    let hold = Duration::from_secs(1);
    let many_hold = Duration::from_millis(1500);
    let runs = [
        native::crowd(40, 61, hold, Run::Native),
        native::crowd(40, 61, hold, Run::Restarted),
        native::crowd(40, 61, hold, Run::Interposed),
        native::crowd(300, 10, many_hold, Run::Interposed),
    ];
    println!(
        "\n{:<44} {:>6} {:>7} {:>10} {:>10} {:>8}",
        "crowds on one device (2,048 streams)", "ok", "failed", "makespan", "ideal", "÷ ideal"
    );
    let names = [
        "40 x 61, native",
        "40 x 61, native, failed ones restarted",
        "40 x 61, under the interposer",
        "300 x 10, under the interposer (1.5 s holds)",
    ];
    let summaries: Vec<_> = runs.iter().map(|c| Summary::of(&c.lives)).collect();
    for (name, c) in names.iter().zip(&runs) {
        let ok = if name.contains("restarted") { c.processes } else { c.processes - c.failed };
        println!(
            "{:<44} {:>6} {:>7} {:>9.2}s {:>9.2}s {:>8.2}",
            name,
            ok,
            c.failed,
            c.makespan.as_secs_f64(),
            c.ideal.as_secs_f64(),
            c.makespan.as_secs_f64() / c.ideal.as_secs_f64()
        );
    }
    println!(
        "timelines, ms from each crowd's start (ready: all its streams exist; hand-off: a release to the next ready):"
    );
    for (name, s) in names.iter().zip(&summaries) {
        println!("  {name}: {}", s.line());
    }
    let json = names
        .iter()
        .zip(&runs)
        .zip(&summaries)
        .map(|((name, c), s)| {
            let mut row = json!({
                "run": name, "processes": c.processes, "failed": c.failed,
                "makespan_s": c.makespan.as_secs_f64(), "ideal_s": c.ideal.as_secs_f64(),
                "timeline": s.to_json(),
            });
            if lives {
                row["lives"] = timeline::lives_json(&c.lives);
            }
            row
        })
        .collect();
    Crowds { runs, json }
}

/// The node's rows (issue 59): an eight-NPU node's tensor-parallel start-up, one process
/// per NPU, natively and under the interposer (`npud-bench --node` runs only these).
pub fn node(quick: bool) -> Interposer {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (tp_native, tp_interposed) = native::tensor_parallel(8, 70, if quick { 3 } else { 10 });
    let tp_ratio = tp_interposed.p50().as_secs_f64() / tp_native.p50().as_secs_f64();
    let spread = |s: &super::Samples| {
        let mut v: Vec<f64> = s.0.iter().map(|d| ms(*d)).collect();
        v.sort_by(f64::total_cmp);
        (v.first().copied().unwrap_or(0.0), v.last().copied().unwrap_or(0.0))
    };
    println!("\n{:<52} {:>10} {:>19}", "TP-8 start-up: 8 processes x 70 streams, one per NPU", "p50 ms", "min-max ms");
    for (name, s) in [("native (no npud)", &tp_native), ("under the interposer", &tp_interposed)] {
        let (lo, hi) = spread(s);
        println!("{:<52} {:>10.2} {:>9.2}-{:<9.2}", name, ms(s.p50()), lo, hi);
    }
    println!("TP-8 start-up under the interposer: {tp_ratio:.3}x native ({} rounds of each)", tp_native.0.len());
    let targets = vec![(
        "TP-8 start-up (8 processes x 70 streams, one per NPU, together) <= 1.10x native".into(),
        format!("{tp_ratio:.2}x ({:.2} vs {:.2} ms)", ms(tp_interposed.p50()), ms(tp_native.p50())),
        tp_ratio <= 1.10,
    )];
    let json = json!({
        "tp8_native_p50_ms": ms(tp_native.p50()), "tp8_interposed_p50_ms": ms(tp_interposed.p50()),
        "tp8_ratio": tp_ratio, "tp8_native_spread_ms": spread(&tp_native),
        "tp8_interposed_spread_ms": spread(&tp_interposed), "rounds": tp_native.0.len(),
    });
    Interposer { json, targets }
}
