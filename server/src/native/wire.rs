//! The budget wire: length-prefixed `BudgetCall`/`BudgetReply` frames on the daemon's
//! Unix socket, after the 8-byte preface (see `budget.proto`). One connection is one
//! process: what it holds goes back the moment the connection closes, whatever ended the
//! process, or once its process has exited while another process keeps the connection
//! open (`daemon::exits`). A wait for budget is abandoned (and its place in the queue
//! withdrawn) when either happens during it.

use crate::daemon::Daemon;
use crate::daemon::budget::{NativeSession, Origin, error_reply};
use crate::error::{NpudError, Reason};
use crate::tenancy::identity::PeerStream;
use npud_proto::{frame, v1 as pb};
use prost::Message;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The most bytes of later calls read while a call is answered (a client may send its
/// next calls before their answers: the interposer sends its hello and first acquire in
/// one write). Past it, nothing more is read until the answer is written.
const MAX_AHEAD: usize = npud_proto::BUDGET_MAX_FRAME + 4;

/// Bytes asked of the socket per read: whatever the client has sent, up to this.
const READ_CHUNK: usize = 1024;

/// Answers held back to go out in one write, at most (bytes): past it they are written.
const MAX_HELD: usize = 64 * 1024;

/// Serves one budget-wire connection whose preface has been read.
///
/// Answers that are ready at once while more calls are already read (the welcome and the
/// first grant of an interposed process) go out in one write, so the process wakes once
/// for both; an answer that has to wait never holds back the ones before it.
pub async fn serve(daemon: Arc<Daemon>, mut conn: PeerStream) {
    let peer = Arc::clone(conn.info());
    let resolved = daemon.resolve_peer(&peer);
    let origin = Origin::of(&peer);
    let session = match resolved.and_then(|caller| NativeSession::open(daemon, caller, origin)) {
        Ok(s) => s,
        Err(e) => {
            let mut answer = Vec::new();
            frame::put(&mut answer, &error_reply(e));
            let _ = write_frames(&mut conn, &mut answer).await;
            return;
        }
    };
    // The exchange ends with the connection, or once the process that opened it has
    // exited while another keeps it open; the session's holdings go back either way.
    session.unless_exited(exchange(&session, &mut conn)).await;
}

/// Answers the connection's calls until it closes or sends what is not a call.
async fn exchange(session: &NativeSession, conn: &mut PeerStream) {
    // Bytes of calls read and not yet answered, in order (a deque: each frame taken off the
    // front costs its own length, not the whole buffer's), and answers not yet written.
    let mut ahead = VecDeque::new();
    let mut held = Vec::new();
    loop {
        let call = match take_frame(&mut ahead) {
            Ok(Some(call)) => call,
            Ok(None) => {
                // Nothing whole to answer: what is answered goes out before more is awaited.
                if write_frames(conn, &mut held).await.is_err() || !read_more(conn, &mut ahead).await {
                    break;
                }
                continue;
            }
            Err(e) => {
                frame::put(&mut held, &error_reply(e));
                break;
            }
        };
        let answer = session.answer(call);
        tokio::pin!(answer);
        let reply = match ready_now(answer.as_mut()).await {
            Some(reply) => reply,
            None => {
                if write_frames(conn, &mut held).await.is_err() {
                    return;
                }
                // While a call waits the connection is watched: its end (the process died
                // while it waited for budget) ends the wait at once, and calls sent ahead
                // are kept.
                loop {
                    if ahead.len() >= MAX_AHEAD {
                        break answer.await;
                    }
                    tokio::select! {
                        reply = &mut answer => break reply,
                        more = read_more(conn, &mut ahead) => if !more {
                            return;
                        },
                    }
                }
            }
        };
        frame::put(&mut held, &reply);
        if held.len() >= MAX_HELD && write_frames(conn, &mut held).await.is_err() {
            return;
        }
    }
    let _ = write_frames(conn, &mut held).await;
}

/// `answer`'s output if it is ready without waiting.
async fn ready_now<F: Future>(mut answer: Pin<&mut F>) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match answer.as_mut().poll(cx) {
            Poll::Ready(out) => Some(out),
            Poll::Pending => None,
        })
    })
    .await
}

/// Reads what the client has sent (up to [`READ_CHUNK`]) into `ahead`; false at the end
/// of the connection or on an error. Cancellation-safe: bytes read are in `ahead` in the
/// same poll that read them.
async fn read_more(conn: &mut PeerStream, ahead: &mut VecDeque<u8>) -> bool {
    let mut chunk = [0u8; READ_CHUNK];
    match conn.read(&mut chunk).await {
        Ok(n) if n > 0 => {
            ahead.extend(&chunk[..n]);
            true
        }
        _ => false,
    }
}

/// Takes the first whole call off `ahead`; Ok(None) while it is not all there.
fn take_frame(ahead: &mut VecDeque<u8>) -> Result<Option<pb::BudgetCall>, NpudError> {
    let body = match frame::take(ahead) {
        Ok(Some(body)) => body,
        Ok(None) => return Ok(None),
        Err(frame::TooLong(len)) => {
            return Err(NpudError::new(
                Reason::PayloadTooLarge,
                format!("a budget frame of {len} bytes; the most is {}", npud_proto::BUDGET_MAX_FRAME),
            ));
        }
    };
    pb::BudgetCall::decode(body.as_slice()).map(Some).map_err(|e| {
        NpudError::new(Reason::InvalidArgumentOther, format!("a budget frame that is not a BudgetCall: {e}"))
    })
}

/// Writes the answers held back, if any, in one write.
async fn write_frames(conn: &mut PeerStream, held: &mut Vec<u8>) -> std::io::Result<()> {
    if held.is_empty() {
        return Ok(());
    }
    conn.write_all(held).await?;
    held.clear();
    conn.flush().await
}
