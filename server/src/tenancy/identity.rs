//! Who a Unix-socket peer is: SO_PEERCRED (uid, gid, pid), plus the container it runs in,
//! read from the peer's cgroup path. Resolved once per connection, when it is accepted.

use crate::tenancy::authority::AuthorityRewriter;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::UnixStream;

pub use super::cgroup::{Container, Place, container_of, place_of};

/// Reads a process's cgroup. A trait so privileged reads can be pointed elsewhere: at a
/// host `/proc` mounted into npud's own container, or at a directory in tests.
pub trait PeerInspector: Send + Sync + 'static {
    fn cgroup(&self, pid: i32) -> std::io::Result<String>;

    /// The pid namespace `pid` runs in (the `ns/pid` link's text), where it can be read.
    fn pid_namespace(&self, _pid: i32) -> Option<String> {
        None
    }

    /// The host's pid namespace: that of pid 1 as this `/proc` shows it, where it can be
    /// read.
    fn host_pid_namespace(&self) -> Option<String> {
        self.pid_namespace(1)
    }
}

/// `<root>/<pid>/cgroup`, normally under `/proc`.
pub struct ProcFs {
    root: PathBuf,
    /// The host's pid namespace, once read: it is fixed for npud's life, and reading it
    /// again for every connection cost a `/proc` lookup on the way to each welcome. A
    /// failed read is not kept (it may be passing: out of descriptors, say).
    host_ns: std::sync::OnceLock<String>,
}

impl ProcFs {
    pub fn new(root: PathBuf) -> ProcFs {
        ProcFs { root, host_ns: std::sync::OnceLock::new() }
    }
}

impl PeerInspector for ProcFs {
    fn cgroup(&self, pid: i32) -> std::io::Result<String> {
        // A cgroup file is a few lines; refuse anything absurd rather than parse it.
        read_proc(&self.root.join(pid.to_string()).join("cgroup"), 64 * 1024)
    }

    fn pid_namespace(&self, pid: i32) -> Option<String> {
        std::fs::read_link(self.root.join(pid.to_string()).join("ns/pid")).ok().map(|l| l.display().to_string())
    }

    fn host_pid_namespace(&self) -> Option<String> {
        if let Some(ns) = self.host_ns.get() {
            return Some(ns.clone());
        }
        let ns = self.pid_namespace(1)?;
        Some(self.host_ns.get_or_init(|| ns).clone())
    }
}

/// A small `/proc` file as text, refused past `limit` bytes; errors name the file.
fn read_proc(path: &std::path::Path, limit: usize) -> std::io::Result<String> {
    crate::files::read_text_bounded(path, limit)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// A process whose cgroup reads as the host's but that runs in a pid namespace other than
/// the host init's (visible where npud shares the host's, `hostPID`) is in a container
/// all the same. As root it is refused; a rootless container (an unprivileged host uid,
/// whose cgroup on v1 may name no container) keeps its uid's tenant, which is what that
/// uid gets on the host anyway.
fn in_namespace(place: Place, inspector: &dyn PeerInspector, pid: i32, uid: u32) -> Place {
    if place != Place::Host || uid != 0 {
        return place;
    }
    // The host's first: where it cannot be read there is nothing to compare the peer's
    // with, and the peer's link (a lookup in a new process's `/proc` entry) is not read.
    let Some(hosts) = inspector.host_pid_namespace() else { return place };
    match inspector.pid_namespace(pid) {
        Some(theirs) if theirs != hosts => {
            Place::Unnamed(format!("a host cgroup, but pid namespace {theirs} (the host's is {hosts})"))
        }
        _ => place,
    }
}

/// Who is on the other end of a connection: what the kernel and the cgroup say about a
/// Unix-socket peer (TCP callers are given one by the API layer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
    pub container: Option<Container>,
    /// The peer runs in a container npud cannot name: its cgroup path (and why). It is
    /// refused (identity fails closed).
    pub unnamed: Option<String>,
    /// The peer's cgroup could not be read (the connecting process is gone, or there is no
    /// pid): whether it runs in a container is unknown, so it gets no identity.
    pub unverified: bool,
}

/// A Unix connection carrying its peer's identity, resolved at accept time.
pub struct PeerStream {
    inner: UnixStream,
    info: Arc<Peer>,
    /// Bytes already read off the connection to tell its protocol, handed back first.
    replay: Vec<u8>,
    /// Set on HTTP/2 connections from the Unix socket: see [`crate::tenancy::authority`].
    rewriter: Option<Box<AuthorityRewriter>>,
    /// The connection's place in its uid's limit, freed when the connection is dropped.
    slot: Option<crate::tenancy::connections::ConnectionSlot>,
}

impl PeerStream {
    pub fn accept(stream: UnixStream, inspector: &dyn PeerInspector) -> std::io::Result<PeerStream> {
        let cred = stream.peer_cred()?;
        // Fail closed: a peer whose cgroup cannot be read might be in a container (root
        // there is not root here), so it is not taken for a host process.
        let (place, unverified) = match cred.pid().map(|pid| (pid, inspector.cgroup(pid))) {
            Some((pid, Ok(text))) => (in_namespace(place_of(&text), inspector, pid, cred.uid()), false),
            Some((pid, Err(e))) => {
                tracing::info!(pid, error = %e, "cannot read the peer's cgroup; it gets no identity");
                (Place::Host, true)
            }
            None => (Place::Host, true),
        };
        let (container, unnamed) = match place {
            Place::Host => (None, None),
            Place::Container(c) => (Some(c), None),
            Place::Unnamed(path) => (None, Some(path)),
        };
        let info = Peer { uid: cred.uid(), gid: cred.gid(), pid: cred.pid(), container, unnamed, unverified };
        Ok(PeerStream { inner: stream, info: Arc::new(info), replay: Vec::new(), rewriter: None, slot: None })
    }

    pub fn info(&self) -> &Arc<Peer> {
        &self.info
    }

    /// Reads the connection's first `N` bytes (its protocol preface). Unless the caller
    /// then calls [`PeerStream::consume_preface`], later reads see them again.
    pub async fn read_preface<const N: usize>(&mut self) -> std::io::Result<[u8; N]> {
        use tokio::io::AsyncReadExt;
        let mut preface = [0u8; N];
        self.inner.read_exact(&mut preface).await?;
        self.replay = preface.to_vec();
        Ok(preface)
    }

    /// Holds `slot` for as long as the connection lives.
    pub fn hold(&mut self, slot: crate::tenancy::connections::ConnectionSlot) {
        self.slot = Some(slot);
    }

    /// Drops the bytes [`PeerStream::read_preface`] kept for replay.
    pub fn consume_preface(&mut self) {
        self.replay.clear();
    }

    /// From now on, requests read off this connection reach the server with an
    /// `:authority` it accepts (see [`crate::tenancy::authority`]); the bytes kept for replay go
    /// through the rewriter too.
    pub fn normalise_authority(&mut self) -> std::io::Result<()> {
        let mut rewriter = Box::<AuthorityRewriter>::default();
        rewriter.feed(&std::mem::take(&mut self.replay)).map_err(invalid)?;
        self.rewriter = Some(rewriter);
        Ok(())
    }
}

fn invalid(e: crate::tenancy::authority::AuthorityError) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e)
}

impl tonic::transport::server::Connected for PeerStream {
    type ConnectInfo = Arc<Peer>;

    fn connect_info(&self) -> Self::ConnectInfo {
        Arc::clone(&self.info)
    }
}

impl AsyncRead for PeerStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if let Some(rewriter) = this.rewriter.as_mut() {
            loop {
                let out = rewriter.output();
                if !out.is_empty() {
                    let n = out.len().min(buf.remaining());
                    buf.put_slice(&out[..n]);
                    out.drain(..n);
                    return Poll::Ready(Ok(()));
                }
                // Uninitialised: no 16 KiB memset on every read of the hot path.
                let mut scratch = [std::mem::MaybeUninit::<u8>::uninit(); 16 * 1024];
                let mut read = ReadBuf::uninit(&mut scratch);
                std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
                if read.filled().is_empty() {
                    return Poll::Ready(Ok(()));
                }
                if let Err(e) = rewriter.feed(read.filled()) {
                    // The rewriter handed the server frames that make it end the connection
                    // with the GOAWAY it sends on TCP for the same fault.
                    tracing::debug!(error = %e, "an HTTP/2 protocol error on the socket; the server ends the connection");
                }
            }
        }
        if !self.replay.is_empty() {
            let n = self.replay.len().min(buf.remaining());
            buf.put_slice(&self.replay[..n]);
            self.replay.drain(..n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

// Writes go to the socket as they are.
crate::tenancy::connections::write_through_inner!(PeerStream);

/// When process `pid` started (clock ticks since boot, field 22 of `<proc_root>/<pid>/stat`):
/// with the pid it names one process, even after the pid is reused. None when unreadable.
pub fn process_start(proc_root: &std::path::Path, pid: u32) -> Option<u64> {
    if pid == 0 {
        return None;
    }
    let stat = read_proc(&proc_root.join(pid.to_string()).join("stat"), 4096).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
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
    async fn a_peer_whose_cgroup_cannot_be_read_is_unverified_and_refused() {
        let (ours, _theirs) = UnixStream::pair().expect("socketpair");
        let peer = PeerStream::accept(ours, &Vanished).expect("credentials");
        let info = peer.info();
        assert!(info.unverified && info.container.is_none());
        let args = <crate::config::flags::Args as clap::Parser>::parse_from(["npud"]);
        let config = crate::Config::load(&args).expect("the default configuration");
        let caller =
            crate::tenancy::auth::Identities::new(&config).resolve(&Peer { uid: 0, gid: 0, ..(**info).clone() });
        let e = caller.expect_err("never host root");
        assert_eq!(e.reason, crate::error::Reason::NoIdentity);
        assert!(e.message.contains("cgroup could not be read"), "{}", e.message);
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

    /// `<root>/<pid>/ns/pid` links as `/proc` has them.
    fn pid_links(links: &[(i32, &str)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (pid, ns) in links {
            let dir = root.path().join(pid.to_string()).join("ns");
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink(ns, dir.join("pid")).unwrap();
        }
        root
    }

    #[test]
    fn a_host_root_process_in_a_pid_namespace_of_its_own_is_not_the_hosts() {
        let root = pid_links(&[(1, "pid:[1]"), (42, "pid:[9]"), (43, "pid:[1]")]);
        let proc = ProcFs::new(root.path().to_path_buf());
        let unnamed = in_namespace(Place::Host, &proc, 42, 0);
        assert!(matches!(&unnamed, Place::Unnamed(why) if why.contains("pid:[9]")), "{unnamed:?}");
        assert_eq!(in_namespace(Place::Host, &proc, 43, 0), Place::Host);
        assert_eq!(in_namespace(Place::Host, &proc, 42, 1000), Place::Host, "not root: its uid's tenant");
        // The host's namespace, read once, is kept: pid 1 does not change namespace.
        std::fs::remove_dir_all(root.path().join("1")).unwrap();
        assert!(matches!(in_namespace(Place::Host, &proc, 42, 0), Place::Unnamed(_)));
    }

    /// Counts the namespace links read; pid 1's is unreadable, as for an npud that may not
    /// look at init.
    struct NoHost(std::sync::atomic::AtomicU32);
    impl PeerInspector for NoHost {
        fn cgroup(&self, _pid: i32) -> std::io::Result<String> {
            Ok("0::/\n".into())
        }
        fn pid_namespace(&self, pid: i32) -> Option<String> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (pid != 1).then(|| "pid:[9]".into())
        }
    }

    #[test]
    fn where_the_hosts_namespace_is_unreadable_the_peers_is_not_read() {
        let inspector = NoHost(std::sync::atomic::AtomicU32::new(0));
        assert_eq!(in_namespace(Place::Host, &inspector, 42, 0), Place::Host);
        assert_eq!(inspector.0.load(std::sync::atomic::Ordering::Relaxed), 1, "pid 1's link alone");
    }
}
