//! The budget wire: length-prefixed `BudgetCall`/`BudgetReply` frames on the daemon's
//! Unix socket, after the 8-byte preface (see `budget.proto`). One connection is one
//! process: what it holds goes back the moment the connection closes, whatever ended the
//! process. A wait for budget is abandoned (and its place in the queue withdrawn) when the
//! connection closes during it.

use crate::daemon::Daemon;
use crate::daemon::budget::{NativeSession, Origin, error_reply};
use crate::error::{NpudError, Reason};
use crate::tenancy::identity::PeerStream;
use npud_proto::v1 as pb;
use prost::Message;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serves one budget-wire connection whose preface has been read.
pub async fn serve(daemon: Arc<Daemon>, mut conn: PeerStream) {
    let peer = Arc::clone(conn.info());
    let resolved = daemon.resolve_peer(&peer);
    let origin = Origin::of(&peer);
    let session = match resolved.and_then(|caller| NativeSession::open(daemon, caller, origin)) {
        Ok(s) => s,
        Err(e) => {
            let _ = write_frame(&mut conn, &error_reply(e)).await;
            return;
        }
    };
    loop {
        let call = match read_frame(&mut conn).await {
            Ok(Some(call)) => call,
            Ok(None) => break,
            Err(e) => {
                let _ = write_frame(&mut conn, &error_reply(e)).await;
                break;
            }
        };
        // A client sends its next call only after the reply, so anything readable while a
        // call is pending means the connection closed: a process that dies while it waits
        // for budget leaves the queue at once.
        let mut probe = [0u8; 1];
        let reply = tokio::select! {
            reply = session.answer(call) => reply,
            _ = conn.read(&mut probe) => break,
        };
        if write_frame(&mut conn, &reply).await.is_err() {
            break;
        }
    }
}

/// Reads one frame; Ok(None) at a clean end of the connection.
async fn read_frame(conn: &mut PeerStream) -> Result<Option<pb::BudgetCall>, NpudError> {
    let mut len = [0u8; 4];
    match conn.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(_) => return Ok(None),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > npud_proto::BUDGET_MAX_FRAME {
        return Err(NpudError::new(
            Reason::PayloadTooLarge,
            format!("a budget frame of {len} bytes; the most is {}", npud_proto::BUDGET_MAX_FRAME),
        ));
    }
    let mut body = vec![0u8; len];
    if conn.read_exact(&mut body).await.is_err() {
        return Ok(None);
    }
    pb::BudgetCall::decode(body.as_slice()).map(Some).map_err(|e| {
        NpudError::new(Reason::InvalidArgumentOther, format!("a budget frame that is not a BudgetCall: {e}"))
    })
}

async fn write_frame(conn: &mut PeerStream, reply: &pb::BudgetReply) -> std::io::Result<()> {
    let body = reply.encode_to_vec();
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    conn.write_all(&frame).await?;
    conn.flush().await
}
