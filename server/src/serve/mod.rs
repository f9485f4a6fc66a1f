//! Binding, serving and shutting down.
//!
//! The socket rule: create the directory (0750) if needed, refuse a symlink or a
//! non-socket at the path, refuse to steal the socket of a live daemon, remove a stale
//! socket left by a crashed one, bind, then chmod 0660. Shutdown stops accepting, reclaims
//! every session, gives in-flight calls a bounded grace, destroys pooled streams and
//! removes the socket.

pub mod metrics;
mod replies;
pub mod systemd;
mod tcp;
mod unix;

use crate::daemon::Daemon;
use crate::tenancy::connections::ConnectionLimiter;
use std::future::Future;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixListener;

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

/// Our effective uid: the owner of /proc/self (no libc call needed).
fn my_uid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0)
}

fn socket_error(path: &Path, message: impl Into<String>) -> ServeError {
    ServeError::Socket { path: path.to_path_buf(), message: message.into() }
}

/// Binds the Unix socket following the socket rule.
pub async fn bind_socket(
    path: &Path,
    mode: u32,
    dir_mode: u32,
    group: Option<u32>,
) -> Result<UnixListener, ServeError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::create_dir_all(dir).map_err(|e| socket_error(path, format!("cannot create directory: {e}")))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dir_mode))
            .map_err(|e| socket_error(path, format!("cannot set directory mode: {e}")))?;
    }
    own_socket_dir(path, dir_mode, group)?;
    check_socket_dir(path)?;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(socket_error(path, "is a symlink; refusing to follow it"));
        }
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(socket_error(path, "exists and is not a socket"));
        }
        Ok(meta) if meta.uid() != my_uid() => {
            return Err(socket_error(
                path,
                format!("is owned by uid {}, not by this daemon; refusing to replace it", meta.uid()),
            ));
        }
        Ok(_) => {
            if tokio::net::UnixStream::connect(path).await.is_ok() {
                return Err(socket_error(path, "another npud is serving on it"));
            }
            tracing::info!(path = %path.display(), "removing stale socket left by an earlier daemon");
            std::fs::remove_file(path).map_err(|e| socket_error(path, format!("cannot remove stale socket: {e}")))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(socket_error(path, e.to_string())),
    }
    let listener = UnixListener::bind(path).map_err(|e| socket_error(path, format!("cannot bind: {e}")))?;
    if let Some(gid) = group {
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(|e| socket_error(path, format!("cannot give the socket to group {gid}: {e}")))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| socket_error(path, format!("cannot set mode: {e}")))?;
    Ok(listener)
}

/// A socket directory of npud's own (owned by its uid and named `npud…`, as
/// `/run/npud` and `/tmp/npud-UID` are; never a shared one like `/run` or `/tmp`) gets the
/// configured mode and `socket_group` every start: a connecting process needs search
/// permission on the directory as well as write permission on the socket, so a group
/// member of a 0750 root:root directory, or a pod's uid under an earlier npud's 0750,
/// would get EACCES however the socket's own mode reads.
fn own_socket_dir(path: &Path, dir_mode: u32, group: Option<u32>) -> Result<(), ServeError> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else { return Ok(()) };
    let ours = dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with("npud"))
        && std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == my_uid());
    if !ours {
        return Ok(());
    }
    if let Some(gid) = group {
        std::os::unix::fs::chown(dir, None, Some(gid))
            .map_err(|e| socket_error(path, format!("cannot give its directory to group {gid}: {e}")))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dir_mode))
        .map_err(|e| socket_error(path, format!("cannot set its directory's mode: {e}")))
}

/// The socket's directory must be one that no other uid can rename or unlink entries in:
/// owned by this daemon's uid or by root, and not writable by group or others unless it is
/// sticky (like /tmp). Otherwise another uid could replace the socket with its own and
/// root's npuctl would talk to an impostor; it also makes the chmod after bind, which goes
/// through the path, safe.
fn check_socket_dir(path: &Path) -> Result<(), ServeError> {
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("."),
    };
    let meta = std::fs::metadata(&dir).map_err(|e| socket_error(path, format!("cannot inspect its directory: {e}")))?;
    if meta.uid() != my_uid() && meta.uid() != 0 {
        return Err(socket_error(
            path,
            format!(
                "its directory {} is owned by uid {}; another uid could replace the socket",
                dir.display(),
                meta.uid()
            ),
        ));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(socket_error(
            path,
            format!(
                "its directory {} is writable by other users (mode {:o}) and not sticky; another uid could replace the socket",
                dir.display(),
                mode & 0o7777
            ),
        ));
    }
    Ok(())
}

/// Removes the socket file when serving ends, however it ends (a TCP listener that cannot
/// bind must not leave a dead socket behind).
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        match std::fs::remove_file(&self.0) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(error = %e, "could not remove the socket"),
        }
    }
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
    let config = &daemon.config();
    // Before any bind: a directory that would hand every pod to another uid stops npud.
    let interposer = match (&config.kubernetes, daemon.allocations()) {
        (Some(k8s), Some(allocations)) => {
            crate::kubernetes::install_interposer(k8s, config.state_dir.as_deref(), allocations)
                .map_err(ServeError::Startup)?
        }
        _ => None,
    };
    let listener = bind_socket(&config.socket, config.socket_mode, config.socket_dir_mode, config.socket_group).await?;
    let socket = config.socket.clone();
    let _socket_file = SocketFile(socket.clone());
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
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| ServeError::Tcp { addr, source })?;
        tracing::info!(%addr, "serving Prometheus metrics on /metrics");
        tokio::spawn(metrics::serve(Arc::clone(&daemon), listener, stop_rx.clone()));
    }
    if let (Some(k8s), Some(allocations)) = (&config.kubernetes, daemon.allocations()) {
        let plugin = crate::kubernetes::plugin::Plugin {
            daemon: Arc::clone(&daemon),
            config: k8s.clone(),
            allocations: Arc::clone(allocations),
            interposer: interposer.clone(),
            generation: Arc::default(),
        };
        tokio::spawn(crate::kubernetes::register::run(Arc::new(plugin), stop_rx.clone()));
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
            k8s.resource_name.clone(),
            (k8s.pod_resources_period, k8s.allocation_grace),
            stop_rx.clone(),
        ));
    }
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
            unix::route_connections(listener, (inspector, cri, watched), Arc::clone(&daemon), Arc::clone(&limiter)),
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
            let l = tokio::net::TcpListener::bind(addr).await.map_err(|source| ServeError::Tcp { addr, source })?;
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
            daemon.start_draining();
            let _ = stop_tx.send(true);
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
