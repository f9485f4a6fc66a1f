use super::{Api, convert};
use crate::daemon::admin::Fault;
use crate::error::{NpudError, Reason};
use crate::policy::quota::QuotaChange;
use npud_proto::v1::{self as pb, admin_service_server::AdminService};
use std::collections::BTreeMap;
use std::sync::Arc;
use tonic::{Request, Response, Status};

#[tonic::async_trait]
impl AdminService for Api {
    async fn status(&self, req: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let caller = self.caller(&req)?;
        let d = &self.daemon;
        let counts = d.registry().tenant_counts();
        let quotas = d.quotas().all();
        let mut tenants = Vec::new();
        for desc in d.devices() {
            let view = d.budget(desc.id);
            let mut names: BTreeMap<Arc<str>, ()> = view.tenants.keys().map(|t| (Arc::clone(t), ())).collect();
            names.extend(quotas.keys().map(|t| (Arc::clone(t), ())));
            names.extend(counts.keys().map(|t| (Arc::clone(t), ())));
            for name in names.keys() {
                if !caller.admin && name.as_ref() != caller.tenant.as_ref() {
                    continue;
                }
                let fig = view.tenants.get(name).cloned().unwrap_or_default();
                let (sessions, events) =
                    counts.get(name).map_or((0, 0), |(s, per_dev)| (*s, per_dev.get(&desc.id).copied().unwrap_or(0)));
                let (base, _) = d.quotas().get(name);
                let booking = d.allocations().and_then(|a| a.booking(name));
                let quota = booking.as_ref().map_or(base, |b| b.quota(base, desc.id));
                tenants.push(pb::TenantUsage {
                    tenant: name.to_string(),
                    device: desc.id,
                    streams: fig.streams,
                    events,
                    waiting_requests: fig.waiting_requests,
                    waiting_streams: fig.waiting_streams,
                    quota: Some(convert::quota(&quota)),
                    sessions,
                    allocated_streams: booking.map_or(0, |b| b.on(desc.id)),
                    left_untracked: fig.left_untracked,
                    untracked_bound: d.untracked_bound(name, desc.id),
                    capture_debt_bound: d.capture_debt_bound(name, desc.id),
                });
            }
        }
        // The node's totals are an admin's; anyone else sees its own tenant's, and nothing
        // that counts what other tenants do.
        let (node, sessions, streams, events) = match caller.admin {
            true => {
                let (s, st, e) = d.registry().totals();
                (true, s as u32, st as u32, e as u32)
            }
            false => {
                let own = counts.get(&caller.tenant);
                let events = own.map_or(0, |(_, per_dev)| per_dev.values().sum());
                (false, own.map_or(0, |(s, _)| *s), tenants.iter().map(|t| t.streams).sum(), events)
            }
        };
        let hardware_creations = d.devices().iter().map(|x| d.backend().hardware_creations(x.id)).sum();
        Ok(Response::new(pb::StatusResponse {
            devices: self.device_list(),
            tenants,
            policy: d.config().policy.name().to_string(),
            epoch: u32::from(d.epoch()),
            pool_hits: if node { d.pool_hits() } else { 0 },
            hardware_creations: if node { hardware_creations } else { 0 },
            sessions,
            streams,
            events,
            callbacks_in_flight: if node { d.reports().pending_callbacks() as u32 } else { 0 },
            invariant_violations: if node { d.health().violations() } else { 0 },
            native_holders: d.natives().rows((!caller.admin).then_some(caller.tenant.as_ref())),
            allocations: d.booking_rows((!caller.admin).then_some(caller.tenant.as_ref())),
        }))
    }

    async fn list_tenants(
        &self,
        req: Request<pb::ListTenantsRequest>,
    ) -> Result<Response<pb::ListTenantsResponse>, Status> {
        let caller = self.caller(&req)?;
        let mut all = self.daemon.quotas().all();
        if !all.contains_key(&caller.tenant) {
            let (q, src) = self.daemon.quotas().get(&caller.tenant);
            all.insert(Arc::clone(&caller.tenant), (q, src));
        }
        // A pod with an allocation bound: its quota is the allocation, over all devices.
        let pods = self.daemon.allocations().map(|a| a.bound_tenants()).unwrap_or_default();
        for pod in &pods {
            all.entry(Arc::clone(pod)).or_insert_with(|| self.daemon.quotas().get(pod));
        }
        // And every tenant that holds or waits for streams anywhere, on whatever quota it
        // has (the default one included): the list is of who uses npud, not of the config.
        for device in 0..self.daemon.devices().len() as u32 {
            for (tenant, figures) in &self.daemon.budget(device).tenants {
                if figures.streams > 0 || figures.waiting_requests > 0 {
                    all.entry(Arc::clone(tenant)).or_insert_with(|| self.daemon.quotas().get(tenant));
                }
            }
        }
        let tenants = all
            .into_iter()
            .filter(|(t, _)| caller.admin || t.as_ref() == caller.tenant.as_ref())
            .map(|(t, (mut q, src))| {
                let booking = self.daemon.allocations().and_then(|a| a.booking(&t));
                let source = match booking {
                    Some(b) => {
                        q.max_streams = b.total;
                        q.reserved_streams = b.devices.values().fold(0u32, |n, r| n.saturating_add(*r));
                        "allocation"
                    }
                    None => src.name(),
                };
                pb::TenantInfo { name: t.to_string(), quota: Some(convert::quota(&q)), source: source.into() }
            })
            .collect();
        Ok(Response::new(pb::ListTenantsResponse { tenants }))
    }

    async fn set_quota(&self, req: Request<pb::SetQuotaRequest>) -> Result<Response<pb::TenantInfo>, Status> {
        let caller = self.admin(&req)?;
        let r = req.into_inner();
        crate::types::check_tenant_name(&r.tenant).map_err(|e| NpudError::invalid(Reason::InvalidName, e))?;
        let tenant: Arc<str> = Arc::from(r.tenant.as_str());
        let change = QuotaChange {
            max_streams: r.max_streams,
            reserved_streams: r.reserved_streams,
            max_events: r.max_events,
            weight: r.weight,
            highest_priority: r.highest_priority,
        };
        let q = self.daemon.set_quota(&tenant, change)?;
        tracing::info!(admin = %caller.tenant, %tenant, max_streams = q.max_streams, reserved = q.reserved_streams, max_events = q.max_events, weight = q.weight, "quota set");
        Ok(Response::new(pb::TenantInfo { name: r.tenant, quota: Some(convert::quota(&q)), source: "runtime".into() }))
    }

    async fn evict_session(
        &self,
        req: Request<pb::EvictSessionRequest>,
    ) -> Result<Response<pb::EvictSessionResponse>, Status> {
        let caller = self.admin(&req)?;
        let id = self.daemon.registry().owned_session(&caller, req.get_ref().session)?;
        let (streams, events) = self.daemon.reclaim(id, "evicted by an admin").await;
        tracing::info!(admin = %caller.tenant, session = id, streams, events, "session evicted");
        Ok(Response::new(pb::EvictSessionResponse { streams_released: streams, events_released: events }))
    }

    async fn drain(&self, req: Request<pb::DrainRequest>) -> Result<Response<pb::DrainResponse>, Status> {
        let caller = self.admin(&req)?;
        let sessions = self.daemon.registry().all_sessions().len() as u32;
        if req.get_ref().shutdown {
            tracing::warn!(admin = %caller.tenant, sessions, "drain and shutdown requested");
            self.daemon.request_shutdown();
        } else {
            tracing::warn!(admin = %caller.tenant, sessions, "drain requested: no new sessions or work");
            self.daemon.start_draining();
        }
        Ok(Response::new(pb::DrainResponse { sessions }))
    }

    async fn inject_fault(
        &self,
        req: Request<pb::InjectFaultRequest>,
    ) -> Result<Response<pb::InjectFaultResponse>, Status> {
        let caller = self.admin(&req)?;
        let r = req.into_inner();
        use pb::inject_fault_request::Fault as F;
        let fault = match r.fault {
            Some(F::FailNextCreations(n)) => Fault::FailNextCreations(n),
            Some(F::FailTask(f)) => Fault::FailTask { stream: f.stream, task: f.task, code: f.code },
            Some(F::Stall(_)) => Fault::Stall,
            Some(F::Resume(_)) => Fault::Resume,
            Some(F::Panic(_)) => Fault::Panic,
            None => return Err(NpudError::invalid(Reason::InvalidArgumentOther, "name a fault to inject").into()),
        };
        self.daemon.inject_fault(&caller, r.device, fault)?;
        Ok(Response::new(pb::InjectFaultResponse {}))
    }
}
