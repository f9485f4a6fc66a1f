//! Channels to npud: a Unix socket (the usual case) or TCP.

use crate::error::{Error, Result};
use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use tonic::transport::{Channel, Endpoint, Uri};

/// Where the daemon is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Socket(PathBuf),
    /// `http://HOST:PORT` (plain TCP, only against `npud --insecure-tcp`).
    Endpoint(String),
}

impl Target {
    /// The socket rule of npud: `$NPUD_SOCKET`, else the per-user default.
    pub fn default_socket() -> Target {
        Target::Socket(npud_proto::default_socket_path())
    }

    fn describe(&self) -> String {
        match self {
            Target::Socket(p) => p.display().to_string(),
            Target::Endpoint(e) => e.clone(),
        }
    }
}

pub async fn channel(target: &Target) -> Result<Channel> {
    let fail = |message: String| Error::Connect { target: target.describe(), message };
    match target {
        Target::Socket(path) => {
            let path: PathBuf = path.clone();
            // The URI is required by the API but unused: the connector dials the socket.
            let endpoint = Endpoint::try_from("http://[::1]:50051").map_err(|e| fail(e.to_string()))?;
            endpoint
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
                }))
                .await
                .map_err(|e| fail(source_chain(&e)))
        }
        Target::Endpoint(url) => {
            if url.starts_with("https://") {
                return Err(fail(
                    "TLS endpoints are not supported by this client build; use a Unix socket or http://".into(),
                ));
            }
            let endpoint = Endpoint::from_shared(url.clone()).map_err(|e| fail(e.to_string()))?;
            endpoint.connect().await.map_err(|e| fail(source_chain(&e)))
        }
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

pub fn socket_target(path: impl AsRef<Path>) -> Target {
    Target::Socket(path.as_ref().to_path_buf())
}
