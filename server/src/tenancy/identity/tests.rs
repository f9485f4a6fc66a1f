use super::*;

/// A peer whose /proc entry is gone by the time npud reads it.
struct Vanished;
impl PeerInspector for Vanished {
    fn cgroup(&self, _pid: i32) -> std::io::Result<String> {
        Err(std::io::Error::from(std::io::ErrorKind::NotFound))
    }
}

/// Bytes sent in the same write as the preface reach later reads, in order; consuming
/// the preface drops it alone, and not consuming it replays it first.
#[tokio::test]
async fn bytes_read_with_the_preface_are_read_again_in_order() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for consume in [true, false] {
        let (ours, mut theirs) = UnixStream::pair().expect("socketpair");
        let mut peer = PeerStream::accept(ours, &Vanished).expect("credentials");
        theirs.write_all(b"PREFACE!hello").await.expect("write");
        assert_eq!(&peer.read_preface::<8>().await.expect("preface"), b"PREFACE!");
        if consume {
            peer.consume_preface();
        }
        theirs.write_all(b", more").await.expect("write");
        drop(theirs);
        let mut rest = Vec::new();
        peer.read_to_end(&mut rest).await.expect("read");
        let expected: &[u8] = if consume { b"hello, more" } else { b"PREFACE!hello, more" };
        assert_eq!(rest, expected, "consumed: {consume}");
    }
}

#[test]
fn a_proc_file_past_its_limit_is_refused_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cgroup");
    std::fs::write(&path, "0::/\n".repeat(20)).expect("write");
    assert_eq!(read_proc(&path, 100).expect("100 bytes"), "0::/\n".repeat(20));
    let e = read_proc(&path, 99).expect_err("one byte over");
    assert!(e.to_string().contains("larger than 99 bytes"), "{e}");
}

/// A connection that ends before its preface is whole is an error, not a short preface.
#[tokio::test]
async fn a_connection_that_ends_inside_the_preface_is_refused() {
    use tokio::io::AsyncWriteExt;
    let (ours, mut theirs) = UnixStream::pair().expect("socketpair");
    let mut peer = PeerStream::accept(ours, &Vanished).expect("credentials");
    theirs.write_all(b"PRE").await.expect("write");
    drop(theirs);
    let e = peer.read_preface::<8>().await.expect_err("three bytes of eight");
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
}

#[tokio::test]
async fn a_peer_whose_cgroup_cannot_be_read_is_unverified() {
    let (ours, _theirs) = UnixStream::pair().expect("socketpair");
    let peer = PeerStream::accept(ours, &Vanished).expect("credentials");
    let info = peer.info();
    assert!(info.refused.as_ref().is_some_and(|r| r.contains("cgroup could not be read")), "{info:?}");
    assert!(info.container.is_none());
}

#[test]
fn a_process_start_time_is_read_past_a_command_name_with_spaces_and_parens() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("42");
    std::fs::create_dir_all(&dir).unwrap();
    let fields: Vec<String> = (3..=22).map(|f| f.to_string()).collect();
    std::fs::write(dir.join("stat"), format!("42 (a (b) c) {}", fields.join(" "))).unwrap();
    assert_eq!(process_start(root.path(), 42), Some(22));
    assert_eq!(process_start(root.path(), 43), None, "no such process");
    assert_eq!(process_start(root.path(), 0), None);
    assert!(process_start(std::path::Path::new("/proc"), std::process::id()).is_some());
}

/// `<root>/<pid>/status` with the `NSpid` line `/proc` has.
fn statuses(lines: &[(i32, &str)]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for (pid, nspid) in lines {
        let dir = root.path().join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("status"), format!("Name:\tx\nNSpid:\t{nspid}\nNSpgid:\t1\n")).unwrap();
    }
    root
}

#[test]
fn a_host_root_process_is_the_hosts_only_when_its_namespace_is_proven() {
    let root = statuses(&[(1, "1"), (42, "42\t7"), (43, "43")]);
    let proc = ProcFs::new(root.path().to_path_buf(), root.path().join("cgroup"));
    let other = in_hosts_pid_namespace(&proc, 42, 0).expect_err("another namespace");
    assert!(other.contains("1 below"), "{other}");
    assert_eq!(in_hosts_pid_namespace(&proc, 43, 0), Ok(()));
    assert_eq!(in_hosts_pid_namespace(&proc, 42, 1000), Ok(()), "not root: its uid's tenant whatever it is");
    assert!(in_hosts_pid_namespace(&proc, 44, 0).is_err(), "a status that cannot be read is not the host's");
    assert!(proc.limits().is_empty(), "pid 1's line reads: {:?}", proc.limits());
    // The machine's own /proc: this process has a pid in one namespace at least.
    let real = ProcFs::new("/proc".into(), "/sys/fs/cgroup".into());
    assert!(real.pid_levels(std::process::id() as i32).is_some_and(|n| n >= 1));
}

/// A `/proc` with nothing for pid 1 (hidepid, an old kernel): npud says so at start-up.
#[test]
fn an_unreadable_namespace_is_named_among_the_limits() {
    let empty = tempfile::tempdir().unwrap();
    let limits = ProcFs::new(empty.path().to_path_buf(), empty.path().to_path_buf()).limits();
    assert!(limits.iter().any(|l| l.contains("NSpid")), "{limits:?}");
}
