use super::Ctx;
use crate::output::{emit, table};
use clap::Subcommand;
use npud_proto::v1::{self as pb, device_service_client::DeviceServiceClient};
use serde_json::json;

#[derive(Debug, Subcommand)]
pub enum DeviceCmd {
    /// List devices: capacity, reserved, in use, pooled, available.
    #[command(after_help = "Examples:\n  npuctl device list\n  npuctl -o json device list")]
    List,
}

impl DeviceCmd {
    pub async fn run(self, ctx: &Ctx) -> anyhow::Result<()> {
        match self {
            DeviceCmd::List => list(ctx).await?,
        }
        Ok(())
    }
}

pub fn device_json(d: &pb::Device) -> serde_json::Value {
    json!({
        "id": d.id, "name": d.name, "backend": d.backend, "profile": d.profile,
        "hardware_limit": d.hardware_limit, "capacity": d.capacity, "reserved": d.reserved,
        "in_use": d.in_use, "pooled": d.pooled, "available": d.available,
        "event_limit": d.event_limit, "events_in_use": d.events_in_use,
        "priority_highest": d.priority_highest, "priority_lowest": d.priority_lowest,
        "healthy": d.healthy, "queued_requests": d.queued_requests,
    })
}

pub async fn list(ctx: &Ctx) -> npud_client::Result<()> {
    let devices =
        DeviceServiceClient::new(ctx.channel().await?).list(pb::ListDevicesRequest {}).await?.into_inner().devices;
    emit(ctx.output, json!(devices.iter().map(device_json).collect::<Vec<_>>()), || {
        let rows: Vec<Vec<String>> = devices
            .iter()
            .map(|d| {
                vec![
                    d.id.to_string(),
                    d.name.clone(),
                    d.profile.clone(),
                    d.capacity.to_string(),
                    d.reserved.to_string(),
                    d.in_use.to_string(),
                    d.pooled.to_string(),
                    d.available.to_string(),
                    d.queued_requests.to_string(),
                ]
            })
            .collect();
        table(&["ID", "NAME", "PROFILE", "CAPACITY", "RESERVED", "IN USE", "POOLED", "AVAILABLE", "QUEUED"], &rows)
    });
    Ok(())
}
