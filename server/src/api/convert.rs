//! Domain values → protobuf messages.

use crate::backend::{DeviceDesc, EventState};
use crate::daemon::streams::StreamView;
use crate::policy::admission::BudgetView;
use crate::registry::EventEntry;
use npud_proto::v1 as pb;

pub fn stream(v: &StreamView) -> pb::StreamInfo {
    pb::StreamInfo {
        handle: v.handle,
        device: v.entry.device,
        priority: v.entry.priority,
        flags: v.entry.flags,
        pending_tasks: v.pending_tasks,
        failed: v.failed,
        failure_mode: if v.stop_on_failure { pb::FailureMode::Stop } else { pb::FailureMode::Continue } as i32,
        reused: v.entry.reused,
    }
}

pub fn event_state(s: EventState) -> pb::EventState {
    match s {
        EventState::NotRecorded => pb::EventState::NotRecorded,
        EventState::Pending => pb::EventState::Pending,
        EventState::Complete => pb::EventState::Complete,
    }
}

pub fn event(handle: u64, e: &EventEntry, state: EventState) -> pb::EventInfo {
    pb::EventInfo { handle, device: e.device, flags: e.flags, timing: e.timing, state: event_state(state) as i32 }
}

/// What a device shows besides its budget: live figures from the daemon and the device.
pub struct DeviceLive {
    pub events_in_use: u32,
    pub hardware_in_use: u32,
    pub healthy: bool,
    /// The device's own fault while it keeps npud from admitting there.
    pub fault: Option<String>,
}

pub fn device(d: &DeviceDesc, backend: &str, b: &BudgetView, live: &DeviceLive) -> pb::Device {
    pb::Device {
        id: d.id,
        name: d.name.clone(),
        backend: backend.to_string(),
        profile: d.profile.clone(),
        hardware_limit: d.hardware_limit,
        capacity: b.capacity,
        reserved: b.reserved,
        in_use: b.in_use,
        pooled: b.pooled,
        available: b.capacity.saturating_sub(b.in_use + b.draining + b.untracked),
        event_limit: d.event_limit,
        events_in_use: live.events_in_use,
        priority_highest: d.priority_highest,
        priority_lowest: d.priority_lowest,
        healthy: live.healthy,
        queued_requests: b.queued,
        hardware_in_use: live.hardware_in_use,
        draining: b.draining,
        physical_id: d.identity.physical_id,
        uuid: d.identity.uuid.clone().unwrap_or_default(),
        pci_bus_id: d.identity.pci_bus_id.clone().unwrap_or_default(),
        untracked: b.untracked,
        fault: live.fault.clone().unwrap_or_default(),
    }
}

pub fn quota(q: &crate::types::Quota) -> pb::Quota {
    pb::Quota {
        max_streams: q.max_streams,
        reserved_streams: q.reserved_streams,
        max_events: q.max_events,
        weight: q.weight,
        highest_priority: q.highest_priority,
    }
}
