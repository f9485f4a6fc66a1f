use super::Api;
use crate::daemon::budget::{NativeSession, Origin};
use crate::error::{NpudError, Reason};
use npud_proto::v1::{self as pb, budget_service_server::BudgetService};
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

/// Replies a session may have written but the client not yet read.
const REPLY_BUFFER: usize = 4;

#[tonic::async_trait]
impl BudgetService for Api {
    type BudgetStream = Pin<Box<dyn Stream<Item = Result<pb::BudgetReply, Status>> + Send>>;

    /// One stream is one session: it is served by a task that ends (and gives back what
    /// the session held) when the client's side ends, the response stream is dropped, or
    /// the process that opened it has exited while its connection lives on.
    async fn budget(&self, req: Request<Streaming<pb::BudgetCall>>) -> Result<Response<Self::BudgetStream>, Status> {
        let caller = self.caller(&req)?;
        let origin = match req.extensions().get::<crate::tenancy::identity::Connected>() {
            Some(c) => Origin::of(&c.peer),
            None => Origin { pid: 0, container: None, pod: None },
        };
        let session = NativeSession::open(Arc::clone(&self.daemon), caller, origin)?;
        let mut calls = req.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(REPLY_BUFFER);
        tokio::spawn(async move {
            if session.unless_exited(relay(&session, &mut calls, &tx)).await.is_none() {
                let _ = tx.try_send(Err(exited(&session)));
            }
            drop(session);
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

/// Answers the stream's calls in order until the client's side ends, sends what does not
/// decode, or stops reading its replies.
async fn relay(
    session: &NativeSession,
    calls: &mut Streaming<pb::BudgetCall>,
    tx: &tokio::sync::mpsc::Sender<Result<pb::BudgetReply, Status>>,
) {
    loop {
        let call = tokio::select! {
            call = calls.message() => call,
            _ = tx.closed() => return,
        };
        let call = match call {
            Ok(Some(call)) => call,
            Ok(None) => return,
            Err(status) => {
                // A message that does not decode is the caller's error, as on every unary
                // method (see `status::decode_failure_is_invalid_argument`).
                let status = match super::status::is_decode_failure(&status) {
                    true => super::status::caller_sent_garbage(&status),
                    false => status,
                };
                let _ = tx.send(Err(status)).await;
                return;
            }
        };
        let reply = tokio::select! {
            reply = session.answer(call) => reply,
            _ = tx.closed() => return,
        };
        if tx.send(Ok(reply)).await.is_err() {
            return;
        }
    }
}

/// What the stream ends with once its process has exited (`daemon::exits`).
fn exited(session: &NativeSession) -> Status {
    Status::from(NpudError::new(
        Reason::SessionClosed,
        format!(
            "budget session closed: process {} that opened it has exited; what it held is given back",
            session.pid()
        ),
    ))
}
