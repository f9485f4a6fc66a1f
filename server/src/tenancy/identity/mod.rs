//! Who a Unix-socket peer is: SO_PEERCRED (uid, gid, pid), the container it runs in (from
//! its cgroup and who made that cgroup: `tenancy/cgroup`), and, for uid 0, whether its
//! pid namespace is the host's. Resolved once per connection, when it is accepted.

use crate::tenancy::authority::AuthorityRewriter;
use crate::tenancy::cgroup::{Mounted, Owners};
use crate::tenancy::conn::Conn;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::UnixStream;

pub use super::cgroup::{Container, Place, place_of};

/// Reads a process's cgroup, pid namespace and the owners of cgroup directories. A trait
/// so privileged reads can be pointed elsewhere: at a host `/proc` mounted into npud's own
/// container, or at a directory in tests.
pub trait PeerInspector: Send + Sync + 'static {
    fn cgroup(&self, pid: i32) -> std::io::Result<String>;

    /// How many pid namespaces process `pid` has a pid in, from the one this `/proc`
    /// shows down to its own (the kernel's `NSpid` line of its `status`): 1 when it runs in
    /// the same pid namespace as pid 1 here, the host's. None where it cannot be read.
    fn pid_levels(&self, _pid: i32) -> Option<usize> {
        None
    }

    /// Who owns cgroup directories. By default nothing can be read, so no container is
    /// verified.
    fn owners(&self) -> &dyn Owners {
        &Unreadable
    }
}

/// Owners that cannot be read: nothing is verified.
struct Unreadable;

impl Owners for Unreadable {
    fn owner(&self, _: &crate::tenancy::cgroup::Hierarchy, _: &str) -> std::io::Result<crate::tenancy::cgroup::Owner> {
        Err(std::io::ErrorKind::PermissionDenied.into())
    }
}

/// `<root>/<pid>/cgroup` and `status`, normally under `/proc`, and the cgroup filesystem
/// at `cgroups` (normally `/sys/fs/cgroup`).
///
/// The pid namespace is proven from `status` (`NSpid`), not from the `ns/pid` link: the
/// link needs ptrace access to the peer (CAP_SYS_PTRACE for any process with capabilities
/// npud lacks, init included), the line is world-readable kernel truth.
pub struct ProcFs {
    root: PathBuf,
    cgroups: Mounted,
}

impl ProcFs {
    pub fn new(root: PathBuf, cgroup_root: PathBuf) -> ProcFs {
        ProcFs { root, cgroups: Mounted { root: cgroup_root } }
    }

    /// What npud cannot prove with what it may read, in words for its start-up log: pid
    /// namespaces (without them no uid-0 peer is proven the host's, so none is its admin),
    /// and whether it sees the host's whole cgroup tree (without it no container is
    /// verified).
    pub fn limits(&self) -> Vec<String> {
        let mut limits = Vec::new();
        if self.pid_levels(1) != Some(1) {
            limits.push(format!(
                "cannot read the NSpid line of {} (a kernel before 4.1, or /proc mounted with hidepid): no uid-0 \
                 peer can be proven to run in the host's pid namespace, so none is npud's admin",
                self.root.join("1/status").display()
            ));
        }
        let init = self.cgroup(1).ok().and_then(|text| {
            text.lines().find_map(|l| l.splitn(3, ':').nth(2).filter(|p| p.contains("..")).map(str::to_string))
        });
        if let Some(path) = init {
            limits.push(format!(
                "pid 1's cgroup reads {path:?}: npud runs in a cgroup namespace of its own, so peers' cgroups \
                 outside it cannot be checked and they are their uids' tenants (run npud in the host's cgroup \
                 namespace: on the host, or in a privileged pod)"
            ));
        }
        limits
    }
}

impl PeerInspector for ProcFs {
    fn cgroup(&self, pid: i32) -> std::io::Result<String> {
        // A cgroup file is a few lines; refuse anything absurd rather than parse it.
        read_proc(&self.root.join(pid.to_string()).join("cgroup"), 64 * 1024)
    }

    fn pid_levels(&self, pid: i32) -> Option<usize> {
        let status = read_proc(&self.root.join(pid.to_string()).join("status"), 16 * 1024).ok()?;
        let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
        let levels = line.split_whitespace().take_while(|w| w.parse::<u32>().is_ok()).count();
        (levels > 0).then_some(levels)
    }

    fn owners(&self) -> &dyn Owners {
        &self.cgroups
    }
}

/// A small `/proc` file as text, refused past `limit` bytes; errors name the file.
fn read_proc(path: &std::path::Path, limit: usize) -> std::io::Result<String> {
    crate::files::read_text_bounded(path, limit)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Whether a uid-0 peer at `pid` is proven to run in the host's pid namespace (one pid,
/// in the namespace this `/proc` shows). A namespace that cannot be read is not the
/// host's. Read only for uid 0: the others' tenants do not depend on it.
fn in_hosts_pid_namespace(inspector: &dyn PeerInspector, pid: i32, uid: u32) -> Result<(), String> {
    if uid != 0 {
        return Ok(());
    }
    match inspector.pid_levels(pid) {
        Some(1) => Ok(()),
        Some(n) => Err(format!("it runs in a pid namespace {} below the host's", n - 1)),
        None => Err("its pid namespace cannot be read".into()),
    }
}

/// Who is on the other end of a connection: what the kernel and the cgroup say about a
/// Unix-socket peer (TCP callers are given one by the API layer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
    /// The cgroup that places it (its path, as npud's cgroup namespace shows it).
    pub cgroup: Option<String>,
    /// The container its runtime made, as `tenancy/cgroup` verified it.
    pub container: Option<Container>,
    /// Why a peer in no verified container is not proven to be on the host either: a
    /// cgroup npud cannot verify, or (uid 0) a pid namespace not proven the host's. Such
    /// a peer is its uid's tenant and never npud's admin.
    pub elsewhere: Option<String>,
    /// Why the peer gets no identity at all: its cgroup could not be read (the process is
    /// gone, or there is no pid), or the container runtime contradicts its cgroup.
    pub refused: Option<String>,
    /// It runs in npud's own container, as npud's uid: what `kubectl exec` into npud's pod
    /// starts. npud's own cgroup, not a name, proves it: only who can move a process into
    /// npud's cgroup (root on the host, or npud's container itself) can make one.
    pub own: bool,
}

impl Peer {
    /// The host's own root: uid 0, in no container, in a host cgroup and the host's pid
    /// namespace, both proven.
    pub fn is_host_root(&self) -> bool {
        self.uid == 0 && self.container.is_none() && self.elsewhere.is_none() && self.refused.is_none()
    }
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
    /// Its replies not yet read, and its kill switch.
    conn: Arc<Conn>,
    /// Its place in its tenant's share of client memory, as an HTTP/2 connection.
    memory: Option<crate::tenancy::replies::Call>,
}

/// What a request on a Unix connection knows of it: who the peer is, and the connection's
/// handle (its replies not yet read).
#[derive(Clone)]
pub struct Connected {
    pub peer: Arc<Peer>,
    pub conn: Arc<Conn>,
}

impl PeerStream {
    pub fn accept(stream: UnixStream, inspector: &dyn PeerInspector) -> std::io::Result<PeerStream> {
        let cred = stream.peer_cred()?;
        let info = identify(cred.uid(), cred.gid(), cred.pid(), inspector);
        let conn = Arc::new(Conn::default());
        Ok(PeerStream {
            inner: stream,
            info: Arc::new(info),
            replay: Vec::new(),
            rewriter: None,
            slot: None,
            conn,
            memory: None,
        })
    }

    /// From now on the peer gets no identity, for `why` (the container runtime
    /// contradicts its cgroup, say).
    pub fn refuse(&mut self, why: String) {
        let mut info = (*self.info).clone();
        info.refused = Some(why);
        info.container = None;
        self.info = Arc::new(info);
    }

    pub fn info(&self) -> &Arc<Peer> {
        &self.info
    }

    /// The connection's handle.
    pub fn conn(&self) -> &Arc<Conn> {
        &self.conn
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

    /// Holds `memory` (its place in its tenant's share) for as long as the connection lives.
    pub fn hold_memory(&mut self, memory: crate::tenancy::replies::Call) {
        self.memory = Some(memory);
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

/// Whether a peer of `uid` whose cgroup file reads `text` (a verified container's) is in
/// npud's own container: the same cgroup as npud's own process, and npud's uid.
fn in_npuds_container(text: &str, uid: u32, inspector: &dyn PeerInspector) -> bool {
    if uid != rustix::process::geteuid().as_raw() {
        return false;
    }
    let own = i32::try_from(std::process::id()).ok().and_then(|pid| inspector.cgroup(pid).ok());
    let placing = crate::tenancy::cgroup::placing_path;
    own.as_deref().and_then(placing).is_some_and(|mine| placing(text) == Some(mine))
}

/// What the kernel and the cgroup filesystem say about the process `pid` of `uid`.
/// Fails closed: a peer whose cgroup cannot be read might be in a container (root there is
/// not root here), so it gets no identity at all.
pub fn identify(uid: u32, gid: u32, pid: Option<i32>, inspector: &dyn PeerInspector) -> Peer {
    let mut peer = Peer { uid, gid, pid, cgroup: None, container: None, elsewhere: None, refused: None, own: false };
    let Some(pid) = pid else {
        peer.refused = Some("the peer has no pid npud can see".into());
        return peer;
    };
    match inspector.cgroup(pid) {
        Ok(text) => {
            peer.cgroup = crate::tenancy::cgroup::placing_path(&text).map(|p| p.chars().take(256).collect());
            match place_of(&text, inspector.owners()) {
                Place::Container(c) => {
                    peer.own = in_npuds_container(&text, uid, inspector);
                    peer.container = Some(c);
                }
                Place::Other(why) => peer.elsewhere = Some(why),
                Place::Host => peer.elsewhere = in_hosts_pid_namespace(inspector, pid, uid).err(),
            }
        }
        Err(e) => {
            tracing::info!(pid, error = %e, "cannot read the peer's cgroup; it gets no identity");
            peer.refused = Some(format!(
                "cannot tell whether process {pid} runs in a container (its cgroup could not be read when it \
                 connected; did the connecting process exit?): connect from a live process"
            ));
        }
    }
    if let Some(why) = &peer.elsewhere {
        tracing::debug!(pid, uid, why = %why, "a peer npud cannot place: its uid's tenant");
    }
    peer
}

fn invalid(e: crate::tenancy::authority::AuthorityError) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e)
}

impl tonic::transport::server::Connected for PeerStream {
    type ConnectInfo = Connected;

    fn connect_info(&self) -> Self::ConnectInfo {
        Connected { peer: Arc::clone(&self.info), conn: Arc::clone(&self.conn) }
    }
}

impl AsyncRead for PeerStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        // Closed from outside (`tenancy::conn`): the stream ends, and its server with it.
        if this.conn.is_closed() {
            return Poll::Ready(Ok(()));
        }
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
                if Pin::new(&mut this.inner).poll_read(cx, &mut read)?.is_pending() {
                    this.conn.reader_waits(cx.waker());
                    return Poll::Pending;
                }
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
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if read.is_pending() {
            self.conn.reader_waits(cx.waker());
        }
        read
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
mod tests;
