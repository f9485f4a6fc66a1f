use super::Ctx;
use crate::output::{emit, table};
use clap::Subcommand;
use npud_proto::v1::{self as pb, device_service_client::DeviceServiceClient};
use serde_json::json;

#[derive(Debug, Subcommand)]
pub enum DeviceCmd {
    /// List devices: vendor identity, capacity, reserved, in use, pooled, available,
    /// untracked (streams the device holds outside npud's books).
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
    let mut v = json!({
        "id": d.id, "name": d.name, "backend": d.backend, "profile": d.profile,
        "hardware_limit": d.hardware_limit, "capacity": d.capacity, "reserved": d.reserved,
        "in_use": d.in_use, "pooled": d.pooled, "draining": d.draining, "available": d.available,
        "untracked": d.untracked, "hardware_in_use": d.hardware_in_use,
        "event_limit": d.event_limit, "events_in_use": d.events_in_use,
        "priority_highest": d.priority_highest, "priority_lowest": d.priority_lowest,
        "healthy": d.healthy, "queued_requests": d.queued_requests,
    });
    // The vendor's identity, whichever applies: absent keys, not empty values.
    if let Some(map) = v.as_object_mut() {
        if let Some(p) = d.physical_id {
            map.insert("physical_id".into(), json!(p));
        }
        for (key, value) in [("uuid", &d.uuid), ("pci_bus_id", &d.pci_bus_id), ("fault", &d.fault)] {
            if !value.is_empty() {
                map.insert(key.into(), json!(value));
            }
        }
    }
    v
}

/// The vendor's name for a device in one short cell: `phys 6`, or the UUID and bus id.
pub fn identity_cell(d: &pb::Device) -> String {
    let mut parts = Vec::new();
    if let Some(p) = d.physical_id {
        parts.push(format!("phys {p}"));
    }
    parts.extend([&d.uuid, &d.pci_bus_id].into_iter().filter(|s| !s.is_empty()).cloned());
    if parts.is_empty() { "-".into() } else { parts.join(" ") }
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
                    identity_cell(d),
                    d.capacity.to_string(),
                    d.reserved.to_string(),
                    d.in_use.to_string(),
                    d.pooled.to_string(),
                    d.available.to_string(),
                    d.untracked.to_string(),
                    d.queued_requests.to_string(),
                ]
            })
            .collect();
        let head = [
            "ID",
            "NAME",
            "PROFILE",
            "IDENTITY",
            "CAPACITY",
            "RESERVED",
            "IN USE",
            "POOLED",
            "AVAILABLE",
            "UNTRACKED",
            "QUEUED",
        ];
        table(&head, &rows)
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `jq '.[] | select(.fault)'` finds the faulted devices: the key is there only then.
    #[test]
    fn a_devices_fault_is_a_key_only_while_it_has_one() {
        let mut d = pb::Device { id: 3, fault: "code 0x8C03A000 (RestartNPU)".into(), ..Default::default() };
        assert_eq!(device_json(&d)["fault"], "code 0x8C03A000 (RestartNPU)");
        d.fault.clear();
        assert!(device_json(&d).get("fault").is_none());
    }
}
