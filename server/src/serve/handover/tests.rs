//! The handover message, sent and read.

use super::serving::hand_over;
use super::*;
use std::os::fd::AsFd;

#[test]
fn a_message_names_its_sockets_in_order_and_anything_else_is_refused() {
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let fd = OwnedFd::from(a);
    let got = inherited("npud-handover v1 unix", vec![fd]).unwrap();
    assert!(got.unix.is_some() && got.tcp.is_none());
    // TCP sockets of another network namespace (another pod's) are not taken.
    let (tcp, here) = (std::net::TcpListener::bind("127.0.0.1:0").unwrap(), network_namespace().unwrap());
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let same = inherited(&format!("npud-handover v1 net={here} unix tcp"), vec![a.into(), tcp.into()]).unwrap();
    assert!(same.tcp.is_some());
    let (tcp, (a, _b)) =
        (std::net::TcpListener::bind("127.0.0.1:0").unwrap(), std::os::unix::net::UnixStream::pair().unwrap());
    let other = inherited("npud-handover v1 net=net:[1] unix tcp", vec![a.into(), tcp.into()]).unwrap();
    assert!(other.unix.is_some() && other.tcp.is_none());
    assert!(inherited("npud-handover v2 unix", vec![]).is_err());
    assert!(inherited("npud-handover v1 unix tcp", vec![]).is_err());
    assert!(inherited("npud-handover v1", vec![]).is_err(), "no Unix socket");
}

#[tokio::test]
async fn sockets_sent_arrive_as_the_same_listening_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let (old, new) = std::os::unix::net::UnixStream::pair().unwrap();
    hand_over(&old, &[("unix", listener.as_fd())]).unwrap();
    drop(listener);
    new.set_nonblocking(true).unwrap();
    let got = receive(tokio::net::UnixStream::from_std(new).unwrap()).await.unwrap().unwrap();
    let taken = got.unix.unwrap();
    // A connect after the sender's copy closed reaches the receiver's.
    let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
    assert!(taken.accept().is_ok());
}
