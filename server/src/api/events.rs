use super::{Api, convert};
use npud_proto::v1::{self as pb, event_service_server::EventService};
use tonic::{Request, Response, Status};

#[tonic::async_trait]
impl EventService for Api {
    async fn create(&self, req: Request<pb::CreateEventRequest>) -> Result<Response<pb::EventInfo>, Status> {
        let (caller, session) = self.caller_and_session(&req)?;
        let r = req.into_inner();
        let (handle, entry) = self.daemon.create_event(&caller, session, r.device, r.flags, r.disable_timing)?;
        Ok(Response::new(convert::event(handle, &entry, crate::backend::EventState::NotRecorded)))
    }

    async fn destroy(
        &self,
        req: Request<pb::DestroyEventRequest>,
    ) -> Result<Response<pb::DestroyEventResponse>, Status> {
        let caller = self.caller(&req)?;
        self.daemon.destroy_event(&caller, req.get_ref().handle)?;
        Ok(Response::new(pb::DestroyEventResponse {}))
    }

    async fn record(&self, req: Request<pb::RecordEventRequest>) -> Result<Response<pb::RecordEventResponse>, Status> {
        let caller = self.caller(&req)?;
        self.daemon.record_event(&caller, req.get_ref().event, req.get_ref().stream)?;
        Ok(Response::new(pb::RecordEventResponse {}))
    }

    async fn reset(&self, req: Request<pb::ResetEventRequest>) -> Result<Response<pb::ResetEventResponse>, Status> {
        let caller = self.caller(&req)?;
        self.daemon.reset_event(&caller, req.get_ref().event, req.get_ref().stream)?;
        Ok(Response::new(pb::ResetEventResponse {}))
    }

    async fn query(&self, req: Request<pb::QueryEventRequest>) -> Result<Response<pb::QueryEventResponse>, Status> {
        let caller = self.caller(&req)?;
        let (_, state) = self.daemon.query_event(&caller, req.get_ref().handle)?;
        Ok(Response::new(pb::QueryEventResponse { state: convert::event_state(state) as i32 }))
    }

    async fn synchronize(
        &self,
        req: Request<pb::SynchronizeEventRequest>,
    ) -> Result<Response<pb::SynchronizeEventResponse>, Status> {
        let caller = self.caller(&req)?;
        let r = req.into_inner();
        self.daemon.synchronize_event(&caller, r.handle, r.timeout_ms).await?;
        Ok(Response::new(pb::SynchronizeEventResponse {}))
    }

    async fn elapsed_time(
        &self,
        req: Request<pb::ElapsedTimeRequest>,
    ) -> Result<Response<pb::ElapsedTimeResponse>, Status> {
        let caller = self.caller(&req)?;
        let milliseconds = self.daemon.elapsed_time(&caller, req.get_ref().start, req.get_ref().end)?;
        Ok(Response::new(pb::ElapsedTimeResponse { milliseconds }))
    }

    async fn list(&self, req: Request<pb::ListEventsRequest>) -> Result<Response<pb::ListEventsResponse>, Status> {
        let caller = self.caller(&req)?;
        let events = self.daemon.list_events(&caller).iter().map(|(h, e, s)| convert::event(*h, e, *s)).collect();
        Ok(Response::new(pb::ListEventsResponse { events }))
    }
}
