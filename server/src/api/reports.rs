use super::Api;
use crate::daemon::reports::{ReportBody, SessionReport};
use crate::error::{NpudError, Reason};
use npud_proto::codes::acl;
use npud_proto::v1::{self as pb, report_service_server::ReportService};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::Stream;
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

/// Keeps the session alive while its report stream is open.
struct OpenStream(Arc<crate::daemon::Daemon>, u64);
impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.registry().set_report_stream(self.1, false);
    }
}

const MAX_PULL_WAIT: Duration = Duration::from_secs(24 * 3600);

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
        let daemon = Arc::clone(&self.daemon);
        let notify = daemon.reports().watch(session).ok_or_else(|| Status::from(NpudError::unknown_session()))?;
        daemon.registry().open_report_stream(session, daemon.config().limits.max_report_streams_per_session)?;
        let alive = OpenStream(Arc::clone(&daemon), session);
        daemon.reports().confirm(session, req.get_ref().after_sequence);
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let mut cursor = req.get_ref().after_sequence;
        tokio::spawn(async move {
            let _alive = alive;
            loop {
                let changed = notify.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let Some(batch) = daemon.reports().next_batch(session, cursor, 256) else {
                    return;
                };
                for r in &batch {
                    if tx.send(Ok(to_pb(r))).await.is_err() {
                        return;
                    }
                    cursor = r.sequence;
                }
                if !batch.is_empty() {
                    continue;
                }
                tokio::select! {
                    _ = &mut changed => {}
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn process(
        &self,
        req: Request<pb::ProcessReportRequest>,
    ) -> Result<Response<pb::ProcessReportResponse>, Status> {
        let (_, session) = self.session(&req)?;
        let r = req.into_inner();
        if r.max_reports == 0 || r.max_reports > 1024 {
            return Err(NpudError::invalid(Reason::InvalidCount, "max_reports must be 1..=1024").into());
        }
        if !self.daemon.registry().thread_subscribed(session, r.thread_id) {
            return Err(NpudError::new(
                Reason::StreamNotSubscribed,
                format!("thread {} has no subscribed stream", r.thread_id),
            )
            .with_native(self.daemon.backend().name(), i64::from(acl::RT_THREAD_SUBSCRIBE))
            .into());
        }
        let wait = Duration::from_millis(u64::from(r.timeout_ms)).min(MAX_PULL_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        let notify = self.daemon.reports().watch(session).ok_or_else(|| Status::from(NpudError::unknown_session()))?;
        loop {
            let changed = notify.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let taken = self
                .daemon
                .reports()
                .take_for_thread(session, r.thread_id, r.max_reports as usize)
                .ok_or_else(|| Status::from(NpudError::unknown_session()))?;
            if !taken.is_empty() {
                return Ok(Response::new(pb::ProcessReportResponse { reports: taken.iter().map(to_pb).collect() }));
            }
            tokio::select! {
                _ = &mut changed => {}
                _ = tokio::time::sleep_until(deadline) => {
                    return Ok(Response::new(pb::ProcessReportResponse { reports: Vec::new() }));
                }
            }
        }
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
