//! Handing the node over to a successor npud, so an upgrade leaves no moment in which a
//! process's connect fails.
//!
//! A new npud that finds another serving on its socket stands by: it opens no device and
//! touches neither the socket nor the state directory nor the kubelet's plugin socket; it
//! connects to the serving npud's private handover socket (`<state_dir>/handover.sock`,
//! 0600, this uid's only) and waits there. When the serving npud is told to stop (SIGTERM,
//! or an admin's shutdown) it stops accepting, ends its device plugin, writes its books a
//! last time, and sends its listening sockets over that connection (SCM_RIGHTS). The
//! successor opens its devices, reads the books, and accepts on the very same sockets:
//! connects made meanwhile wait in the kernel's backlog, never refused. Processes still on
//! the old npud's connections are answered DRAINING, which the interposer takes as "npud
//! is away" and asks again on a new connection, which the successor answers.
//!
//! Without a state directory there is no private place for the handover socket, so a
//! second npud refuses to start, as before.

use super::ServeError;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use std::future::Future;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the message says first: a successor of another version refuses what it cannot read.
const MAGIC: &str = "npud-handover v1";

/// The most listening sockets handed over: the Unix socket, TCP, metrics.
const MAX_FDS: usize = 3;

/// How often a standby looks again for the serving npud's handover socket, or whether
/// that npud is still there.
const LOOK_AGAIN: Duration = Duration::from_millis(200);

/// The private socket a standby waits on, in the state directory.
pub fn socket_path(state_dir: Option<&Path>) -> Option<PathBuf> {
    state_dir.map(|d| d.join("handover.sock"))
}

/// The listening sockets a predecessor handed over, by name.
#[derive(Debug, Default)]
pub struct Inherited {
    pub unix: Option<std::os::unix::net::UnixListener>,
    pub tcp: Option<std::net::TcpListener>,
    pub metrics: Option<std::net::TcpListener>,
    /// The connection to the npud that handed over: told when this one's device plugin is
    /// registered, it stops its own and says so (see `follow`).
    pub predecessor: Option<std::os::unix::net::UnixStream>,
}

/// What the successor says once its device plugin is registered (or it has none).
const REGISTERED: u8 = b'R';
/// What the predecessor says once its device plugin's streams have ended.
const PLUGIN_ENDED: u8 = b'S';

/// How long either side waits for the other's word about the device plugins.
const PLUGIN_WORD: Duration = Duration::from_secs(10);

/// The successor's side of the device plugins' handover: once its plugin is registered
/// (`signals`; at once without one) it tells the predecessor, which then ends its own
/// plugin; when it says so (or goes), every ListAndWatch stream sends the units again, so
/// the kubelet counts them unhealthy only between the two (`plugin::Signals`).
pub(super) fn follow(
    predecessor: &mut Option<std::os::unix::net::UnixStream>,
    signals: Option<Arc<crate::kubernetes::plugin::Signals>>,
) {
    let Some(stream) = predecessor.take() else { return };
    tokio::spawn(async move {
        if let Some(signals) = &signals {
            let _ = tokio::time::timeout(Duration::from_secs(60), signals.registered.notified()).await;
        }
        let ended = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_read_timeout(Some(PLUGIN_WORD));
            (&stream).write_all(&[REGISTERED])?;
            let mut word = [0u8; 1];
            (&stream).read(&mut word).map(|n| n == 1 && word[0] == PLUGIN_ENDED)
        })
        .await;
        if let Some(signals) = signals {
            signals.resend.notify_waiters();
            tracing::info!(
                predecessor_said = matches!(ended, Ok(Ok(true))),
                "the predecessor's device plugin ended; the units were listed again"
            );
        }
    });
}

/// How a standby's wait ended.
pub enum Turn {
    /// No npud serves (or the one that did went without handing over): start as usual.
    Alone,
    /// The serving npud handed its sockets over.
    Took(Inherited),
    /// Told to stop while standing by.
    Stopped,
}

/// Whether an npud accepts connections on `socket`.
async fn serving(socket: &Path) -> bool {
    tokio::net::UnixStream::connect(socket).await.is_ok()
}

/// At start, before any device is opened: stand by while another npud serves on the
/// socket, until it hands over, goes, or `stop` fires.
pub async fn wait_turn(
    socket: &Path,
    state_dir: Option<&Path>,
    stop: &mut (impl Future<Output = ()> + Unpin),
) -> Result<Turn, ServeError> {
    if !serving(socket).await {
        return Ok(Turn::Alone);
    }
    let Some(handover) = socket_path(state_dir) else {
        return Err(ServeError::Socket {
            path: socket.to_path_buf(),
            message: "another npud is serving on it (without a state directory there is no handover)".into(),
        });
    };
    tracing::info!(socket = %socket.display(), "another npud is serving; standing by for its handover");
    super::systemd::notify("READY=1\nSTATUS=standing by for the serving npud's handover");
    let wait = async {
        loop {
            if !serving(socket).await {
                tracing::info!("the serving npud went without handing over; starting as usual");
                return Ok(Turn::Alone);
            }
            match tokio::net::UnixStream::connect(&handover).await {
                Ok(stream) if same_uid(&stream) => match receive(stream).await {
                    Ok(Some(inherited)) => return Ok(Turn::Took(inherited)),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "a handover could not be read; standing by again"),
                },
                Ok(_) => {
                    return Err(ServeError::Startup(format!(
                        "{} is served by another uid; refusing to take sockets from it",
                        handover.display()
                    )));
                }
                // An npud without handover serves: it is waited out.
                Err(_) => {}
            }
            tokio::time::sleep(LOOK_AGAIN).await;
        }
    };
    tokio::select! {
        turn = wait => turn,
        () = stop => Ok(Turn::Stopped),
    }
}

/// Whether the peer runs as this process's uid.
fn same_uid(stream: &tokio::net::UnixStream) -> bool {
    stream.peer_cred().is_ok_and(|c| c.uid() == rustix::process::geteuid().as_raw())
}

/// Waits for the handover message on `stream`; None when the peer closed without one.
async fn receive(stream: tokio::net::UnixStream) -> std::io::Result<Option<Inherited>> {
    loop {
        stream.readable().await?;
        let mut bytes = [0u8; 128];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let read = stream.try_io(tokio::io::Interest::READABLE, || {
            rustix::net::recvmsg(&stream, &mut [IoSliceMut::new(&mut bytes)], &mut control, RecvFlags::CMSG_CLOEXEC)
                .map_err(std::io::Error::from)
        });
        let msg = match read {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            other => other?,
        };
        if msg.bytes == 0 {
            return Ok(None);
        }
        let mut fds: Vec<OwnedFd> = Vec::new();
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = m {
                fds.extend(rights);
            }
        }
        let text = String::from_utf8_lossy(&bytes[..msg.bytes]).into_owned();
        let mut got = inherited(&text, fds)?;
        got.predecessor = stream.into_std().ok();
        return Ok(Some(got));
    }
}

/// The sockets `text` names, in the order of `fds`.
fn inherited(text: &str, fds: Vec<OwnedFd>) -> std::io::Result<Inherited> {
    let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    let mut words = text.trim().split(' ');
    let magic = [words.next(), words.next()].map(Option::unwrap_or_default).join(" ");
    if magic != MAGIC {
        return Err(bad(format!("not a handover this npud reads: {text:?}")));
    }
    // The network namespace the TCP sockets live in: a successor in another (a pod of its
    // own) binds its own, since the old pod's addresses go with it.
    let mut net = None;
    let names: Vec<&str> = words
        .filter(|w| match w.strip_prefix("net=") {
            Some(ns) => {
                net = Some(ns.to_string());
                false
            }
            None => true,
        })
        .collect();
    if names.len() != fds.len() {
        return Err(bad(format!("{} sockets named, {} received", names.len(), fds.len())));
    }
    let mut got = Inherited::default();
    for (name, fd) in names.into_iter().zip(fds) {
        match name {
            "unix" => got.unix = Some(fd.into()),
            "tcp" => got.tcp = Some(fd.into()),
            "metrics" => got.metrics = Some(fd.into()),
            other => return Err(bad(format!("an unknown socket {other:?}"))),
        }
    }
    if got.unix.is_none() {
        return Err(bad("no Unix socket among them".into()));
    }
    if net.is_none() || net != network_namespace() {
        got.tcp = None;
        got.metrics = None;
    }
    Ok(got)
}

/// This process's network namespace, as the kernel names it (`net:[4026531840]`).
fn network_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/net").ok().map(|p| p.to_string_lossy().into_owned())
}

/// The serving npud's side: its handover socket and the newest standby connected to it.
pub struct Standbys {
    path: PathBuf,
    newest: Arc<Mutex<Option<std::os::unix::net::UnixStream>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Standbys {
    /// Listens on the handover socket (replacing a predecessor's), 0600.
    pub fn listen(state_dir: Option<&Path>) -> Option<Standbys> {
        let path = socket_path(state_dir)?;
        let _ = std::fs::remove_file(&path);
        let listener = match tokio::net::UnixListener::bind(&path) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "no handover socket; an upgrade will restart instead");
                return None;
            }
        };
        if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
            tracing::warn!(path = %path.display(), error = %e, "cannot make the handover socket private; not serving it");
            let _ = std::fs::remove_file(&path);
            return None;
        }
        let newest = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&newest);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                if !same_uid(&stream) {
                    continue;
                }
                let Ok(stream) = stream.into_std() else { continue };
                tracing::info!("a successor npud is standing by");
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(stream);
            }
        });
        Some(Standbys { path, newest, task })
    }

    /// The standby to hand over to, if one is connected and still there.
    pub fn take(&self) -> Option<std::os::unix::net::UnixStream> {
        self.task.abort();
        let stream = self.newest.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        // A standby that went away has closed its end: a read sees the end at once.
        let _ = stream.set_nonblocking(true);
        let mut probe = [0u8; 1];
        match std::io::Read::read(&mut &stream, &mut probe) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Some(stream),
            _ => None,
        }
    }
}

impl Drop for Standbys {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sends the listening sockets, named, to the standby on `to`.
pub fn hand_over(
    to: &std::os::unix::net::UnixStream,
    sockets: &[(&str, std::os::fd::BorrowedFd<'_>)],
) -> std::io::Result<()> {
    let names: Vec<&str> = sockets.iter().map(|(n, _)| *n).collect();
    let net = network_namespace().map(|ns| format!(" net={ns}")).unwrap_or_default();
    let text = format!("{MAGIC}{net} {}", names.join(" "));
    let fds: Vec<std::os::fd::BorrowedFd<'_>> = sockets.iter().map(|(_, fd)| *fd).collect();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("too many sockets to hand over"));
    }
    let _ = to.set_nonblocking(false);
    let sent = rustix::net::sendmsg(to.as_fd(), &[IoSlice::new(text.as_bytes())], &mut control, SendFlags::NOSIGNAL)?;
    if sent != text.len() {
        return Err(std::io::Error::other("the handover message went out short"));
    }
    Ok(())
}

/// Copies of the listening sockets, kept to hand over once the servers have let theirs
/// go, and the device plugin's task, which ends (removing its socket) before a successor
/// may register.
pub(super) struct Kept {
    unix: Option<OwnedFd>,
    pub tcp: Option<OwnedFd>,
    pub metrics: Option<OwnedFd>,
    pub plugin: Option<tokio::task::JoinHandle<()>>,
    /// Stops the device plugin (`register::run`).
    pub plugin_stop: tokio::sync::watch::Sender<bool>,
}

impl Kept {
    pub fn new(unix: &tokio::net::UnixListener) -> Kept {
        Kept {
            unix: unix.as_fd().try_clone_to_owned().ok(),
            tcp: None,
            metrics: None,
            plugin: None,
            plugin_stop: tokio::sync::watch::channel(false).0,
        }
    }

    /// A copy of `listener`'s socket.
    pub fn keep(&self, listener: &impl AsFd) -> Option<OwnedFd> {
        listener.as_fd().try_clone_to_owned().ok()
    }

    /// Hands the node to `to` (the servers have stopped accepting, the books are written a
    /// last time): the sockets go, then, once the successor's device plugin is registered,
    /// this one's ends, and the successor is told. True when the sockets went.
    pub async fn hand_over(&mut self, to: &std::os::unix::net::UnixStream) -> bool {
        let handed = self.send_sockets(to);
        if handed && self.plugin.is_some() {
            let to = to.try_clone();
            let registered = tokio::task::spawn_blocking(move || {
                use std::io::Read;
                let to = to?;
                to.set_read_timeout(Some(PLUGIN_WORD))?;
                let mut word = [0u8; 1];
                (&to).read(&mut word).map(|n| n == 1 && word[0] == REGISTERED)
            })
            .await;
            if !matches!(registered, Ok(Ok(true))) {
                tracing::warn!("the successor did not say its device plugin is registered; ending this one's");
            }
        }
        self.plugin_stop.send_replace(true);
        if let Some(plugin) = self.plugin.take() {
            // Its ListAndWatch streams end within a watch period; its own bound is 5 s.
            let _ = tokio::time::timeout(Duration::from_secs(7), plugin).await;
        }
        if handed {
            use std::io::Write;
            let _ = to.set_nonblocking(false);
            let _ = (&*to).write_all(&[PLUGIN_ENDED]);
        }
        handed
    }

    fn send_sockets(&self, to: &std::os::unix::net::UnixStream) -> bool {
        let Some(unix) = &self.unix else { return false };
        let mut sockets = vec![("unix", unix.as_fd())];
        sockets.extend(self.tcp.as_ref().map(|fd| ("tcp", fd.as_fd())));
        sockets.extend(self.metrics.as_ref().map(|fd| ("metrics", fd.as_fd())));
        match hand_over(to, &sockets) {
            Ok(()) => {
                tracing::info!(sockets = sockets.len(), "handed the node over to the successor npud");
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "the handover failed; stopping as usual");
                false
            }
        }
    }
}

/// A TCP listener on `addr`: the one handed over when it listens there, else a new one.
pub(super) async fn tcp(
    inherited: Option<std::net::TcpListener>,
    addr: std::net::SocketAddr,
) -> std::io::Result<tokio::net::TcpListener> {
    match inherited.filter(|l| l.local_addr().is_ok_and(|a| a == addr)) {
        Some(l) => {
            l.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(l)
        }
        None => tokio::net::TcpListener::bind(addr).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
