use super::{Api, convert};
use npud_proto::v1::{self as pb, device_service_server::DeviceService};
use tonic::{Request, Response, Status};

impl Api {
    pub(super) fn device_list(&self) -> Vec<pb::Device> {
        let d = &self.daemon;
        let counts = d.registry().tenant_counts();
        d.devices()
            .iter()
            .map(|desc| {
                // The device's event table holds daemon and native events alike.
                let events: u32 =
                    counts.values().map(|(_, per_dev)| per_dev.get(&desc.id).copied().unwrap_or(0)).sum::<u32>()
                        + d.natives().device_events(desc.id);
                convert::device(
                    desc,
                    d.backend().name(),
                    &d.budget(desc.id),
                    &convert::DeviceLive {
                        events_in_use: events,
                        hardware_in_use: d.backend().hardware_in_use(desc.id),
                        healthy: d.health().is_healthy(desc.id),
                        fault: d.health().fault(desc.id),
                    },
                )
            })
            .collect()
    }
}

#[tonic::async_trait]
impl DeviceService for Api {
    async fn list(&self, req: Request<pb::ListDevicesRequest>) -> Result<Response<pb::ListDevicesResponse>, Status> {
        self.caller(&req)?;
        Ok(Response::new(pb::ListDevicesResponse { devices: self.device_list() }))
    }

    async fn synchronize(
        &self,
        req: Request<pb::SynchronizeDeviceRequest>,
    ) -> Result<Response<pb::SynchronizeDeviceResponse>, Status> {
        let (caller, session) = self.session(&req)?;
        let r = req.into_inner();
        self.daemon.synchronize_device(&caller, session, r.device, r.timeout_ms).await?;
        Ok(Response::new(pb::SynchronizeDeviceResponse {}))
    }
}
