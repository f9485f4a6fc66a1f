//! The `v1beta1.DevicePlugin` service: each device's stream budget as units of
//! `stream_unit` streams, their health, and Allocate's answer (the socket, the variables,
//! the allocation token, the interposer).

use crate::config::kubernetes::KubernetesConfig;
use crate::daemon::Daemon;
use crate::policy::allocations::{Allocations, CONTAINER_TOKEN_PATH};
use npud_proto::deviceplugin as dp;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// How often ListAndWatch looks for a change in health or capacity.
const WATCH_PERIOD: Duration = Duration::from_millis(500);

#[derive(Clone)]
pub struct Plugin {
    pub daemon: Arc<Daemon>,
    pub config: KubernetesConfig,
    pub allocations: Arc<Allocations>,
    /// The interposer installed on the host (under its content hash), when npud ships one.
    pub interposer: Option<super::interposer::Installed>,
    /// Bumped when the plugin's server stops (a kubelet restart): its ListAndWatch
    /// streams end, so the server's graceful shutdown does not wait for them forever.
    pub generation: Arc<std::sync::atomic::AtomicU64>,
    /// Rung when the kubelet accepted a registration (`register`), and to make every
    /// ListAndWatch stream send the units again though nothing changed: the kubelet marks
    /// every unit of the resource unhealthy when any stream of it ends (a predecessor's,
    /// after a handover: `ManagerImpl.PluginDisconnected` is by resource name,
    /// kubernetes#121994), until a list comes.
    pub signals: Arc<Signals>,
}

/// See [`Plugin::signals`].
#[derive(Default)]
pub struct Signals {
    pub registered: tokio::sync::Notify,
    pub resend: tokio::sync::Notify,
}

impl Plugin {
    /// Every unit of every device: `npud-<device>-<n>`, Unhealthy while the device is fenced.
    pub fn devices(&self) -> Vec<dp::Device> {
        let mut out = Vec::new();
        for d in 0..self.daemon.devices().len() as u32 {
            let units = self.daemon.budget(d).capacity / self.config.stream_unit;
            let health = if self.daemon.health().is_healthy(d) { "Healthy" } else { "Unhealthy" };
            out.extend((0..units).map(|i| dp::Device {
                id: format!("npud-{d}-{i}"),
                health: health.into(),
                topology: None,
            }));
        }
        out
    }

    /// Units by device from the kubelet's chosen ids; an id npud never advertised is refused.
    fn units(&self, ids: &[String]) -> Result<BTreeMap<u32, u32>, Status> {
        let mut by_device = BTreeMap::new();
        let devices = self.daemon.devices().len() as u32;
        for id in ids {
            let device = id
                .strip_prefix("npud-")
                .and_then(|rest| rest.split_once('-'))
                .and_then(|(d, n)| Some((d.parse::<u32>().ok()?, n.parse::<u32>().ok()?)))
                .map(|(d, _)| d)
                .filter(|d| *d < devices)
                .ok_or_else(|| Status::invalid_argument(format!("{id:?} is not a unit npud advertised")))?;
            *by_device.entry(device).or_insert(0u32) += 1;
        }
        Ok(by_device)
    }

    fn container(&self, ids: &[String]) -> Result<dp::ContainerAllocateResponse, Status> {
        let units = self.units(ids)?;
        let streams: Vec<(u32, u32)> = units.iter().map(|(d, u)| (*d, u * self.config.stream_unit)).collect();
        let total = streams.iter().fold(0u32, |n, (_, s)| n.saturating_add(*s));
        let library = self.interposer.as_ref().map(super::interposer::Installed::name);
        let (_, file) = self
            .allocations
            .allocate(ids.to_vec(), streams, library)
            .map_err(|e| Status::internal(format!("writing the allocation token: {e}")))?;
        let edits = super::edits::booked(&self.daemon.config().socket, self.interposer.as_ref());
        let mut envs: std::collections::HashMap<String, String> = edits.env.into_iter().collect();
        // What a process asks for at once: the whole allocation, which the interposer
        // lowers to its own device's booking (npud's welcome says it) once bound.
        envs.insert("NPUD_STREAMS".into(), total.to_string());
        envs.insert("NPUD_ALLOCATED_STREAMS".into(), total.to_string());
        envs.insert("NPUD_ALLOCATION".into(), CONTAINER_TOKEN_PATH.to_string());
        let mut mounts: Vec<dp::Mount> = edits
            .mounts
            .into_iter()
            .map(|m| dp::Mount { container_path: m.container_path, host_path: m.host_path, read_only: m.read_only })
            .collect();
        mounts.insert(
            1,
            dp::Mount {
                container_path: CONTAINER_TOKEN_PATH.into(),
                host_path: file.display().to_string(),
                read_only: true,
            },
        );
        Ok(dp::ContainerAllocateResponse { envs, mounts, ..Default::default() })
    }
}

#[tonic::async_trait]
impl dp::device_plugin_server::DevicePlugin for Plugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        Ok(Response::new(dp::DevicePluginOptions::default()))
    }

    type ListAndWatchStream = tokio_stream::wrappers::ReceiverStream<Result<dp::ListAndWatchResponse, Status>>;

    /// The units now, then again whenever health or capacity changes, for as long as the
    /// kubelet listens.
    async fn list_and_watch(&self, _: Request<dp::Empty>) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let plugin = self.clone();
        let generation = self.generation.load(std::sync::atomic::Ordering::Acquire);
        tokio::spawn(async move {
            let mut last = Vec::new();
            let mut tick = tokio::time::interval(WATCH_PERIOD);
            loop {
                let resend = tokio::select! {
                    _ = tick.tick() => false,
                    () = plugin.signals.resend.notified() => true,
                };
                if plugin.generation.load(std::sync::atomic::Ordering::Acquire) != generation {
                    return;
                }
                let now = plugin.devices();
                if now != last || resend {
                    if tx.send(Ok(dp::ListAndWatchResponse { devices: now.clone() })).await.is_err() {
                        return;
                    }
                    last = now;
                } else if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    async fn get_preferred_allocation(
        &self,
        _: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        Err(Status::unimplemented(
            "npud does not offer preferred allocations (get_preferred_allocation_available is false)",
        ))
    }

    /// One response per container request, in order; the whole call fails if one does.
    async fn allocate(&self, req: Request<dp::AllocateRequest>) -> Result<Response<dp::AllocateResponse>, Status> {
        let requests = req.into_inner().container_requests;
        if requests.is_empty() || requests.len() > 64 {
            return Err(Status::invalid_argument("an Allocate names 1..=64 containers"));
        }
        let container_responses = requests.iter().map(|c| self.container(&c.devices_ids)).collect::<Result<_, _>>()?;
        tracing::info!(containers = requests.len(), "kubelet allocated streams");
        Ok(Response::new(dp::AllocateResponse { container_responses }))
    }

    async fn pre_start_container(
        &self,
        _: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        Ok(Response::new(dp::PreStartContainerResponse {}))
    }
}
