use super::Api;
use crate::daemon::reports::{ReportBody, SessionReport};
use crate::error::{NpudError, Reason};
use npud_proto::codes::acl;
use npud_proto::v1::{self as pb, report_service_server::ReportService};
use std::pin::Pin;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

fn to_pb(r: &SessionReport) -> pb::Report {
    let kind = match &r.body {
        ReportBody::Callback { callback, stream, thread_id, user_data, blocking, status } => {
            pb::report::Kind::Callback(pb::CallbackReport {
                callback_id: *callback,
                stream: *stream,
                thread_id: *thread_id,
                user_data: user_data.to_vec(),
                block_type: if *blocking {
                    pb::CallbackBlockType::CallbackBlock
                } else {
                    pb::CallbackBlockType::CallbackNoBlock
                } as i32,
                status: *status,
            })
        }
        ReportBody::Exception { task, stream, device, thread_id, code, message } => {
            pb::report::Kind::Exception(pb::ExceptionReport {
                task_id: *task,
                stream: *stream,
                device: *device,
                thread_id: *thread_id,
                error_code: *code,
                message: message.clone(),
            })
        }
    };
    pb::Report { sequence: r.sequence, kind: Some(kind) }
}

#[tonic::async_trait]
impl ReportService for Api {
    type ReportsStream = Pin<Box<dyn Stream<Item = Result<pb::Report, Status>> + Send>>;

    async fn subscribe(&self, req: Request<pb::SubscribeRequest>) -> Result<Response<pb::SubscribeResponse>, Status> {
        let (caller, session) = self.caller_and_session(&req)?;
        self.daemon.subscribe_report(&caller, session, req.get_ref().thread_id, req.get_ref().stream)?;
        Ok(Response::new(pb::SubscribeResponse {}))
    }

    async fn unsubscribe(
        &self,
        req: Request<pb::UnsubscribeRequest>,
    ) -> Result<Response<pb::UnsubscribeResponse>, Status> {
        let (caller, _) = self.session(&req)?;
        self.daemon.unsubscribe_report(&caller, req.get_ref().thread_id, req.get_ref().stream)?;
        Ok(Response::new(pb::UnsubscribeResponse {}))
    }

    async fn launch_callback(
        &self,
        req: Request<pb::LaunchCallbackRequest>,
    ) -> Result<Response<pb::LaunchCallbackResponse>, Status> {
        let (caller, _) = self.session(&req)?;
        let r = req.into_inner();
        let blocking = match pb::CallbackBlockType::try_from(r.block_type) {
            Ok(pb::CallbackBlockType::CallbackBlock) => true,
            Ok(pb::CallbackBlockType::CallbackNoBlock) => false,
            Err(_) => {
                return Err(NpudError::invalid(
                    Reason::InvalidArgumentOther,
                    format!("block type {} is neither NO_BLOCK (0) nor BLOCK (1)", r.block_type),
                )
                .with_native(self.daemon.backend().name(), i64::from(acl::INVALID_PARAM))
                .into());
            }
        };
        let callback_id = self.daemon.launch_callback(&caller, r.stream, r.user_data, blocking)?;
        Ok(Response::new(pb::LaunchCallbackResponse { callback_id }))
    }

    async fn reports(&self, req: Request<pb::ReportsRequest>) -> Result<Response<Self::ReportsStream>, Status> {
        let (_, session) = self.session(&req)?;
        let feed = self.daemon.report_feed(session, req.get_ref().after_sequence)?;
        Ok(Response::new(Box::pin(feed.map(|r| Ok(to_pb(&r))))))
    }

    async fn process(
        &self,
        req: Request<pb::ProcessReportRequest>,
    ) -> Result<Response<pb::ProcessReportResponse>, Status> {
        let (_, session) = self.session(&req)?;
        let r = req.into_inner();
        let taken = self.daemon.process_reports(session, r.thread_id, r.max_reports, r.timeout_ms).await?;
        Ok(Response::new(pb::ProcessReportResponse { reports: taken.iter().map(to_pb).collect() }))
    }

    async fn ack(&self, req: Request<pb::AckRequest>) -> Result<Response<pb::AckResponse>, Status> {
        let (caller, session) = self.session(&req)?;
        let id = req.get_ref().callback_id;
        self.daemon.ack_callback(&caller, id)?;
        self.daemon.reports().forget_report_of(session, id);
        Ok(Response::new(pb::AckResponse {}))
    }

    async fn set_exception_reports(
        &self,
        req: Request<pb::SetExceptionReportsRequest>,
    ) -> Result<Response<pb::SetExceptionReportsResponse>, Status> {
        let (_, session) = self.session(&req)?;
        self.daemon.reports().set_exceptions(session, req.get_ref().enabled);
        Ok(Response::new(pb::SetExceptionReportsResponse {}))
    }
}
