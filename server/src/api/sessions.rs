use super::Api;
use npud_proto::v1::{self as pb, session_service_server::SessionService};
use tonic::{Request, Response, Status};

#[tonic::async_trait]
impl SessionService for Api {
    async fn open(&self, req: Request<pb::OpenSessionRequest>) -> Result<Response<pb::OpenSessionResponse>, Status> {
        let caller = self.caller(&req)?;
        // On Kubernetes a container presents the allocation mounted into it.
        if let Some(token) = req.metadata().get(npud_proto::ALLOCATION_METADATA_KEY) {
            let token = token.to_str().map_err(|_| Status::invalid_argument("the allocation token is not text"))?;
            let pod = super::unix_peer(&req).and_then(|p| p.container.as_ref()).and_then(|c| c.pod_uid.as_deref());
            self.daemon.bind_allocation(&caller.tenant, token, pod).await?;
        }
        let r = req.into_inner();
        let (session, lease, attached) = self.daemon.open_session(&caller, &r.name, r.lease_ms)?;
        Ok(Response::new(pb::OpenSessionResponse {
            session,
            lease_ms: lease.as_millis() as u32,
            attached,
            tenant: caller.tenant.to_string(),
            epoch: u32::from(self.daemon.epoch()),
        }))
    }

    async fn renew(&self, req: Request<pb::RenewSessionRequest>) -> Result<Response<pb::RenewSessionResponse>, Status> {
        let caller = self.caller(&req)?;
        let lease = self.daemon.registry().touch(&caller, req.get_ref().session)?;
        Ok(Response::new(pb::RenewSessionResponse { lease_ms: lease.as_millis() as u32 }))
    }

    async fn close(&self, req: Request<pb::CloseSessionRequest>) -> Result<Response<pb::CloseSessionResponse>, Status> {
        let caller = self.caller(&req)?;
        let r = req.into_inner();
        let (streams, events) = self.daemon.close_session(&caller, r.session, &r.name).await?;
        Ok(Response::new(pb::CloseSessionResponse { streams_released: streams, events_released: events }))
    }

    async fn list(&self, req: Request<pb::ListSessionsRequest>) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let caller = self.caller(&req)?;
        let scope = if caller.admin { None } else { Some(caller.tenant.as_ref()) };
        let sessions = self
            .daemon
            .registry()
            .sessions(scope)
            .into_iter()
            .map(|s| pb::SessionInfo {
                session: s.id,
                name: s.name.unwrap_or_default(),
                tenant: s.tenant.to_string(),
                streams: s.streams,
                events: s.events,
                lease_remaining_ms: s.lease_remaining.as_millis() as u64,
                report_stream_open: s.report_stream_open,
            })
            .collect();
        Ok(Response::new(pb::ListSessionsResponse { sessions }))
    }
}
