//! Ownership and bookkeeping of the registry, without a daemon around it.

use super::*;

fn caller(tenant: &str) -> Caller {
    Caller { tenant: Tenant::from(tenant), admin: false, uid: 1000 }
}

fn registry() -> Registry {
    Registry::new(Arc::new(Minter::new(7)))
}

fn stream(session: u64, tenant: &str, device: u32, raw: u64) -> StreamEntry {
    StreamEntry {
        session,
        tenant: Tenant::from(tenant),
        device,
        raw: RawStream(raw),
        priority: 0,
        flags: 0,
        reused: false,
        subscriber: None,
    }
}

const LEASE: Duration = Duration::from_secs(600);

#[test]
fn a_handle_is_visible_only_to_its_tenant() {
    let r = registry();
    let (a, b) = (caller("a"), caller("b"));
    let (sa, _) = r.open(&a, None, LEASE, 8).unwrap();
    let handles = r.add_streams(sa, vec![stream(sa, "a", 0, 11), stream(sa, "a", 0, 12)]).unwrap();
    assert_eq!(r.stream(&a, handles[0]).unwrap().raw, RawStream(11));
    assert_eq!(r.stream(&b, handles[0]).unwrap_err().reason, Reason::UnknownHandle);
    assert_eq!(r.touch(&b, sa).unwrap_err().reason, Reason::UnknownSession, "b cannot touch a's session");
    assert_eq!(r.remove_streams(&b, &handles).unwrap_err().reason, Reason::UnknownHandle);
    assert_eq!(r.streams_of("a").len(), 2, "a refused destroy changed nothing");
}

#[test]
fn a_session_id_never_minted_is_an_unknown_session_not_a_handle() {
    let r = registry();
    let a = caller("a");
    for id in [0, 999, u64::MAX] {
        assert_eq!(r.touch(&a, id).unwrap_err().reason, Reason::UnknownSession, "session {id}");
    }
}

#[test]
fn destroy_is_all_or_none() {
    let r = registry();
    let a = caller("a");
    let (s, _) = r.open(&a, None, LEASE, 8).unwrap();
    let h = r.add_streams(s, vec![stream(s, "a", 0, 1), stream(s, "a", 0, 2)]).unwrap();
    let e = r.remove_streams(&a, &[h[0], h[0]]).unwrap_err();
    assert_eq!(e.reason, Reason::InvalidArgumentOther, "a handle listed twice");
    let bogus = h[1] ^ 0xffff;
    assert!(r.remove_streams(&a, &[h[0], bogus]).is_err());
    assert_eq!(r.streams_of("a").len(), 2, "nothing was removed");
    assert_eq!(r.remove_streams(&a, &h).unwrap().len(), 2);
    assert!(r.streams_of("a").is_empty());
    assert!(r.stream_by_raw(0, RawStream(1)).is_none(), "the raw index forgot it too");
}

#[test]
fn a_named_session_is_attached_to_again_and_sessions_are_bounded() {
    let r = registry();
    let a = caller("a");
    let (first, attached) = r.open(&a, Some("job".into()), LEASE, 2).unwrap();
    assert!(!attached);
    let (again, attached) = r.open(&a, Some("job".into()), LEASE, 2).unwrap();
    assert_eq!((again, attached), (first, true));
    assert_eq!(r.find_named(&a, "job"), Some(first));
    assert_eq!(r.find_named(&caller("b"), "job"), None, "names are per tenant");
    r.open(&a, None, LEASE, 2).unwrap();
    let e = r.open(&a, None, LEASE, 2).unwrap_err();
    assert_eq!(e.reason, Reason::TooManySessions);
    assert!(r.open(&caller("b"), None, LEASE, 2).is_ok(), "the bound is per tenant");
}

#[test]
fn taking_a_session_hands_back_everything_it_held() {
    let r = registry();
    let a = caller("a");
    let (s, _) = r.open(&a, None, LEASE, 8).unwrap();
    r.add_streams(s, vec![stream(s, "a", 0, 5), stream(s, "a", 1, 6)]).unwrap();
    let ev = EventEntry {
        session: s,
        tenant: Tenant::from("a"),
        device: 0,
        raw: crate::backend::RawEvent(9),
        flags: 0,
        timing: false,
    };
    r.add_event(s, ev).unwrap();
    let reclaim = r.take_session(s).expect("the session");
    assert_eq!(reclaim.tenant.as_deref(), Some("a"));
    assert_eq!((reclaim.streams.len(), reclaim.events.len()), (2, 1));
    assert_eq!(r.totals(), (0, 0, 0), "no session, stream or event left");
    assert!(r.take_session(s).is_none(), "taken once");
    let late = r.add_streams(s, vec![stream(s, "a", 0, 7)]).unwrap_err();
    assert_eq!(late.reason, Reason::SessionClosed, "a create that finishes after the close is refused");
}

#[test]
fn a_session_lapses_after_its_lease_unless_touched() {
    let r = registry();
    let a = caller("a");
    let (s, _) = r.open(&a, None, Duration::from_secs(10), 8).unwrap();
    let now = Instant::now();
    assert!(r.expired(now).is_empty());
    assert_eq!(r.expired(now + Duration::from_secs(11)), vec![s]);
    r.open_report_stream(s, 1).unwrap();
    assert!(r.expired(now + Duration::from_secs(11)).is_empty(), "an open report stream keeps it alive");
    assert_eq!(r.open_report_stream(s, 1).unwrap_err().reason, Reason::TooManyReportStreams);
}
