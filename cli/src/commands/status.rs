use super::Ctx;
use super::device::{device_json, identity_cell};
use crate::output::{bar, emit, table};
use npud_proto::v1 as pb;
use serde_json::json;

/// `status`, redrawn every `interval` (the screen is cleared on a terminal).
pub async fn top(ctx: &Ctx, interval: std::time::Duration, iterations: u32) -> npud_client::Result<()> {
    let mut admin = ctx.admin().await?;
    let mut n = 0;
    loop {
        let s = admin.status(pb::StatusRequest {}).await?.into_inner();
        if crate::output::colour() {
            crate::output::write_bytes(b"\x1b[2J\x1b[H");
        }
        render(ctx, &s);
        n += 1;
        if iterations != 0 && n >= iterations {
            return Ok(());
        }
        crate::output::write_out("");
        tokio::time::sleep(interval).await;
    }
}

/// grpc.health.v1 Check over the same channel as every other call.
pub async fn health(ctx: &Ctx, service: String) -> anyhow::Result<()> {
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};
    let reply = HealthClient::new(ctx.channel().await?)
        .check(HealthCheckRequest { service: service.clone() })
        .await
        .map_err(npud_client::Error::from)?
        .into_inner();
    let status = ServingStatus::try_from(reply.status).unwrap_or(ServingStatus::Unknown);
    let name = if service.is_empty() { "npud" } else { service.as_str() };
    emit(ctx.output, json!({ "service": name, "status": status.as_str_name() }), || {
        format!("{name}: {}", status.as_str_name())
    });
    anyhow::ensure!(status == ServingStatus::Serving, "{name} is {}", status.as_str_name());
    Ok(())
}

pub async fn show(ctx: &Ctx) -> npud_client::Result<()> {
    let s = ctx.admin().await?.status(pb::StatusRequest {}).await?.into_inner();
    render(ctx, &s);
    Ok(())
}

fn render(ctx: &Ctx, s: &pb::StatusResponse) {
    let json = json!({
        "policy": s.policy,
        "epoch": s.epoch,
        "pool_hits": s.pool_hits,
        "hardware_creations": s.hardware_creations,
        "devices": s.devices.iter().map(device_json).collect::<Vec<_>>(),
        "tenants": s.tenants.iter().map(|t| json!({
            "tenant": t.tenant, "device": t.device, "streams": t.streams, "events": t.events,
            "waiting_requests": t.waiting_requests, "waiting_streams": t.waiting_streams, "sessions": t.sessions,
            "max_streams": t.quota.as_ref().map(|q| q.max_streams), "reserved_streams": t.quota.as_ref().map(|q| q.reserved_streams),
            "allocated_streams": t.allocated_streams,
            "left_untracked": t.left_untracked, "untracked_bound": t.untracked_bound,
            "capture_debt_bound": t.capture_debt_bound,
        })).collect::<Vec<_>>(),
        "native_holders": s.native_holders.iter().map(|h| json!({
            "pid": h.pid, "tenant": h.tenant, "program": h.program, "container": h.container,
            "device": h.device, "streams": h.streams, "created": h.created, "events": h.events,
        })).collect::<Vec<_>>(),
        "allocations": s.allocations.iter().map(|a| json!({
            "namespace": a.namespace, "pod": a.pod, "container": a.container, "tenant": a.tenant,
            "device": a.device, "booked": a.booked, "reserved": a.reserved, "in_use": a.in_use,
            "waiting": a.waiting, "allocated": a.allocated, "mode": a.mode,
        })).collect::<Vec<_>>(),
    });
    emit(ctx.output, json, || {
        let mut out =
            format!("policy {}  pool hits {}  hardware creations {}\n\n", s.policy, s.pool_hits, s.hardware_creations);
        for d in &s.devices {
            let free = d.capacity.saturating_sub(d.in_use + d.pooled + d.untracked);
            let untracked = match d.untracked {
                0 => String::new(),
                n => format!(" / untracked {n}"),
            };
            // A faulted device admits nobody: its line says why first.
            let fault = if d.fault.is_empty() { String::new() } else { format!("  FAULT: {}", d.fault) };
            out.push_str(&format!(
                "device {} {} ({}, {})  {}  used {} / pooled {}{untracked} / free {} of {}  queue {}{fault}\n",
                d.id,
                d.name,
                d.profile,
                identity_cell(d),
                bar(d.in_use, d.pooled, d.capacity, 40),
                d.in_use,
                d.pooled,
                free,
                d.capacity,
                d.queued_requests
            ));
        }
        let rows: Vec<Vec<String>> = s
            .tenants
            .iter()
            .map(|t| {
                let q = t.quota.unwrap_or_default();
                let max = if q.max_streams == u32::MAX { "-".to_string() } else { q.max_streams.to_string() };
                // A pod's quota follows its allocation: say so.
                let max = if t.allocated_streams > 0 { format!("{max} (pod allocation)") } else { max };
                vec![
                    t.tenant.clone(),
                    t.device.to_string(),
                    t.streams.to_string(),
                    q.reserved_streams.to_string(),
                    max,
                    format!("{} ({} streams)", t.waiting_requests, t.waiting_streams),
                    t.events.to_string(),
                    t.sessions.to_string(),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&table(&["TENANT", "DEVICE", "USED", "RESERVED", "MAX", "WAITING", "EVENTS", "SESSIONS"], &rows));
        if !s.allocations.is_empty() {
            out.push_str("\npod allocations (npud.io/streams), oldest binding first\n");
            out.push_str(&allocation_table(&s.allocations));
        }
        if !s.native_holders.is_empty() {
            let rows: Vec<Vec<String>> = s
                .native_holders
                .iter()
                .map(|h| {
                    let container = if h.container.is_empty() { "-".to_string() } else { h.container.clone() };
                    vec![
                        h.pid.to_string(),
                        h.tenant.clone(),
                        container,
                        h.device.to_string(),
                        h.streams.to_string(),
                        h.created.to_string(),
                        h.events.to_string(),
                        h.program.clone(),
                    ]
                })
                .collect();
            out.push_str("\nnative streams and events (interposed processes)\n");
            out.push_str(&table(
                &["PID", "TENANT", "CONTAINER", "DEVICE", "STREAMS", "CREATED", "EVENTS", "PROGRAM"],
                &rows,
            ));
        }
        out
    });
}

/// One row per allocation and device: whose it is, where, booked, in use, waiting.
fn allocation_table(rows: &[pb::AllocationBooking]) -> String {
    let dash = |s: &str| if s.is_empty() { "-".to_string() } else { s.to_string() };
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|a| {
            let pod = match a.pod.is_empty() {
                true => a.tenant.clone(),
                false => format!("{}/{}", a.namespace, a.pod),
            };
            vec![
                pod,
                dash(&a.container),
                a.device.to_string(),
                a.booked.to_string(),
                a.reserved.to_string(),
                a.in_use.to_string(),
                a.waiting.to_string(),
                a.allocated.to_string(),
                a.mode.clone(),
            ]
        })
        .collect();
    table(&["POD", "CONTAINER", "DEVICE", "BOOKED", "RESERVED", "IN USE", "WAITING", "ALLOCATED", "MODE"], &rows)
}
