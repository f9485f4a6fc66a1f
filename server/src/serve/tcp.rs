//! TCP connections, bounded as the Unix socket's are. Until TLS or a token says who a peer
//! is, its remote address is all npud knows of it: each address may hold as many
//! connections as one tenant (`limits.max_connections_per_tenant`), and every TCP
//! connection counts against `limits.max_connections` together with the socket's, in the
//! same limiter. A flood from the network (idle connections, TLS handshakes never
//! finished) runs into its own limit instead of npud's descriptors, and the host admin's
//! slots on the socket stay free.

use crate::observe::metrics::Metrics;
use crate::tenancy::connections::{ConnectionLimiter, ConnectionSlot, Full};
use crate::types::Tenant;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// An accepted TCP connection and its place in the limiter, given back when it closes.
pub struct LimitedTcp {
    inner: TcpStream,
    _slot: ConnectionSlot,
    /// Its place in its address's share of client memory (`tenancy::replies`).
    _memory: crate::tenancy::replies::Call,
}

/// The connections of `listener` that fit their address's limit and the total; the rest
/// are closed at once (and counted in `npud_connections_refused_total`).
pub fn incoming(
    listener: TcpListener,
    limiter: Arc<ConnectionLimiter>,
    metrics: Arc<Metrics>,
    replies: Arc<crate::tenancy::replies::Replies>,
) -> impl Stream<Item = std::io::Result<LimitedTcp>> {
    tokio_stream::wrappers::TcpListenerStream::new(listener).filter_map(move |accepted| {
        let inner = match accepted {
            Ok(stream) => stream,
            Err(e) => return Some(Err(e)),
        };
        let address = inner.peer_addr().map_or_else(|_| "unknown".to_string(), |a| a.ip().to_string());
        // '/' is in no tenant's name, so an address never shares a configured tenant's count.
        let key: Tenant = Arc::from(format!("tcp/{address}"));
        // Calls on it take the same address's share (`serve::replies`).
        let memory_key: Tenant = Arc::from(format!("tcp:{address}"));
        match limiter.admit(&key, false) {
            Ok(slot) => match replies.enter_conn(&memory_key, false) {
                Ok(memory) => Some(Ok(LimitedTcp { inner, _slot: slot, _memory: memory })),
                Err(full) => {
                    metrics.connection_refused("memory");
                    tracing::debug!(%address, %full, "closing a TCP connection: its address's memory share is held");
                    None
                }
            },
            Err(full) => {
                let limit = match full {
                    Full::Tenant => "tcp-address",
                    Full::Total => "total",
                };
                metrics.connection_refused(limit);
                if let Some(unlogged) = limiter.log_refusal() {
                    tracing::warn!(
                        %address,
                        ?full,
                        unlogged,
                        "closing a TCP connection: at the most connections it may open"
                    );
                }
                None
            }
        }
    })
}

impl Connected for LimitedTcp {
    type ConnectInfo = TcpConnectInfo;

    /// The TCP stream's own: what identifies a TCP peer to the services is unchanged.
    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for LimitedTcp {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

crate::tenancy::connections::write_through_inner!(LimitedTcp);
