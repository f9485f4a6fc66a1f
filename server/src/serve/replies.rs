//! The gRPC fronts under a memory ceiling, whatever the client does (issue 68).
//!
//! - Every call takes a place of its tenant's share of `limits.client_memory_mib`
//!   (`tenancy::replies`) before its handler runs, and keeps it until its reply has left:
//!   the place is held by the reply's body, which the server drops once the reply is sent
//!   or its stream or connection has ended. Past the share (or the ceiling), the call is
//!   refused at once with TOO_MANY_CALLS_IN_FLIGHT: a client that sends thousands of calls
//!   and reads none of the replies runs into its own tenant's share across all its
//!   connections.
//! - A Unix connection whose peer has not let a unary reply through within
//!   `limits.reply_deadline` (it keeps its HTTP/2 receive window shut: it reads frames and
//!   acknowledges pings but takes no data) is closed, and everything it held is freed.
//!   Streaming replies (budget sessions, report streams, health watches) live as long as
//!   their peers want and are not timed. A peer that reads nothing at all is closed by
//!   HTTP/2 keepalive pings it cannot answer.

use crate::daemon::Daemon;
use crate::error::{NpudError, Reason};
use crate::tenancy::conn::Conn;
use crate::tenancy::identity::Connected;
use crate::tenancy::replies::Call;
use crate::types::Tenant;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::codegen::http;

/// Calls whose replies stream for as long as their peers want: never timed.
const STREAMING: [&str; 5] = [
    "/npud.v1.BudgetService/Budget",
    "/npud.v1.ReportService/Reports",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// The Unix connections whose replies are watched, and the watch itself.
#[derive(Default)]
pub struct Watched {
    conns: Mutex<Vec<Weak<Conn>>>,
}

impl Watched {
    pub fn add(&self, conn: &Arc<Conn>) {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).push(Arc::downgrade(conn));
    }

    /// Closes every connection (the node went to a successor npud): their peers reconnect,
    /// to it.
    pub fn close_all(&self) {
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        conns.iter().filter_map(Weak::upgrade).for_each(|c| c.close());
    }

    /// Every second: closes the connections whose oldest unread reply has waited past
    /// `deadline`, and forgets the connections gone.
    pub async fn watch(self: Arc<Self>, daemon: Arc<Daemon>, deadline: Duration) {
        let mut tick = tokio::time::interval(Duration::from_secs(1).min(deadline));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let stalled: Vec<Arc<Conn>> = {
                let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
                conns.retain(|c| c.strong_count() > 0);
                conns
                    .iter()
                    .filter_map(Weak::upgrade)
                    .filter(|c| !c.is_closed() && c.oldest_reply().is_some_and(|t| t.elapsed() >= deadline))
                    .collect()
            };
            for c in stalled {
                tracing::warn!(
                    deadline = %humantime::format_duration(deadline),
                    "closing a connection whose peer has read none of a reply for the deadline: what it held is freed"
                );
                daemon.metrics().connection_refused("stalled");
                c.close();
            }
        }
    }
}

#[derive(Clone)]
pub struct ReplyBudgetLayer {
    pub daemon: Arc<Daemon>,
}

impl<S> tower::Layer<S> for ReplyBudgetLayer {
    type Service = ReplyBudget<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ReplyBudget { inner, daemon: Arc::clone(&self.daemon) }
    }
}

#[derive(Clone)]
pub struct ReplyBudget<S> {
    inner: S,
    daemon: Arc<Daemon>,
}

type BoxFuture<T, E> = Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send>>;

/// Whose share a request's call takes: a Unix peer's tenant (as its connection counts it),
/// a TCP peer's address (its certificate or token is read later, by the handler).
fn owner<B>(req: &http::Request<B>, daemon: &Daemon) -> (Tenant, Option<Arc<Conn>>) {
    if let Some(c) = req.extensions().get::<Connected>() {
        return (daemon.connection_owner(&c.peer).0, Some(Arc::clone(&c.conn)));
    }
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let ext = req.extensions();
    let addr = ext
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| ext.get::<TlsConnectInfo<TcpConnectInfo>>().and_then(|t| t.get_ref().remote_addr()));
    (Tenant::from(format!("tcp:{}", addr.map_or_else(|| "?".into(), |a| a.ip().to_string()))), None)
}

impl<S, ReqBody> tower::Service<http::Request<ReqBody>> for ReplyBudget<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let (tenant, conn) = owner(&req, &self.daemon);
        let call = match self.daemon.replies().enter(&tenant) {
            Ok(call) => call,
            Err(full) => {
                let status = tonic::Status::from(NpudError::new(Reason::TooManyCallsInFlight, full.to_string()));
                return Box::pin(std::future::ready(Ok(status.into_http())));
            }
        };
        let timed = !STREAMING.contains(&req.uri().path());
        let answer = self.inner.call(req);
        Box::pin(async move {
            let res = answer.await?;
            // The reply is ready: from now on its peer is the one keeping it.
            let watch = conn.filter(|_| timed).map(|c| {
                let key = c.reply_ready();
                (c, key)
            });
            Ok(res.map(|body| tonic::body::Body::new(Held { inner: body, call, watch })))
        })
    }
}

/// A reply's body, holding its call's place (and its connection's watch) until dropped.
struct Held {
    inner: tonic::body::Body,
    call: Call,
    watch: Option<(Arc<Conn>, u64)>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((conn, key)) = &self.watch {
            conn.reply_gone(*key);
        }
    }
}

impl Body for Held {
    type Data = tonic::codegen::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(f)) = &frame
            && let Some(data) = f.data_ref()
        {
            let n = data.len() as u64;
            self.call.grew(n);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
