//! Issue 6: the vendor backends load through libloading and fail cleanly. (The
//! conformance and callback suites run against each backend with NPUD_TEST_BACKEND.)
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::{bin, fake_library};
use std::process::Command;

fn start_fails(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin("npud")).arg("--socket").arg(dir.path().join("s.sock")).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{args:?} started");
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!dir.path().join("s.sock").exists(), "nothing was bound");
    stderr
}

#[test]
fn a_missing_library_is_named() {
    let e = start_fails(&["--backend", "acl", "--acl-library", "/nonexistent/libascendcl.so"]);
    assert!(e.contains("/nonexistent/libascendcl.so"), "{e}");
    let e = start_fails(&["--backend", "cuda", "--cuda-library", "/nonexistent/libcuda.so.1"]);
    assert!(e.contains("/nonexistent/libcuda.so.1"), "{e}");
    // Why the loader refused it, not only that it did.
    assert!(e.contains("No such file or directory"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("not-a-library.so");
    std::fs::write(&text, "this is not a shared object\n".repeat(100)).unwrap();
    let e = start_fails(&["--backend", "acl", "--acl-library", text.to_str().unwrap()]);
    assert!(e.contains("not-a-library.so") && e.contains("invalid ELF header"), "{e}");
}

#[test]
fn a_library_without_the_symbols_is_named_with_the_symbol() {
    let cuda = fake_library("libcuda.so");
    let e = start_fails(&["--backend", "acl", "--acl-library", cuda.to_str().unwrap()]);
    assert!(e.contains("aclInit") && e.contains("libcuda.so"), "{e}");
    let acl = fake_library("libascendcl.so");
    let e = start_fails(&["--backend", "cuda", "--cuda-library", acl.to_str().unwrap()]);
    assert!(e.contains("cuInit") && e.contains("libascendcl.so"), "{e}");
}

#[test]
fn the_fake_libraries_serve_through_the_real_loading_path() {
    for (backend, flag, lib) in [("acl", "--acl-library", "libascendcl.so"), ("cuda", "--cuda-library", "libcuda.so")] {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s.sock");
        let child = npud_tests::Reaped::spawn(
            Command::new(bin("npud"))
                .arg("--socket")
                .arg(&socket)
                .args(["--backend", backend, flag])
                .arg(fake_library(lib)),
        );
        assert!(npud_tests::eventually(std::time::Duration::from_secs(10), || socket.exists()));
        let out = Command::new(bin("npuctl"))
            .arg("--socket")
            .arg(&socket)
            .args(["-o", "json", "device", "list"])
            .output()
            .unwrap();
        let devices: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(devices[0]["backend"], backend, "{devices}");
        assert!(devices[0]["capacity"].as_u64().unwrap() > 0);
        drop(child);
    }
}
