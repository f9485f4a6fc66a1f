//! Channels to npud: a Unix socket (the usual case), plain TCP, or TLS.

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
    /// `https://HOST:PORT` with TLS (and a client certificate for mutual TLS).
    Tls {
        url: String,
        tls: TlsOptions,
    },
}

/// TLS material for a TCP connection, as PEM.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// CA that signed the daemon's certificate.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate and key, for mutual TLS.
    pub cert_pem: Option<Vec<u8>>,
    pub key_pem: Option<Vec<u8>>,
    /// Name to check the daemon's certificate against (default: the URL's host).
    pub domain: Option<String>,
}

impl TlsOptions {
    /// Reads PEM files; any may be absent. Each is refused past 1 MiB (a path can name
    /// something that never ends, such as /dev/zero).
    pub fn from_files(ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>) -> Result<TlsOptions> {
        const MAX_PEM: u64 = 1 << 20;
        let read = |p: Option<&Path>| -> Result<Option<Vec<u8>>> {
            p.map(|p| {
                let fail = |message: String| Error::Connect { target: p.display().to_string(), message };
                let mut bytes = Vec::new();
                std::fs::File::open(p)
                    .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_PEM + 1), &mut bytes))
                    .map_err(|e| fail(format!("cannot read: {e}")))?;
                match bytes.len() as u64 > MAX_PEM {
                    true => Err(fail(format!("cannot read: it is larger than {MAX_PEM} bytes"))),
                    false => Ok(bytes),
                }
            })
            .transpose()
        };
        Ok(TlsOptions { ca_pem: read(ca)?, cert_pem: read(cert)?, key_pem: read(key)?, domain: None })
    }

    /// `NPUD_TLS_CA`, `NPUD_TLS_CERT`, `NPUD_TLS_KEY` (file paths).
    pub fn from_env() -> Result<TlsOptions> {
        let var = |k: &str| std::env::var_os(k).map(PathBuf::from);
        let (ca, cert, key) = (var("NPUD_TLS_CA"), var("NPUD_TLS_CERT"), var("NPUD_TLS_KEY"));
        Self::from_files(ca.as_deref(), cert.as_deref(), key.as_deref())
    }
}

impl Target {
    /// The socket rule of npud: `$NPUD_SOCKET`, else the per-user default.
    pub fn default_socket() -> Target {
        Target::Socket(npud_proto::default_socket_path())
    }

    fn describe(&self) -> String {
        match self {
            Target::Socket(p) => p.display().to_string(),
            Target::Endpoint(e) | Target::Tls { url: e, .. } => e.clone(),
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
                return Err(fail("https:// needs TLS options: use Target::Tls".into()));
            }
            let endpoint = Endpoint::from_shared(url.clone()).map_err(|e| fail(e.to_string()))?;
            endpoint.connect().await.map_err(|e| fail(source_chain(&e)))
        }
        Target::Tls { url, tls } => {
            use tonic::transport::{Certificate, ClientTlsConfig, Identity};
            let mut cfg = ClientTlsConfig::new();
            if let Some(ca) = &tls.ca_pem {
                cfg = cfg.ca_certificate(Certificate::from_pem(ca));
            }
            match (&tls.cert_pem, &tls.key_pem) {
                (Some(cert), Some(key)) => cfg = cfg.identity(Identity::from_pem(cert, key)),
                (None, None) => {}
                _ => return Err(fail("a client certificate needs both the certificate and its key".into())),
            }
            if let Some(domain) = &tls.domain {
                cfg = cfg.domain_name(domain.clone());
            }
            let endpoint = Endpoint::from_shared(url.clone()).map_err(|e| fail(e.to_string()))?;
            let endpoint = endpoint.tls_config(cfg).map_err(|e| fail(source_chain(&e)))?;
            endpoint.connect().await.map_err(|e| fail(source_chain(&e)))
        }
    }
}

/// The error and its causes, `a: b: c`. A cause that only repeats the message before it
/// (a wrapper displaying its inner error, as hyper's connect error does) is said once.
fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut last = out.clone();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if text != last {
            out.push_str(": ");
            out.push_str(&text);
        }
        last = text;
        cur = s.source();
    }
    out
}

pub fn socket_target(path: impl AsRef<Path>) -> Target {
    Target::Socket(path.as_ref().to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket that is not there is named, with its cause said once (it used to read
    /// "transport error: No such file or directory (os error 2): No such file or
    /// directory (os error 2)").
    #[tokio::test]
    async fn an_absent_socket_is_named_and_its_cause_said_once() {
        let path = std::env::temp_dir().join(format!("npud-client-absent-{}", std::process::id())).join("npud.sock");
        let Err(e) = channel(&socket_target(&path)).await else { panic!("{} does not exist", path.display()) };
        let said = e.to_string();
        assert!(said.starts_with(&format!("cannot reach npud at {}: ", path.display())), "{said}");
        assert_eq!(said.matches("No such file or directory").count(), 1, "{said}");
    }
}
