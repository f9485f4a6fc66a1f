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
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The most bytes of later calls read while a call is answered (a client may send its
/// next calls before their answers: the interposer sends its hello and first acquire in
/// one write). Past it, nothing more is read until the answer is written.
const MAX_AHEAD: usize = npud_proto::BUDGET_MAX_FRAME + 4;

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
    // Bytes of calls that came while an earlier one was answered, in order (a deque: each
    // frame taken off the front costs its own length, not the whole buffer's).
    let mut ahead = VecDeque::new();
    loop {
        let call = match read_frame(&mut conn, &mut ahead).await {
            Ok(Some(call)) => call,
            Ok(None) => break,
            Err(e) => {
                let _ = write_frame(&mut conn, &error_reply(e)).await;
                break;
            }
        };
        // While a call is answered the connection is watched: its end (the process died
        // while it waited for budget) ends the wait at once, and calls sent ahead are kept.
        let answer = session.answer(call);
        tokio::pin!(answer);
        let reply = loop {
            if ahead.len() >= MAX_AHEAD {
                break answer.await;
            }
            let mut chunk = [0u8; 1024];
            tokio::select! {
                reply = &mut answer => break reply,
                read = conn.read(&mut chunk) => match read {
                    Ok(n) if n > 0 => ahead.extend(&chunk[..n]),
                    _ => return,
                },
            }
        };
        if write_frame(&mut conn, &reply).await.is_err() {
            break;
        }
    }
}

/// Fills `buf` from the bytes read ahead first, then from the connection.
async fn read_exact(conn: &mut PeerStream, ahead: &mut VecDeque<u8>, buf: &mut [u8]) -> std::io::Result<()> {
    let from_ahead = buf.len().min(ahead.len());
    for (to, from) in buf.iter_mut().zip(ahead.drain(..from_ahead)) {
        *to = from;
    }
    conn.read_exact(&mut buf[from_ahead..]).await.map(|_| ())
}

/// Reads one frame; Ok(None) at a clean end of the connection.
async fn read_frame(conn: &mut PeerStream, ahead: &mut VecDeque<u8>) -> Result<Option<pb::BudgetCall>, NpudError> {
    let mut len = [0u8; 4];
    if read_exact(conn, ahead, &mut len).await.is_err() {
        return Ok(None);
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > npud_proto::BUDGET_MAX_FRAME {
        return Err(NpudError::new(
            Reason::PayloadTooLarge,
            format!("a budget frame of {len} bytes; the most is {}", npud_proto::BUDGET_MAX_FRAME),
        ));
    }
    let mut body = vec![0u8; len];
    if read_exact(conn, ahead, &mut body).await.is_err() {
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
