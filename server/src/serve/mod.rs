//! Binding, serving and shutting down.
//!
//! The socket rule: create the directory (0750) if needed, refuse a symlink or a
//! non-socket at the path, refuse to steal the socket of a live daemon, remove a stale
//! socket left by a crashed one, bind, then chmod 0660. Shutdown stops accepting, reclaims
//! every session, gives in-flight calls a bounded grace, destroys pooled streams and
//! removes the socket.

pub mod handover;
pub mod metrics;
mod replies;
mod socket;
pub mod systemd;
mod tcp;
mod unix;

use crate::daemon::Daemon;
use crate::tenancy::connections::ConnectionLimiter;
pub use socket::bind_socket;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("socket {path}: {message}")]
    Socket { path: PathBuf, message: String },
    #[error("cannot listen on {addr}: {source}")]
    Tcp { addr: std::net::SocketAddr, source: std::io::Error },
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("start-up failed: {0}")]
    Startup(String),
}

/// rustls server config: our certificate, and the CA that signs clients' certificates
/// (mutual TLS: a wrong or missing client certificate fails the handshake unless client
/// authentication is optional, which leaves bearer tokens as the identity).
fn server_tls(tls: &crate::config::TlsFiles) -> tonic::transport::ServerTlsConfig {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    // A handshake never finished gives its connection's slot back after this long.
    let mut cfg =
        ServerTlsConfig::new().identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem)).timeout(TLS_HANDSHAKE_TIMEOUT);
    if let Some(ca) = &tls.client_ca_pem {
        cfg = cfg.client_ca_root(Certificate::from_pem(ca)).client_auth_optional(tls.client_auth_optional);
    }
    cfg
}

/// How often a connection's peer is pinged, and how long it has to answer.
const KEEPALIVE: Duration = Duration::from_secs(20);

/// How long a TCP peer may take to finish its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Background work: route device reports, reap lapsed sessions.
fn spawn_background(daemon: &Arc<Daemon>) {
    let mut reports = daemon.take_report_receiver();
    let d = Arc::clone(daemon);
    tokio::spawn(async move {
        if let Some(rx) = reports.as_mut() {
            while let Some(report) = rx.recv().await {
                // One bad report must not stop the delivery of all the others.
                let routed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.route_report(report)));
                if routed.is_err() {
                    tracing::error!("routing a device report panicked; delivery continues");
                }
            }
        }
    });
    tokio::spawn(crate::daemon::health::monitor(Arc::clone(daemon), daemon.config().health_interval));
    tokio::spawn(crate::daemon::reconcile::run(Arc::clone(daemon)));
    tokio::spawn(crate::daemon::books::keep(Arc::clone(daemon)));
    tokio::spawn(crate::daemon::exits::watch(Arc::clone(daemon)));
    tokio::spawn(crate::daemon::faults::watch(Arc::clone(daemon)));
    tokio::spawn(crate::daemon::books::expire(Arc::clone(daemon)));
    let d = Arc::clone(daemon);
    let period = (d.config().lease / 4).clamp(Duration::from_millis(20), Duration::from_secs(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // Each reclaim runs in its own task so a panic in one cannot stop the reaper.
            let d2 = Arc::clone(&d);
            if let Err(e) = tokio::spawn(async move { d2.reap_expired().await }).await {
                tracing::error!(error = %e, "reaping sessions failed; will retry");
            }
            if d.config().check_invariants {
                d.check_invariants();
            }
        }
    });
}

/// Serves until `shutdown` resolves, then drains within the configured grace.
pub async fn serve(daemon: Arc<Daemon>, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
    serve_inherited(daemon, shutdown, handover::Inherited::default()).await
}

/// [`serve`] on the listening sockets a predecessor handed over (`handover`), where it did.
pub async fn serve_inherited(
    daemon: Arc<Daemon>,
    shutdown: impl Future<Output = ()>,
    inherited: handover::Inherited,
) -> Result<(), ServeError> {
    let config = &daemon.config();
    // Before any bind: a directory that would hand every pod to another uid stops npud.
    let interposer = match (&config.kubernetes, daemon.allocations()) {
        (Some(k8s), Some(allocations)) => {
            crate::kubernetes::install_interposer(k8s, config.state_dir.as_deref(), allocations)
                .map_err(ServeError::Startup)?
        }
        _ => None,
    };
    let listener = match inherited.unix {
        Some(taken) => {
            tracing::info!(socket = %config.socket.display(), "took over the socket from the npud before");
            taken
                .set_nonblocking(true)
                .and_then(|()| tokio::net::UnixListener::from_std(taken))
                .map_err(|e| ServeError::Startup(format!("the handed-over socket: {e}")))?
        }
        None => bind_socket(&config.socket, config.socket_mode, config.socket_dir_mode, config.socket_group).await?,
    };
    let socket = config.socket.clone();
    let mut socket_file = socket::SocketFile(socket.clone(), false);
    let mut kept = handover::Kept::new(&listener);
    let mut predecessor = inherited.predecessor;
    let standbys = handover::Standbys::listen(config.state_dir.as_deref());
    daemon
        .prewarm((0, npud_proto::flags::STREAM_FAST_LAUNCH | npud_proto::flags::STREAM_FAST_SYNC))
        .await
        .map_err(|e| ServeError::Startup(format!("pre-warming the pool: {e}")))?;
    spawn_background(&daemon);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let (health, health_service) = tonic_health::server::health_reporter();
    for name in crate::api::SERVICE_NAMES {
        health.set_service_status(*name, tonic_health::ServingStatus::Serving).await;
    }
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(npud_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ServeError::Startup(format!("reflection: {e}")))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(npud_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| ServeError::Startup(format!("reflection: {e}")))?;
    let routes = crate::api::router(Arc::clone(&daemon))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha);
    if let Some(addr) = config.metrics {
        let listener =
            handover::tcp(inherited.metrics, addr).await.map_err(|source| ServeError::Tcp { addr, source })?;
        kept.metrics = kept.keep(&listener);
        tracing::info!(%addr, "serving Prometheus metrics on /metrics");
        tokio::spawn(metrics::serve(Arc::clone(&daemon), listener, stop_rx.clone()));
    }
    if let (Some(k8s), Some(allocations)) = (&config.kubernetes, daemon.allocations()) {
        if k8s.mode.device_plugin() {
            let plugin = crate::kubernetes::plugin::Plugin {
                daemon: Arc::clone(&daemon),
                config: k8s.clone(),
                allocations: Arc::clone(allocations),
                interposer: interposer.clone(),
                generation: Arc::default(),
                signals: Arc::default(),
            };
            let signals = Arc::clone(&plugin.signals);
            // The plugin stops on a signal of its own: handing over, it outlives the sockets
            // until the successor's plugin is registered (`handover`).
            let stop = kept.plugin_stop.subscribe();
            kept.plugin = Some(tokio::spawn(crate::kubernetes::register::run(Arc::new(plugin), stop)));
            handover::follow(&mut predecessor, Some(signals));
        }
        if let Some(dra) = &k8s.dra {
            crate::kubernetes::dra::start(Arc::clone(&daemon), dra.clone(), interposer.clone(), stop_rx.clone());
        }
        let lister = k8s.pod_resources_socket.as_ref().map(|socket| {
            let lister = Arc::new(crate::kubernetes::pods::Lister { socket: socket.clone() });
            daemon.set_pod_lister(Arc::clone(&lister) as Arc<dyn crate::policy::allocations::PodLister>);
            lister
        });
        tokio::spawn(crate::kubernetes::pods::watch(
            Arc::clone(&daemon),
            Arc::clone(allocations),
            interposer,
            lister,
            (k8s.resource_name.clone(), k8s.dra.as_ref().map(|d| d.cdi_dir.clone())),
            (k8s.pod_resources_period, k8s.allocation_grace),
            stop_rx.clone(),
        ));
    }
    // Without a device plugin there is nothing to wait for: the predecessor hears so now.
    handover::follow(&mut predecessor, None);
    let proc = crate::tenancy::identity::ProcFs::new(config.proc_root.clone(), config.cgroup_root.clone());
    for limit in proc.limits() {
        tracing::warn!("{limit}");
    }
    let inspector: Arc<dyn crate::tenancy::identity::PeerInspector> = Arc::new(proc);
    let watched = Arc::new(replies::Watched::default());
    tokio::spawn(Arc::clone(&watched).watch(Arc::clone(&daemon), config.limits.reply_deadline));
    let cri = config.cri_socket.clone().map(|s| Arc::new(crate::kubernetes::cri::Confirmer::new(s)));
    let calls = Some(config.limits.max_concurrent_calls);
    // One limiter for both transports: the total bounds npud's descriptors whichever way
    // connections come.
    let limiter = ConnectionLimiter::new(
        config.limits.max_connections_per_tenant,
        config.limits.max_connections,
        crate::config::defaults::ADMIN_CONNECTIONS,
    );
    let metrics = daemon.metrics();
    let decode_errors = || {
        let metrics = Arc::clone(&metrics);
        tower::util::MapResponseLayer::new(move |res| {
            let res = crate::api::status::decode_failure_is_invalid_argument(res);
            crate::api::status::count_failure(&metrics, &res);
            res
        })
    };
    // A peer that reads nothing at all cannot answer pings: its connection is closed, and
    // what it held freed (`replies`).
    let keepalive = (Some(KEEPALIVE), Some(KEEPALIVE));
    // h2 keeps state for each stream a peer opens past its concurrent calls until it
    // refuses it; a peer that keeps opening them gets GOAWAY after this many, not 1,024.
    let resets = Some(config.limits.max_concurrent_calls as usize);
    let budget = replies::ReplyBudgetLayer { daemon: Arc::clone(&daemon) };
    let uds = tonic::transport::Server::builder()
        .max_concurrent_streams(calls)
        .http2_max_local_error_reset_streams(resets)
        .http2_keepalive_interval(keepalive.0)
        .http2_keepalive_timeout(keepalive.1)
        .layer(decode_errors())
        .layer(budget.clone())
        .layer(crate::api::status::RefuseOversizedMetadataLayer)
        .add_routes(routes.clone())
        .serve_with_incoming_shutdown(
            unix::route_connections(
                (listener, stop_rx.clone()),
                (inspector, cri, Arc::clone(&watched)),
                Arc::clone(&daemon),
                Arc::clone(&limiter),
            ),
            stopped(stop_rx.clone()),
        );
    let tcp = match config.listen {
        Some(addr) => {
            let mut builder = tonic::transport::Server::builder()
                .max_concurrent_streams(calls)
                .http2_max_local_error_reset_streams(resets)
                .http2_keepalive_interval(keepalive.0)
                .http2_keepalive_timeout(keepalive.1)
                .layer(decode_errors())
                .layer(budget);
            match &config.tls {
                Some(tls) => {
                    builder =
                        builder.tls_config(server_tls(tls)).map_err(|e| ServeError::Startup(format!("TLS: {e}")))?;
                    tracing::info!(%addr, mutual = tls.client_ca_pem.is_some(), "serving gRPC over TLS");
                }
                None => {
                    tracing::warn!(%addr, "serving plain TCP without TLS (--insecure-tcp): peers are not authenticated")
                }
            }
            let l = handover::tcp(inherited.tcp, addr).await.map_err(|source| ServeError::Tcp { addr, source })?;
            kept.tcp = kept.keep(&l);
            let incoming = tcp::incoming(l, limiter, daemon.metrics(), Arc::clone(daemon.replies()));
            Some(builder.add_routes(routes).serve_with_incoming_shutdown(incoming, stopped(stop_rx)))
        }
        None => None,
    };
    let servers = async move {
        match tcp {
            Some(tcp) => tokio::try_join!(uds, tcp).map(drop),
            None => uds.await,
        }
    };
    tokio::pin!(servers);
    tracing::info!(socket = %socket.display(), policy = config.policy.name(), epoch = daemon.epoch(), devices = daemon.devices().len(), "npud is serving");
    crate::serve::systemd::notify("READY=1");
    let result = tokio::select! {
        r = &mut servers => r.map_err(ServeError::from),
        () = shutdown => {
            tracing::info!("shutting down: refusing new work, reclaiming sessions");
            crate::serve::systemd::notify("STOPPING=1");
            health.set_not_serving::<tonic_health::pb::health_server::HealthServer<tonic_health::server::HealthService>>().await;
            for name in crate::api::SERVICE_NAMES {
                health.set_service_status(*name, tonic_health::ServingStatus::NotServing).await;
            }
            let successor = standbys.as_ref().and_then(handover::Standbys::take);
            // Accepting stops first: a process answered DRAINING from here on connects to
            // the backlog, which the successor takes over, never to this npud again.
            let _ = stop_tx.send(true);
            if successor.is_none() {
                kept.plugin_stop.send_replace(true);
            }
            daemon.start_draining();
            if successor.is_some() {
                // At once: the books name every holder until their processes, answered
                // DRAINING, leave for the successor.
                daemon.final_books().await;
            }
            if let Some(successor) = successor {
                socket_file.1 = kept.hand_over(&successor).await;
                if socket_file.1 {
                    // Its processes ask the successor from now on, declaring what they hold.
                    watched.close_all();
                }
            }
            let grace = daemon.config().shutdown_grace;
            let d = Arc::clone(&daemon);
            let reclaim = async move {
                for id in d.registry().all_sessions() {
                    d.reclaim(id, "daemon shutdown").await;
                }
            };
            let drained = tokio::time::timeout(grace, async { tokio::join!(reclaim, &mut servers).1 }).await;
            match drained {
                Ok(r) => r.map_err(ServeError::from),
                Err(_) => {
                    tracing::warn!(grace = ?grace, "in-flight calls did not finish within the grace; dropping them");
                    Ok(())
                }
            }
        }
    };
    daemon.drain_pools().await;
    tracing::info!("npud stopped");
    result
}
