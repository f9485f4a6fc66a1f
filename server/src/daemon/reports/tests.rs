use super::*;
use std::future::Future;
use std::task::{Context, Poll, Waker};

fn exception(stream: u64) -> ReportBody {
    ReportBody::Exception { task: 1, stream, device: 0, thread_id: 7, code: 507_011, message: "boom".into() }
}

/// Polls once: has the wake-up already been delivered?
fn woken(f: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>) -> bool {
    matches!(f.poll(&mut Context::from_waker(Waker::noop())), Poll::Ready(()))
}

#[test]
fn a_report_wakes_only_its_own_session() {
    let hub = ReportHub::new(8, usize::MAX, usize::MAX);
    hub.open_mailbox(1);
    hub.open_mailbox(2);
    let (n1, n2) = (hub.watch(1).unwrap(), hub.watch(2).unwrap());
    let mut w1 = std::pin::pin!(n1.notified());
    let mut w2 = std::pin::pin!(n2.notified());
    w1.as_mut().enable();
    w2.as_mut().enable();
    hub.post(2, exception(5));
    assert!(!woken(w1.as_mut()), "session 1 must not be woken by session 2's report");
    assert!(woken(w2.as_mut()));
    assert_eq!(hub.next_batch(2, 0, 16).unwrap().len(), 1);
    assert!(hub.next_batch(1, 0, 16).unwrap().is_empty());
}

#[test]
fn closing_a_mailbox_wakes_its_waiters_and_ends_the_stream() {
    let hub = ReportHub::new(8, usize::MAX, usize::MAX);
    hub.open_mailbox(1);
    let n = hub.watch(1).unwrap();
    let mut w = std::pin::pin!(n.notified());
    w.as_mut().enable();
    hub.close_mailbox(1);
    assert!(woken(w.as_mut()));
    assert!(hub.next_batch(1, 0, 16).is_none());
    assert!(hub.watch(1).is_none());
}

#[test]
fn overflow_drops_the_oldest_and_counts_it() {
    let hub = ReportHub::new(2, usize::MAX, usize::MAX);
    hub.open_mailbox(1);
    for s in 1..=3 {
        hub.post(1, exception(s));
    }
    let batch = hub.next_batch(1, 0, 16).unwrap();
    assert_eq!(batch.iter().map(|r| r.sequence).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(hub.dropped(), 1);
}

#[test]
fn queued_payload_bytes_are_bounded_and_the_oldest_go() {
    let hub = ReportHub::new(1000, 3 * (128 + 1000), usize::MAX);
    hub.open_mailbox(1);
    let cb = |id| ReportBody::Callback {
        callback: id,
        stream: 1,
        thread_id: 7,
        user_data: Arc::from(vec![0u8; 1000]),
        blocking: false,
        status: 0,
    };
    for id in 1..=5 {
        hub.post(1, cb(id));
    }
    let left = hub.next_batch(1, 0, 100).expect("mailbox");
    let ids: Vec<u64> = left
        .iter()
        .filter_map(|r| if let ReportBody::Callback { callback, .. } = r.body { Some(callback) } else { None })
        .collect();
    assert_eq!(ids, vec![3, 4, 5], "three fit; the two oldest were dropped");
    assert_eq!(hub.dropped(), 2);
}

fn launched(session: u64, tenant: &str, bytes: usize) -> PendingCallback {
    PendingCallback {
        session,
        tenant: Arc::from(tenant),
        stream: 9,
        device: 0,
        raw_stream: crate::backend::RawStream(1),
        thread_id: 7,
        user_data: Arc::from(vec![0u8; bytes]),
        blocking: false,
        fired: false,
    }
}

#[test]
fn a_tenants_undelivered_callback_reports_are_bounded_at_launch_and_delivery_frees_them() {
    let per_report = REPORT_FIXED + 1000;
    let hub = ReportHub::new(1000, usize::MAX, 2 * per_report);
    hub.open_mailbox(1);
    hub.open_mailbox(2);
    hub.add_callback(10, launched(1, "t", 1000), 100).expect("first");
    hub.add_callback(11, launched(2, "t", 1000), 100).expect("second, from another session of the tenant");
    let e = hub.add_callback(12, launched(1, "t", 1000), 100).expect_err("the tenant's bound");
    assert_eq!(e.reason, crate::error::Reason::TooManyReportBytes);
    hub.add_callback(13, launched(1, "u", 1000), 100).expect("another tenant is not affected");
    // Fired and queued: still undelivered, still counted.
    hub.fire_callback(10, 0).expect("fires");
    assert!(hub.add_callback(12, launched(1, "t", 1000), 100).is_err());
    // Delivered on the report stream: free again, and the report was kept, never dropped.
    let batch = hub.next_batch(1, 0, 16).unwrap();
    assert_eq!(batch.len(), 1);
    hub.add_callback(12, launched(1, "t", 1000), 100).expect("room after delivery");
    // A session that closes frees what its unfired callbacks held.
    assert!(hub.add_callback(14, launched(1, "t", 1000), 100).is_err());
    hub.close_mailbox(2);
    hub.add_callback(14, launched(1, "t", 1000), 100).expect("room after the other session closed");
    assert_eq!(hub.dropped(), 0);
}
