//! systemd readiness notification (`Type=notify`): a datagram to `$NOTIFY_SOCKET`.
//! A few lines of std rather than a dependency; without the variable it does nothing.

use std::os::unix::net::UnixDatagram;

pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let result = UnixDatagram::unbound().and_then(|sock| {
        let bytes = path.as_encoded_bytes();
        match bytes.strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                sock.send_to_addr(state.as_bytes(), &addr)
            }
            None => sock.send_to(state.as_bytes(), &path),
        }
    });
    if let Err(e) = result {
        tracing::warn!(error = %e, state, "systemd notification failed");
    }
}
