//! Issue 11: a short soak in CI (the long one is a documented command, see
//! docs/reliability.md): memory, descriptors and handle counts do not grow under churn,
//! and nothing is left over when the load stops.

use npud_tests::bin;
use std::process::Command;

#[test]
fn a_short_soak_keeps_memory_and_handles_flat() {
    let out = Command::new(bin("npud-soak"))
        .args(["--duration", "12s", "--clients", "4", "--sample", "2s"])
        .output()
        .expect("run npud-soak");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("verdict: ok"), "{text}");
}
