//! The peer a user would compare npud with: a plain tonic server with default settings and
//! one empty unary method (the gRPC health check, the call npud's "empty call" row makes),
//! on a Unix socket, in its own process like npud. `npud-bench --peer-server PATH` runs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Serves the health service on `socket` until killed (the `--peer-server` mode).
pub async fn serve(socket: &Path) -> anyhow::Result<()> {
    let listener = tokio::net::UnixListener::bind(socket)?;
    let (_reporter, health) = tonic_health::server::health_reporter();
    tonic::transport::Server::builder()
        .add_service(health)
        .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
        .await?;
    Ok(())
}

/// The peer server in a child process (this same program), stopped on drop.
pub struct Peer {
    child: crate::Reaped,
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Peer {
    /// The server process, whose CPU time `cpu.rs` reads.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn start() -> anyhow::Result<Peer> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("peer.sock");
        let child = crate::Reaped(
            Command::new(std::env::current_exe()?)
                .arg("--peer-server")
                .arg(&socket)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()?,
        );
        let peer = Peer { child, socket, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&peer.socket).is_err() {
            anyhow::ensure!(Instant::now() < deadline, "the peer server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(peer)
    }
}
