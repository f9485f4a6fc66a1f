//! The daemon: its books, built once from a validated config and shared by every service,
//! and every domain operation on them (one file per resource). Operations take an
//! authenticated caller and plain values and return domain types; the gRPC layer and the
//! budget wire convert at the edges.

pub mod admin;
mod allocations;
pub mod books;
pub mod budget;
pub mod callbacks;
pub mod claims_dra;
mod delivery;
pub mod events;
pub mod exits;
pub mod faults;
pub mod health;
mod holding;
pub mod metrics;
pub mod reconcile;
pub mod released;
pub mod reports;
pub mod sessions;
pub mod streams;
mod wait;

use crate::backend::{Backend, DeviceDesc, sim::SimBackend};
use crate::config::{BackendKind, Config};
use crate::daemon::reports::ReportHub;
use crate::error::{NpudError, NpudResult, Reason};
use crate::policy::admission::Admission;
use crate::policy::quota::Quotas;
use crate::policy::state::StateStore;
use crate::registry::Registry;
use crate::registry::handle::{Minter, new_epoch};
use crate::tenancy::auth::Identities;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub struct Daemon {
    config: Config,
    backend: Arc<dyn Backend>,
    registry: Registry,
    admission: Arc<Admission>,
    quotas: Quotas,
    identities: std::sync::RwLock<Identities>,
    reports: ReportHub,
    epoch: u16,
    limiter: crate::tenancy::limits::RateLimiter,
    /// Blocking calls in flight per tenant.
    blocking: Arc<crate::tenancy::inflight::InFlight>,
    /// What clients' calls hold on the gRPC fronts, per tenant and in all.
    replies: Arc<crate::tenancy::replies::Replies>,
    /// Device number (st_rdev) of each device's node → the device (`holding`).
    device_nodes: std::collections::HashMap<u64, u32>,
    health: Arc<crate::observe::health::Health>,
    metrics: Arc<crate::observe::metrics::Metrics>,
    /// Processes holding streams they created themselves (the interposer's connections).
    natives: crate::policy::natives::Natives,
    /// Per device that limits its processes with a context, who holds a slot.
    slots: crate::policy::slots::ClientSlots,
    /// Streams sessions destroyed that are still draining (for device sync).
    released: crate::daemon::released::Released,
    /// Per device, what reconciliation keeps between measurements (`reconcile`).
    drift: std::sync::Mutex<std::collections::BTreeMap<u32, reconcile::Drift>>,
    /// Device-plugin allocations and the containers bound to them (`[kubernetes]`).
    allocations: Option<Arc<crate::policy::allocations::Allocations>>,
    /// The kubelet's pod-resources reader, once the Kubernetes front end has one, and its
    /// last listing: where an allocation's container is, and which devices it was given.
    pod_lister: std::sync::OnceLock<Arc<dyn crate::policy::allocations::PodLister>>,
    pod_listing: std::sync::Mutex<Arc<Vec<crate::policy::allocations::Listed>>>,
    draining: AtomicBool,
    /// Held while the native holders' books are written; true once they went to a
    /// successor npud (`books`), after which this npud writes them no more.
    books_writer: tokio::sync::Mutex<bool>,
    /// Set by an admin's Drain(shutdown): serve() treats it like SIGTERM.
    shutdown: tokio::sync::watch::Sender<bool>,
    /// Device reports, consumed by the dispatcher task (taken once at start).
    report_rx: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<crate::backend::Report>>>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the {backend} backend: {message}")]
    Backend { backend: &'static str, message: String },
    #[error(transparent)]
    State(#[from] crate::policy::state::StateError),
    #[error("{0}")]
    Config(String),
}

impl Daemon {
    /// Opens the devices and restores persisted state. Nothing is bound yet.
    pub fn open(config: Config) -> Result<Arc<Daemon>, StartError> {
        let backend: Arc<dyn Backend> = match config.backend {
            BackendKind::Sim => Arc::new(
                SimBackend::new(&config.sim.profile, config.sim.devices, &config.sim.options)
                    .map_err(|e| StartError::Backend { backend: "sim", message: e.to_string() })?,
            ),
            BackendKind::Acl => {
                let paths = crate::backend::acl::candidates(config.acl_library.as_deref());
                Arc::new(
                    crate::backend::acl::AclBackend::open(&paths)
                        .map_err(|message| StartError::Backend { backend: "acl", message })?,
                )
            }
            BackendKind::Cuda => {
                let paths = crate::backend::cuda::candidates(config.cuda_library.as_deref());
                Arc::new(
                    crate::backend::cuda::CudaBackend::open(
                        &paths,
                        config.budget.cuda_streams_per_device,
                        config.budget.mps_clients,
                    )
                    .map_err(|message| StartError::Backend { backend: "cuda", message })?,
                )
            }
        };
        if let Some(dir) = &config.state_dir {
            crate::policy::state::private_dir(dir)
                .map_err(|e| StartError::Config(format!("state directory {}: {e}", dir.display())))?;
        }
        let store = StateStore::new(config.state_dir.as_deref());
        let persisted = store.load()?;
        // A state file is input like the config: its quotas pass the same checks.
        for (name, q) in &persisted.quotas {
            crate::types::check_tenant_name(name)
                .map_err(|e| StartError::Config(format!("persisted quota for {name:?}: {e}")))?;
            q.validate(&format!("persisted quota for {name}")).map_err(|e| StartError::Config(e.to_string()))?;
        }
        let epoch = new_epoch(persisted.epoch);
        let event_table = backend.devices().iter().map(|d| d.event_limit).min().unwrap_or(u32::MAX);
        let quotas = Quotas::new(&config, store, persisted, event_table);
        quotas.record_epoch(epoch)?;
        let capacities: Vec<u32> = backend
            .devices()
            .iter()
            .map(|d| d.hardware_limit.saturating_sub(d.runtime_streams).saturating_sub(config.budget.safety_margin))
            .collect();
        if let Some(min) = capacities.iter().min() {
            let reserved: u64 = quotas.reservations().values().map(|&r| u64::from(r)).sum();
            if reserved > u64::from(*min) {
                return Err(StartError::Config(format!(
                    "tenants reserve {reserved} streams but a device can hand out only {min}"
                )));
            }
        }
        let metrics = Arc::new(crate::observe::metrics::Metrics::new());
        let drain_bound = config.limits.callback_deadline + std::time::Duration::from_secs(5);
        let admission = Arc::new(Admission::new(
            Arc::clone(&backend),
            config.policy,
            config.budget.clone(),
            &capacities,
            drain_bound,
            config.limits.max_pending_requests,
            Arc::clone(&metrics),
        ));
        admission.set_reservations(&quotas.reservations());
        let minter = Arc::new(Minter::new(epoch));
        let reports = ReportHub::new(
            config.limits.max_pending_reports,
            config.limits.max_report_bytes,
            config.limits.max_callback_report_bytes,
        );
        // Devices report from their own threads; a channel hands the reports to the
        // runtime without ever blocking the device.
        let (report_tx, report_rx) = tokio::sync::mpsc::unbounded_channel();
        backend.set_report_sink(Arc::new(move |report| {
            let _ = report_tx.send(report);
        }));
        let health = Arc::new(crate::observe::health::Health::new(backend.devices().len()));
        let limiter =
            crate::tenancy::limits::RateLimiter::new(config.limits.requests_per_second, config.limits.request_burst);
        let natives = crate::policy::natives::Natives::new(
            config.limits.max_native_processes as usize,
            config.limits.declare_grace,
            config.budget.native_pacing,
        );
        let allocations = config.kubernetes.as_ref().map(|_| {
            let dir = config.state_dir.clone().unwrap_or_else(|| "/var/lib/npud".into()).join("allocations");
            Arc::new(crate::policy::allocations::Allocations::new(dir))
        });
        let blocking = crate::tenancy::inflight::InFlight::new(config.limits.max_blocking_calls);
        let mib = |m: u32| u64::from(m) << 20;
        let replies = crate::tenancy::replies::Replies::new(
            mib(config.limits.client_memory_per_tenant_mib),
            mib(config.limits.client_memory_mib),
            crate::tenancy::replies::conn_cost(config.limits.max_concurrent_calls),
        );
        let device_nodes = holding::node_map(backend.as_ref());
        let slots = crate::policy::slots::ClientSlots::new(backend.devices().iter().map(|d| d.client_slots));
        let daemon = Arc::new(Daemon {
            slots,
            device_nodes,
            identities: std::sync::RwLock::new(Identities::new(&config)),
            registry: Registry::new(Arc::clone(&minter)),
            reports,
            admission,
            quotas,
            backend,
            epoch,
            config,
            limiter,
            blocking,
            replies,
            health,
            metrics,
            natives,
            released: crate::daemon::released::Released::default(),
            drift: std::sync::Mutex::default(),
            allocations,
            pod_lister: std::sync::OnceLock::new(),
            pod_listing: std::sync::Mutex::default(),
            draining: AtomicBool::new(false),
            books_writer: tokio::sync::Mutex::new(false),
            shutdown: tokio::sync::watch::channel(false).0,
            report_rx: std::sync::Mutex::new(Some(report_rx)),
        });
        daemon.restore_books();
        // Allocations read back are booked: their pods' caps and reservations hold again.
        for tenant in daemon.allocations.as_ref().map(|a| a.bound_tenants()).unwrap_or_default() {
            daemon.sync_cap(&tenant);
        }
        daemon.apply_reservations();
        Ok(daemon)
    }

    /// Applies a re-read config file (SIGHUP): tenant mappings, admins and quotas change;
    /// sessions, streams and everything else stay as they are.
    pub fn reload(&self, config: &Config) -> Result<(), StartError> {
        let reserved: u64 = config.tenants.iter().map(|t| u64::from(t.quota.reserved_streams)).sum();
        if reserved > u64::from(self.smallest_capacity()) {
            return Err(StartError::Config(format!("tenants reserve {reserved} streams, more than a device holds")));
        }
        *self.identities.write().unwrap_or_else(|e| e.into_inner()) = Identities::new(config);
        let event_table = self.devices().iter().map(|d| d.event_limit).min().unwrap_or(u32::MAX);
        self.quotas.reload(config, event_table);
        self.apply_reservations();
        tracing::info!(tenants = config.tenants.len(), "configuration reloaded");
        let waiting = self.config.restart_only_changes(config);
        if !waiting.is_empty() {
            tracing::warn!(
                settings = waiting.join(", "),
                "the file changes settings a reload does not apply (only tenants and quotas reload); they take effect at the next start"
            );
        }
        Ok(())
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// This run's epoch: handles minted by an earlier run are refused.
    pub fn epoch(&self) -> u16 {
        self.epoch
    }

    /// Sessions and the handles they own (read by `status`, `session list` and the
    /// report streams).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn quotas(&self) -> &Quotas {
        &self.quotas
    }

    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    pub fn health(&self) -> &crate::observe::health::Health {
        &self.health
    }

    /// Processes holding streams they created themselves.
    pub fn natives(&self) -> &crate::policy::natives::Natives {
        &self.natives
    }

    pub fn reports(&self) -> &ReportHub {
        &self.reports
    }

    /// Hands the daemon the kubelet's pod-resources reader (once; the Kubernetes front end
    /// makes it when it starts).
    pub fn set_pod_lister(&self, lister: Arc<dyn crate::policy::allocations::PodLister>) {
        let _ = self.pod_lister.set(lister);
    }

    /// Device-plugin allocations, when npud is the node's device plugin.
    pub fn allocations(&self) -> Option<&Arc<crate::policy::allocations::Allocations>> {
        self.allocations.as_ref()
    }

    /// A device's budget figures now.
    pub fn budget(&self, device: u32) -> crate::policy::admission::BudgetView {
        self.admission.view(device)
    }

    /// Streams handed out from the warm pool so far.
    pub fn pool_hits(&self) -> u64 {
        self.admission.pool_hits()
    }

    /// Fills the warm pools at start-up (`budget.prewarm` streams per device).
    pub async fn prewarm(&self, class: crate::policy::admission::Class) -> NpudResult<()> {
        self.admission.prewarm(class).await
    }

    /// Gives the warm pools' streams back to the hardware (at shutdown).
    pub async fn drain_pools(&self) {
        self.admission.drain_pools().await;
    }

    /// The metrics handle, for the layers that count on the daemon's behalf.
    pub fn metrics(&self) -> Arc<crate::observe::metrics::Metrics> {
        Arc::clone(&self.metrics)
    }

    /// What clients' calls hold on the gRPC fronts.
    pub fn replies(&self) -> &Arc<crate::tenancy::replies::Replies> {
        &self.replies
    }

    pub fn devices(&self) -> &[DeviceDesc] {
        self.backend.devices()
    }

    /// npud's device that a process's claim names (physical id or UUID, see
    /// `budget.proto` DeviceIdentity); DeviceNotOwned when npud has none by that name.
    pub fn device_by_identity(&self, physical_id: Option<u32>, uuid: Option<&str>) -> NpudResult<u32> {
        if let Some(d) = self.devices().iter().find(|d| d.identity.matches(physical_id, uuid)) {
            return Ok(d.id);
        }
        let named = match (physical_id, uuid) {
            (Some(p), _) => format!("physical device {p}"),
            (None, Some(u)) => format!("device {}", crate::error::quoted(u)),
            (None, None) => "an empty device identity".into(),
        };
        Err(NpudError::new(Reason::DeviceNotOwned, format!("npud does not own {named}")))
    }

    pub fn device(&self, id: u32) -> NpudResult<&DeviceDesc> {
        self.devices().get(id as usize).ok_or_else(|| {
            NpudError::new(
                Reason::InvalidDevice,
                format!("no device {id}; this daemon has {} device(s)", self.devices().len()),
            )
        })
    }

    pub fn smallest_capacity(&self) -> u32 {
        (0..self.devices().len() as u32).map(|d| self.admission.capacity(d)).min().unwrap_or(0)
    }

    pub fn take_report_receiver(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<crate::backend::Report>> {
        self.report_rx.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Asks serve() to shut down gracefully, as SIGTERM does.
    pub fn request_shutdown(&self) {
        self.start_draining();
        self.shutdown.send_replace(true);
    }

    /// Resolves once a shutdown was requested through the API.
    pub async fn shutdown_requested(&self) {
        let mut rx = self.shutdown.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    pub fn refuse_if_draining(&self) -> NpudResult<()> {
        if self.is_draining() {
            return Err(NpudError::new(Reason::Draining, "npud is shutting down and accepts no new work"));
        }
        Ok(())
    }
}
