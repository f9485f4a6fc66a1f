//! Issue 58, item 4: after a restart, a declaration books only what is provably the
//! declarer's. P holds 300 streams (and its default one) under npud; npud is killed and
//! restarted while P is stopped; a tenant with max 16 that holds nothing declares all 301
//! first. Before, it got 301, P then got 301 more from its record, `in_use` was 602 for
//! 301 real streams and another tenant was refused the device's room. Now the declarer
//! with no record gets what its quota allows, P's record books what is still outside the
//! books, and npud's count equals the driver's: each stream booked once. (Issue 75: a
//! record of a process that still runs is booked for it from the restart on, so nothing of
//! P's shows as free or untracked while P reconnects, and the declarer gets none of it.)
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::native::{App, Shared, acl_builder, acl_command};
use npud_tests::{Peer, bin, eventually};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

#[test]
fn a_declaration_without_a_record_cannot_take_another_processs_streams() {
    if !is_root() {
        eprintln!("SKIPPED LOUDLY: the declarer runs as another uid (nobody), which needs root");
        return;
    }
    let shared = Shared::new();
    let state = tempfile::tempdir().unwrap();
    let sockets = tempfile::tempdir().unwrap();
    std::fs::set_permissions(sockets.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = sockets.path().join("npud.sock");
    let config = "socket_mode = \"0666\"\n[[tenants]]\nname = \"uid-65534\"\nmax_streams = 16\n";
    let start = || acl_builder(&shared.path, &[]).socket(&socket).state_dir(state.path()).config(config).start();
    let mut first = start();
    let mut p = App::spawn({
        let mut c = acl_command(&bin("npuctl"), &shared.path, None);
        c.arg("--socket").arg(&socket).args(["run", "--streams", "301", "--"]).arg(npud_tests::native::acl_steps_app());
        c
    });
    p.send("+300");
    assert_eq!(p.line(), "held 300");
    assert_eq!(first.in_use(), 301);
    // P stops (every thread of it, the interposer's too), and npud dies under it.
    p.send("stop");
    first.kill9();
    let second = start();
    let npud = second.pid();
    assert!(
        eventually(Duration::from_secs(10), || second.in_use() == 301 && second.device0()["untracked"] == 0),
        "P's record booked for it while it is away: {}",
        second.device0()
    );
    // The declarer holds nothing and has no record: nothing on the device is unexplained,
    // so it books nothing (its quota would bound it anyway).
    let mut x = Peer::spawn(socket.to_str().unwrap(), Some(65534));
    let declared = x.ask("declare 0 301");
    let accepted = declared["accepted"].as_u64().unwrap_or_else(|| panic!("{declared}"));
    assert_eq!(accepted, 0, "a tenant with no record booked another process's streams");
    // P goes on, reconnects and declares from its record.
    let cont = std::process::Command::new("kill").args(["-CONT", &p.child.id().to_string()]).status().unwrap();
    assert!(cont.success());
    assert_eq!(p.line(), "continued");
    assert!(
        eventually(Duration::from_secs(30), || second.in_use() == 301 && shared.held_by_others(npud) == 301),
        "each of the 301 streams booked once: npud {} for the driver's {}\n{}",
        second.in_use(),
        shared.held_by_others(npud),
        second.log()
    );
    assert!(
        eventually(Duration::from_secs(10), || second.device0()["untracked"] == 0),
        "the rest of the device is free: {}",
        second.device0()
    );
    drop(x);
    drop(p.child.stdin.take());
    assert_eq!(p.line(), "done");
    assert!(p.child.wait().unwrap().success());
}
