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
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use std::future::Future;
use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
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
pub(in crate::serve) fn follow(
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

mod serving;
#[cfg(test)]
mod tests;

pub use serving::Standbys;
pub(in crate::serve) use serving::{Kept, tcp};
