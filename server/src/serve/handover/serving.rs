//! The serving npud's side of a handover: its handover socket, the standby connected to
//! it, and what it passes on when told to stop.

use super::{MAGIC, MAX_FDS, PLUGIN_ENDED, PLUGIN_WORD, REGISTERED, network_namespace, same_uid, socket_path};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The serving npud's side: its handover socket and the newest standby connected to it.
pub struct Standbys {
    path: PathBuf,
    /// The socket file this npud bound (device, inode): a successor binds its own at the
    /// same path, which this one must not remove on its way out.
    bound: Option<(u64, u64)>,
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
        let bound = file_id(&path);
        Some(Standbys { path, bound, newest, task })
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
        if self.bound.is_some() && file_id(&self.path) == self.bound {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Which file `path` is now (device, inode).
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Sends the listening sockets, named, to the standby on `to`.
pub(super) fn hand_over(
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
pub(in crate::serve) struct Kept {
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
pub(in crate::serve) async fn tcp(
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
