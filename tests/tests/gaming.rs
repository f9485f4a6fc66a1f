//! Issue 31: admission that cannot be gamed. Each test is one thing a hostile local (or
//! anonymous remote) tenant tried, through the real daemon binary and a raw client.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_proto::v1::{self as pb, budget_reply::Reply};
use npud_tests::proto::ErrorReason as R;
use npud_tests::wire::{Wire, garbage_stream, garbage_unary};
use npud_tests::{Daemon, npud_channel};
use tonic::Code as C;

/// Bytes that are not the method's message are the caller's error on every service, on a
/// client stream as on a unary call: INVALID_ARGUMENT with npud's detail, never INTERNAL.
#[tokio::test]
async fn garbage_on_any_service_is_invalid_argument_streaming_included() {
    let d = Daemon::start();
    for status in [
        garbage_stream(npud_channel(&d.socket).await, "/npud.v1.BudgetService/Budget").await,
        garbage_unary(npud_channel(&d.socket).await, "/npud.v1.AdminService/SetQuota").await,
        garbage_unary(npud_channel(&d.socket).await, "/npud.v1.SessionService/Open").await,
    ] {
        assert_eq!(status.code(), C::InvalidArgument, "{status:?}");
        let e = npud_tests::Error::from(status);
        assert_eq!(e.reason(), Some(R::InvalidArgumentOther), "{e}");
    }
    assert_eq!(d.in_use(), 0);
}

/// Under `--policy passthrough` nothing is admitted, but the books still count: two asks
/// of 2^31 streams once wrapped the ledger's counter to 1. Every policy refuses a count no
/// device holds, and the books stay what the holders hold.
#[test]
fn counts_no_device_holds_are_refused_under_every_policy() {
    for policy in ["managed", "passthrough"] {
        let d = Daemon::builder().args(&["--policy", policy]).start();
        let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
        let mut w = Wire::hello(&d.socket, pb::BudgetHello::default());
        for huge in [u32::MAX, 1 << 31, capacity + 1] {
            let e = w.acquire(0, huge, 0).expect_err("no device holds that many");
            assert_eq!(e.detail.unwrap().reason, R::InvalidCount as i32, "{policy}: {}", e.message);
        }
        let Ok(Reply::Acquired(a)) = w.acquire(0, 5, 0) else { panic!("{policy}: a fair ask is granted") };
        assert_eq!(a.share.unwrap().holds, 5);
        assert_eq!(d.in_use(), 5, "{policy}: the books hold exactly what was granted");
        drop(w);
        assert!(npud_tests::eventually(std::time::Duration::from_secs(10), || d.in_use() == 0), "{policy}");
    }
}

/// Every unauthenticated TCP peer is one tenant of its own, `tcp-anonymous`: never the
/// local user nobody's (uid 65534), whose streams, quota and limits it used to share.
#[tokio::test]
async fn anonymous_tcp_peers_are_a_tenant_of_their_own() {
    let d = Daemon::builder()
        .tcp()
        .config("socket_mode = \"0666\"\n[[tenants]]\nname = \"tcp-anonymous\"\nmax_streams = 3")
        .start();
    let remote = d.tcp_client().await;
    assert_eq!(remote.tenant(), "tcp-anonymous");
    let e = remote.device(0).create_streams(4, Default::default()).await.expect_err("its own quota of 3");
    assert_eq!(e.reason(), Some(R::QuotaExceeded), "{e}");
    if is_root() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut nobody = npud_tests::Peer::spawn(d.socket.to_str().unwrap(), Some(65534));
        assert_eq!(nobody.ask("tenant")["tenant"], "uid-65534", "the local user nobody is another tenant");
    }
    // Where unknown peers are refused, so are anonymous ones, unless their tenant is configured.
    let strict = Daemon::builder().tcp().config("refuse_unknown = true\nadmin_uids = [0]").start();
    let endpoint = strict.endpoint.clone().unwrap();
    let e = match npud_tests::Client::connect(npud_tests::Target::Endpoint(endpoint)).await {
        Ok(c) => c.devices().await.expect_err("refused"),
        Err(e) => e,
    };
    assert_eq!(e.reason(), Some(R::TenantRefused), "{e}");
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}
