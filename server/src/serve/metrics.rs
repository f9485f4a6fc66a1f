//! The Prometheus endpoint: `GET /metrics` over plain HTTP/1.

use crate::daemon::Daemon;
use std::sync::Arc;

/// Serves `GET /metrics` on `addr` until the daemon stops.
pub async fn serve(
    daemon: Arc<Daemon>,
    listener: tokio::net::TcpListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    use http_body_util::Full;
    use hyper::body::Bytes;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let daemon = Arc::clone(&daemon);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let daemon = Arc::clone(&daemon);
                async move {
                    let (status, body, kind) = if req.uri().path() == "/metrics" {
                        (
                            200,
                            crate::daemon::metrics::render(&daemon),
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )
                    } else {
                        (404, "only /metrics is served here\n".to_string(), "text/plain")
                    };
                    hyper::Response::builder()
                        .status(status)
                        .header("content-type", kind)
                        .body(Full::new(Bytes::from(body)))
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await {
                tracing::debug!(error = %e, "metrics connection ended");
            }
        });
    }
}
