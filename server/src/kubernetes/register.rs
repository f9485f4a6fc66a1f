//! Serving npud's plugin socket and registering with the kubelet, and doing both again
//! when the kubelet restarts (it recreates `kubelet.sock` and removes the plugins'
//! sockets) or npud's own socket disappears (shared/reference/kubelet.md §3, §4).

use super::plugin::Plugin;
use crate::config::kubernetes::PLUGIN_SOCKET;
use npud_proto::deviceplugin as dp;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often the directory is looked at: a re-registration follows a kubelet restart
/// within about this long.
const WATCH_PERIOD: Duration = Duration::from_millis(500);

/// Runs until `stop` turns true: serve, register, watch, and again.
pub async fn run(plugin: Arc<Plugin>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let dir = plugin.config.device_plugin_dir.clone();
    let (kubelet, ours) = (dir.join("kubelet.sock"), dir.join(PLUGIN_SOCKET));
    let (mut warned, mut refused) = (false, false);
    loop {
        let Some(registered) = inode(&kubelet) else {
            if !warned {
                tracing::warn!(socket = %kubelet.display(), "no kubelet registration socket yet; waiting for it");
                warned = true;
            }
            if wait(&mut stop).await {
                return;
            }
            continue;
        };
        // Serve first: the kubelet calls back into the plugin inside Register.
        let (server_stop, served) = match serve(&plugin, &ours) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(socket = %ours.display(), error = %e, "cannot serve the device plugin socket; retrying");
                if wait(&mut stop).await {
                    return;
                }
                continue;
            }
        };
        let bound = inode(&ours);
        let accepted = match register(&kubelet, &plugin.config.resource_name).await {
            Ok(()) => {
                (warned, refused) = (false, false);
                plugin.signals.registered.notify_one();
                tracing::info!(resource = %plugin.config.resource_name, socket = %ours.display(), "registered with the kubelet");
                true
            }
            Err(e) => {
                if !refused {
                    tracing::warn!(error = %e, "registering with the kubelet failed; trying again every 500 ms");
                    refused = true;
                }
                false
            }
        };
        // Watch until the kubelet restarts, our socket goes, or npud stops; a refused
        // registration is tried again after one period.
        let stopping = loop {
            if wait(&mut stop).await {
                break true;
            }
            if !accepted {
                break false;
            }
            if inode(&kubelet) != Some(registered) || !ours.exists() {
                tracing::info!("the kubelet restarted or removed npud's socket; registering again");
                break false;
            }
        };
        plugin.generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let _ = server_stop.send(());
        // Its ListAndWatch streams end within a watch period; do not wait on a stuck one.
        let _ = tokio::time::timeout(Duration::from_secs(5), served).await;
        if stopping {
            // Unless a successor bound its own there meanwhile (a handover).
            if inode(&ours) == bound {
                let _ = std::fs::remove_file(&ours);
            }
            return;
        }
    }
}

/// Sleeps one watch period; true when npud is stopping.
async fn wait(stop: &mut tokio::sync::watch::Receiver<bool>) -> bool {
    let _ = tokio::time::timeout(WATCH_PERIOD, stop.wait_for(|s| *s)).await;
    *stop.borrow()
}

/// Which file `path` is: a restarted kubelet's new socket may reuse the old inode
/// number, never also its change time to the nanosecond.
pub(super) fn inode(path: &Path) -> Option<(u64, u64, i64, i64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

type Served = (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>);

/// Binds `socket` (replacing a stale one) and serves the DevicePlugin service on it.
fn serve(plugin: &Arc<Plugin>, socket: &PathBuf) -> std::io::Result<Served> {
    let _ = std::fs::remove_file(socket);
    let listener = tokio::net::UnixListener::bind(socket)?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let service = dp::device_plugin_server::DevicePluginServer::new(Plugin::clone(plugin));
    let task = tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let shutdown = async {
            let _ = rx.await;
        };
        if let Err(e) = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
        {
            tracing::error!(error = %e, "the device plugin server stopped");
        }
    });
    Ok((tx, task))
}

/// A gRPC channel to one of the kubelet's Unix sockets.
pub(super) async fn unix_channel(socket: &Path) -> Result<tonic::transport::Channel, String> {
    let path = socket.to_path_buf();
    // The URI is required by the API but unused: the connector dials the socket.
    tonic::transport::Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_: tonic::codegen::http::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
        .map_err(|e| format!("cannot reach {}: {e}", socket.display()))
}

/// `Registration.Register` on the kubelet's socket.
async fn register(kubelet: &Path, resource_name: &str) -> Result<(), String> {
    let channel = unix_channel(kubelet).await?;
    let mut client = dp::registration_client::RegistrationClient::new(channel);
    let request = dp::RegisterRequest {
        version: "v1beta1".into(),
        endpoint: PLUGIN_SOCKET.into(),
        resource_name: resource_name.into(),
        options: Some(dp::DevicePluginOptions::default()),
    };
    tokio::time::timeout(Duration::from_secs(30), client.register(request))
        .await
        .map_err(|_| "the kubelet did not answer Register within 30 s".to_string())?
        .map_err(|s| format!("the kubelet refused: {}", s.message()))?;
    Ok(())
}
