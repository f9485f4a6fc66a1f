//! The contention scenario as one command: managed vs passthrough on one device.
//!
//!     cargo build --release --workspace --bins
//!     target/release/npud-contention --jobs 40 --streams 60 --hold 1s
//!
//! Prints a table and writes the figures as JSON (`--json FILE`).

use npud_tests::contention::{Scenario, run};
use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let mut jobs = 40;
    let mut streams = 60;
    let mut hold = Duration::from_secs(1);
    let mut wait = Duration::from_secs(60);
    let mut profile = "atlas-training".to_string();
    let mut policies = vec!["managed".to_string(), "passthrough".to_string()];
    let mut json_path = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| anyhow::anyhow!("{flag} needs a value"));
        match flag.as_str() {
            "--jobs" => jobs = value()?.parse()?,
            "--streams" => streams = value()?.parse()?,
            "--hold" => hold = npud_tests::parse_duration(&value()?)?,
            "--wait" => wait = npud_tests::parse_duration(&value()?)?,
            "--profile" => profile = value()?,
            "--policy" => policies = vec![value()?],
            "--json" => json_path = Some(value()?),
            "--help" | "-h" => {
                println!(
                    "npud-contention [--jobs N] [--streams S] [--hold 1s] [--wait 60s] [--profile NAME] [--policy managed|passthrough] [--json FILE]"
                );
                return Ok(());
            }
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    anyhow::ensure!(jobs > 0 && jobs <= 1000, "--jobs must be 1..=1000");
    let mut results = Vec::new();
    println!(
        "{:<12} {:>5} {:>8} {:>7} {:>7} {:>8} {:>10} {:>10} {:>10}",
        "policy", "jobs", "streams", "ok", "failed", "leaked", "grant p50", "grant p99", "makespan"
    );
    for policy in policies {
        let o = run(&Scenario { policy, profile: profile.clone(), jobs, streams_per_job: streams, hold, wait });
        println!(
            "{:<12} {:>5} {:>8} {:>7} {:>7} {:>8} {:>8.1}ms {:>8.1}ms {:>8.2}s",
            o.scenario.policy,
            jobs,
            streams,
            o.succeeded,
            o.failed,
            o.leaked_streams,
            o.p50(),
            o.p99(),
            o.makespan.as_secs_f64()
        );
        for reason in o.failure_reasons.iter().take(3) {
            println!("    e.g. {reason}");
        }
        results.push(o.to_json());
    }
    if let Some(path) = json_path {
        std::fs::write(&path, serde_json::to_string_pretty(&results)?)?;
    }
    Ok(())
}
