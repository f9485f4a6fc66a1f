//! TLS material for `--listen`: the certificate, key and client CA named by the flags or
//! the file, read at load time.

use super::{Args, ConfigError, TlsFiles, file::FileConfig};
use std::path::Path;

fn read_pem(what: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    let bytes = crate::files::read_bounded(path, super::defaults::MAX_FILE_BYTES)
        .map_err(|e| ConfigError(format!("{what} {}: {e}", path.display())))?;
    if !bytes.starts_with(b"-----BEGIN") && !String::from_utf8_lossy(&bytes).contains("-----BEGIN") {
        return Err(ConfigError(format!("{what} {} is not PEM", path.display())));
    }
    Ok(bytes)
}

/// TLS material for `--listen`, read now so a missing or unreadable file fails start-up
/// with exit 64 instead of at the first connection.
pub(super) fn tls_files(args: &Args, f: &FileConfig) -> Result<Option<TlsFiles>, ConfigError> {
    let cert = args.tls_cert.clone().or(f.tls_cert.clone());
    let key = args.tls_key.clone().or(f.tls_key.clone());
    let ca = args.client_ca.clone().or(f.client_ca.clone());
    let (cert, key) = match (cert, key) {
        (None, None) if ca.is_none() => return Ok(None),
        (Some(c), Some(k)) => (c, k),
        _ => return Err(ConfigError::new("TLS needs both --tls-cert and --tls-key")),
    };
    let optional = match f.tls_client_auth.as_deref() {
        None | Some("required") => false,
        Some("optional") => true,
        Some(other) => {
            return Err(ConfigError(format!("tls_client_auth must be required or optional, got {other:?}")));
        }
    };
    Ok(Some(TlsFiles {
        cert_pem: read_pem("--tls-cert", &cert)?,
        key_pem: read_pem("--tls-key", &key)?,
        client_ca_pem: ca.map(|p| read_pem("--client-ca", &p)).transpose()?,
        client_auth_optional: optional,
    }))
}
