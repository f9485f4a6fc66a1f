//! The metrics text exposition: the accumulated families of [`crate::observe::metrics`] and
//! gauges read from the daemon's books now.

use super::Daemon;
use crate::observe::metrics::{DeviceLabels, TenantLabels, TenantOnly, gauge_family};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The text exposition of everything, gauges read now.
pub fn render(daemon: &Daemon) -> String {
    let mut r = Registry::with_prefix("npud");
    let devices: Vec<_> = daemon.devices().iter().map(|d| (d.id, daemon.admission.view(d.id))).collect();
    let dev = |id: u32| DeviceLabels { device: id.to_string() };
    let per_device = |f: &dyn Fn(&crate::policy::admission::BudgetView) -> u32| -> Vec<(DeviceLabels, i64)> {
        devices.iter().map(|(id, v)| (dev(*id), i64::from(f(v)))).collect()
    };
    gauge_family(
        &mut r,
        "device_capacity_streams",
        "Streams npud hands out on the device",
        per_device(&|v| v.capacity),
    );
    gauge_family(&mut r, "device_in_use_streams", "Streams held by clients", per_device(&|v| v.in_use));
    gauge_family(&mut r, "device_pooled_streams", "Healthy streams kept warm for reuse", per_device(&|v| v.pooled));
    gauge_family(
        &mut r,
        "device_draining_streams",
        "Released streams finishing their work",
        per_device(&|v| v.draining),
    );
    gauge_family(
        &mut r,
        "device_free_streams",
        "Capacity not held, pooled, draining or untracked",
        per_device(&|v| v.capacity.saturating_sub(v.in_use + v.pooled + v.draining + v.untracked)),
    );
    gauge_family(
        &mut r,
        "untracked_streams",
        "Streams the device holds that npud's books do not (programs outside npud)",
        per_device(&|v| v.untracked),
    );
    gauge_family(
        &mut r,
        "untracked_held_streams",
        "Of the untracked streams, those still counted because a fall of the device's count that npud's books do not explain is held (budget.untracked_hold)",
        devices.iter().map(|(id, _)| (dev(*id), i64::from(daemon.untracked_held(*id)))).collect(),
    );
    gauge_family(&mut r, "device_reserved_streams", "Streams reserved by tenants", per_device(&|v| v.reserved));
    gauge_family(
        &mut r,
        "device_faulted",
        "1 while the device reports a fault that keeps it from being admitted to (DCMI's codes, NVML's XIDs)",
        devices.iter().map(|(id, _)| (dev(*id), i64::from(daemon.health.fault(*id).is_some()))).collect(),
    );
    gauge_family(&mut r, "device_queued_requests", "Create requests waiting for budget", per_device(&|v| v.queued));
    let counts = daemon.registry.tenant_counts();
    // A pod's tenant is labelled with its namespace and name where pod-resources said them.
    let names: std::collections::HashMap<String, String> = daemon
        .allocations()
        .map(|a| a.bound_tenants().into_iter().filter_map(|t| Some((t.to_string(), a.pod_name(&t)?))).collect())
        .unwrap_or_default();
    let label = |t: &str| names.get(t).cloned().unwrap_or_else(|| t.to_string());
    let mut streams = Vec::new();
    let mut queued = Vec::new();
    let mut left = Vec::new();
    for (id, v) in &devices {
        for (t, f) in &v.tenants {
            let labels = TenantLabels { tenant: label(t), device: id.to_string() };
            streams.push((labels.clone(), i64::from(f.streams)));
            if f.left_untracked > 0 {
                left.push((labels.clone(), i64::from(f.left_untracked)));
            }
            queued.push((labels, i64::from(f.waiting_requests)));
        }
    }
    gauge_family(
        &mut r,
        "tenant_left_untracked_streams",
        "Streams a tenant's processes left untracked (gone, or reporting fewer) that no measurement has settled yet; at most [limits] max_untracked_per_tenant and its quota",
        left,
    );
    let limits = &daemon.config.limits;
    gauge_family(
        &mut r,
        "limit_untracked_per_tenant_streams",
        "[limits] max_untracked_per_tenant: what one tenant may leave untracked on a device",
        per_device(&|_| limits.max_untracked_per_tenant),
    );
    gauge_family(
        &mut r,
        "limit_capture_debt_per_tenant_streams",
        "[limits] max_capture_debt_per_tenant: what one tenant may hold past its quota on a device through capture claims",
        per_device(&|_| limits.max_capture_debt_per_tenant),
    );
    let mut events = Vec::new();
    let mut sessions = Vec::new();
    for (t, (n, per_dev)) in &counts {
        sessions.push((TenantOnly { tenant: label(t) }, i64::from(*n)));
        for (d, e) in per_dev {
            events.push((TenantLabels { tenant: label(t), device: d.to_string() }, i64::from(*e)));
        }
    }
    gauge_family(&mut r, "tenant_streams", "Streams a tenant holds", streams);
    gauge_family(&mut r, "tenant_queued_requests", "Create requests a tenant has waiting", queued);
    gauge_family(&mut r, "tenant_events", "Events a tenant holds", events);
    gauge_family(&mut r, "tenant_sessions", "Open sessions of a tenant", sessions);
    let native: Vec<_> = daemon
        .natives
        .totals()
        .into_iter()
        .map(|((d, t), n)| (TenantLabels { tenant: label(&t), device: d.to_string() }, i64::from(n)))
        .collect();
    gauge_family(
        &mut r,
        "tenant_native_streams",
        "Streams a tenant's processes created in their own context (admitted through the budget API)",
        native,
    );
    let rows = daemon.booking_rows(None);
    let booked = |f: &dyn Fn(&npud_proto::v1::AllocationBooking) -> u32| -> Vec<(TenantLabels, i64)> {
        let mut sum: std::collections::BTreeMap<(String, u32), i64> = std::collections::BTreeMap::new();
        for row in &rows {
            *sum.entry((label(&row.tenant), row.device)).or_insert(0) += i64::from(f(row));
        }
        sum.into_iter().map(|((tenant, d), n)| (TenantLabels { tenant, device: d.to_string() }, n)).collect()
    };
    gauge_family(
        &mut r,
        "pod_booked_streams",
        "Streams a pod's device-plugin allocations may hold on the device (booked there, or left to an allocation whose devices are unknown)",
        booked(&|row| row.booked),
    );
    gauge_family(
        &mut r,
        "pod_reserved_streams",
        "Of a pod's booked streams on the device, those reserved there now",
        booked(&|row| row.reserved),
    );
    let gauge = |r: &mut Registry, name: &str, help: &str, value: u64| {
        let g: Gauge = Gauge::default();
        g.set(i64::try_from(value).unwrap_or(i64::MAX));
        r.register(name, help, g);
    };
    if let Some((now, peak)) = crate::observe::heap::read() {
        gauge(&mut r, "heap_bytes", "Bytes npud's allocator holds now", now as u64);
        gauge(&mut r, "heap_peak_bytes", "The most bytes npud's allocator has held at once", peak as u64);
    }
    let replies = daemon.replies();
    let (ceiling, share) = replies.limits();
    gauge(&mut r, "client_memory_bytes", "Bytes clients' calls in flight and unread replies hold", replies.held());
    gauge(&mut r, "client_memory_ceiling_bytes", "npud's ceiling for them (limits.client_memory_mib)", ceiling);
    gauge(&mut r, "client_memory_share_bytes", "One tenant's share of it", share);
    gauge(&mut r, "client_calls_in_flight", "Calls in flight or with replies not yet read", replies.calls());
    let refused: Counter = Counter::default();
    refused.inc_by(replies.refused());
    r.register("client_calls_refused", "Calls refused because their tenant's share of client memory was held", refused);
    let processes: Gauge = Gauge::default();
    processes.set(daemon.natives.connections() as i64);
    r.register("native_sessions", "Budget sessions open (interposed processes and BudgetService streams)", processes);
    let pool_hits: Counter = Counter::default();
    pool_hits.inc_by(daemon.admission.pool_hits());
    r.register("pool_hits", "Streams handed out from the warm pool", pool_hits);
    let creations: Counter = Counter::default();
    creations.inc_by(daemon.devices().iter().map(|d| daemon.backend.hardware_creations(d.id)).sum());
    r.register("hardware_creations", "Streams created on hardware", creations);
    let dropped: Counter = Counter::default();
    dropped.inc_by(daemon.reports.dropped());
    r.register("reports_undeliverable", "Reports that could not be delivered", dropped);
    daemon.metrics.register_into(&mut r);
    let mut out = String::new();
    if let Err(e) = encode(&mut out, &r) {
        tracing::error!(error = %e, "encoding metrics");
    }
    out
}
