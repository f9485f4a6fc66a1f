use super::{Api, convert};
use crate::daemon::streams::CreateRequest;
use crate::error::{NpudError, Reason};
use npud_proto::v1::{self as pb, stream_service_server::StreamService};
use std::time::Duration;
use tonic::{Request, Response, Status};

#[tonic::async_trait]
impl StreamService for Api {
    async fn create(
        &self,
        req: Request<pb::CreateStreamsRequest>,
    ) -> Result<Response<pb::CreateStreamsResponse>, Status> {
        let (caller, session) = self.caller_and_session(&req)?;
        let r = req.into_inner();
        let request = CreateRequest {
            device: r.device,
            count: r.count,
            priority: r.priority,
            flags: r.flags,
            wait: Duration::from_millis(u64::from(r.wait_ms)),
        };
        let (streams, waited) = self.daemon.create_streams(&caller, session, request).await?;
        Ok(Response::new(pb::CreateStreamsResponse {
            streams: streams.iter().map(convert::stream).collect(),
            waited_ms: waited.as_millis().min(u128::from(u32::MAX)) as u32,
        }))
    }

    async fn destroy(
        &self,
        req: Request<pb::DestroyStreamsRequest>,
    ) -> Result<Response<pb::DestroyStreamsResponse>, Status> {
        let (caller, _) = self.session(&req)?;
        let destroyed = self.daemon.destroy_streams(&caller, &req.get_ref().handles)?;
        Ok(Response::new(pb::DestroyStreamsResponse { destroyed }))
    }

    async fn list(&self, req: Request<pb::ListStreamsRequest>) -> Result<Response<pb::ListStreamsResponse>, Status> {
        let caller = self.caller(&req)?;
        let streams = self.daemon.list_streams(&caller).iter().map(convert::stream).collect();
        Ok(Response::new(pb::ListStreamsResponse { streams }))
    }

    async fn get(&self, req: Request<pb::GetStreamRequest>) -> Result<Response<pb::StreamInfo>, Status> {
        let caller = self.caller(&req)?;
        Ok(Response::new(convert::stream(&self.daemon.stream_view(&caller, req.get_ref().handle)?)))
    }

    async fn query(&self, req: Request<pb::QueryStreamRequest>) -> Result<Response<pb::QueryStreamResponse>, Status> {
        let caller = self.caller(&req)?;
        let done = self.daemon.query_stream(&caller, req.get_ref().handle)?;
        let state = if done { pb::WorkState::Complete } else { pb::WorkState::NotReady };
        Ok(Response::new(pb::QueryStreamResponse { state: state as i32 }))
    }

    async fn synchronize(
        &self,
        req: Request<pb::SynchronizeStreamRequest>,
    ) -> Result<Response<pb::SynchronizeStreamResponse>, Status> {
        let caller = self.caller(&req)?;
        let r = req.into_inner();
        self.daemon.synchronize_stream(&caller, r.handle, r.timeout_ms).await?;
        Ok(Response::new(pb::SynchronizeStreamResponse {}))
    }

    async fn wait_event(
        &self,
        req: Request<pb::StreamWaitEventRequest>,
    ) -> Result<Response<pb::StreamWaitEventResponse>, Status> {
        let caller = self.caller(&req)?;
        self.daemon.stream_wait_event(&caller, req.get_ref().stream, req.get_ref().event)?;
        Ok(Response::new(pb::StreamWaitEventResponse {}))
    }

    async fn enqueue_delay(
        &self,
        req: Request<pb::EnqueueDelayRequest>,
    ) -> Result<Response<pb::EnqueueDelayResponse>, Status> {
        let caller = self.caller(&req)?;
        let r = req.into_inner();
        let task_id = self.daemon.enqueue_delay(&caller, r.stream, Duration::from_micros(r.duration_us))?;
        Ok(Response::new(pb::EnqueueDelayResponse { task_id }))
    }

    async fn set_failure_mode(
        &self,
        req: Request<pb::SetFailureModeRequest>,
    ) -> Result<Response<pb::SetFailureModeResponse>, Status> {
        let caller = self.caller(&req)?;
        let r = req.into_inner();
        let stop = match pb::FailureMode::try_from(r.mode) {
            Ok(pb::FailureMode::Continue) => false,
            Ok(pb::FailureMode::Stop) => true,
            Err(_) => {
                return Err(NpudError::invalid(
                    Reason::InvalidArgumentOther,
                    format!("unknown failure mode {}", r.mode),
                )
                .into());
            }
        };
        self.daemon.set_failure_mode(&caller, r.stream, stop)?;
        Ok(Response::new(pb::SetFailureModeResponse {}))
    }
}
