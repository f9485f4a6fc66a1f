//! Serving the DRA plugin's two sockets: `Registration` in the kubelet's plugins_registry
//! directory (its plugin watcher finds the socket, asks `GetInfo` and says whether it
//! registered the driver: pluginregistration v1) and `DRAPlugin` at the endpoint it
//! names, with `DRAResourceHealth` beside it (`health`). A socket that disappears (a node clean-up, a successor npud that took over and
//! stopped) is bound again; at npud's stop both go, unless a successor's replaced them.

use super::super::register::inode;
use super::Dra;
use npud_proto::dra::dra_plugin_server::DraPluginServer;
use npud_proto::pluginregistration as reg;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// How often the sockets are looked at.
const WATCH_PERIOD: Duration = Duration::from_millis(500);

/// The service name the kubelet looks for in `supported_versions`
/// (k8s.io/kubelet/pkg/apis/dra/v1 `DRAPluginService`).
pub const DRA_SERVICE: &str = "v1.DRAPlugin";

/// The plugin watcher's view of npud: a DRA plugin, its driver name and endpoint.
struct Registrar {
    driver: String,
    endpoint: PathBuf,
}

#[tonic::async_trait]
impl reg::registration_server::Registration for Registrar {
    async fn get_info(&self, _: Request<reg::InfoRequest>) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(reg::PluginInfo {
            r#type: "DRAPlugin".into(),
            name: self.driver.clone(),
            endpoint: self.endpoint.display().to_string(),
            supported_versions: vec![DRA_SERVICE.into()],
        }))
    }

    async fn notify_registration_status(
        &self,
        req: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let status = req.into_inner();
        match status.plugin_registered {
            true => tracing::info!(driver = %self.driver, "the kubelet registered npud's DRA plugin"),
            false => {
                tracing::error!(driver = %self.driver, error = %status.error, "the kubelet refused npud's DRA plugin")
            }
        }
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

/// Serves both sockets until `stop` turns true, binding either again when it goes.
pub async fn run(dra: Arc<Dra>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let (endpoint, registration) = (dra.config.endpoint(), dra.config.registration());
    let mut served: Option<Served> = None;
    let mut warned = false;
    loop {
        let current = [inode(&endpoint), inode(&registration)];
        let intact = served.as_ref().is_some_and(|s| current.iter().zip(&s.bound).all(|(c, b)| c == &Some(*b)));
        if !intact {
            if let Some(s) = served.take() {
                s.stop().await;
                tracing::info!("a DRA plugin socket went; serving both again");
            }
            match serve(&dra, &endpoint, &registration) {
                Ok(s) => {
                    warned = false;
                    tracing::info!(driver = %dra.config.driver, endpoint = %endpoint.display(), "serving the DRA plugin");
                    served = Some(s);
                }
                Err(e) if !warned => {
                    tracing::error!(error = %e, "cannot serve the DRA plugin's sockets; retrying every 500 ms");
                    warned = true;
                }
                Err(_) => {}
            }
        }
        let _ = tokio::time::timeout(WATCH_PERIOD, stop.wait_for(|s| *s)).await;
        if *stop.borrow() {
            if let Some(s) = served.take() {
                let bound = s.bound.clone();
                s.stop().await;
                for (path, ours) in [&endpoint, &registration].into_iter().zip(bound) {
                    if inode(path) == Some(ours) {
                        let _ = std::fs::remove_file(path);
                    }
                }
            }
            return;
        }
    }
}

type Inode = (u64, u64, i64, i64);

/// The two sockets as bound, and their server, stopped by turning `stop` true.
struct Served {
    bound: Vec<Inode>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// Stops the server; its streams end within a watch period, a stuck one is not waited
    /// for past 5 s.
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

/// Binds both sockets (replacing stale files; the endpoint's directory made 0750) and
/// serves them from one task.
fn serve(dra: &Arc<Dra>, endpoint: &Path, registration: &Path) -> std::io::Result<Served> {
    use std::os::unix::fs::DirBuilderExt;
    let mut listeners = Vec::new();
    for path in [endpoint, registration] {
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new().recursive(true).mode(0o750).create(dir)?;
        }
        let _ = std::fs::remove_file(path);
        listeners.push(tokio::net::UnixListener::bind(path)?);
    }
    let bound: Vec<Inode> = [endpoint, registration]
        .iter()
        .map(|p| inode(p).ok_or_else(|| std::io::Error::other(format!("{} went as it was bound", p.display()))))
        .collect::<Result<_, _>>()?;
    let registration_listener = listeners.pop().ok_or_else(|| std::io::Error::other("no listener"))?;
    let endpoint_listener = listeners.pop().ok_or_else(|| std::io::Error::other("no listener"))?;
    let registrar = Registrar { driver: dra.config.driver.clone(), endpoint: endpoint.to_path_buf() };
    let service = DraPluginServer::new(super::Service(Arc::clone(dra)));
    let (stop, stopping) = tokio::sync::watch::channel(false);
    // Beside it on the same endpoint, for a kubelet with ResourceHealthStatus.
    let health =
        npud_proto::dra_health::dra_resource_health_server::DraResourceHealthServer::new(super::health::Health {
            daemon: Arc::clone(&dra.daemon),
            config: dra.config.clone(),
            stop: stopping.clone(),
        });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let plugin =
        tonic::transport::Server::builder().add_service(service).add_service(health).serve_with_incoming_shutdown(
            tokio_stream::wrappers::UnixListenerStream::new(endpoint_listener),
            stopped(stopping.clone()),
        );
    let registrar = tonic::transport::Server::builder()
        .add_service(reg::registration_server::RegistrationServer::new(registrar))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::UnixListenerStream::new(registration_listener),
            stopped(stopping),
        );
    let task = tokio::spawn(async move {
        let (a, b) = tokio::join!(plugin, registrar);
        if let Err(e) = a.and(b) {
            tracing::error!(error = %e, "the DRA plugin's server stopped");
        }
    });
    Ok(Served { bound, stop, task })
}
