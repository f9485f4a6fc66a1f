//! A stand-in for npud on the budget wire that grants every ask at once: no identity, no
//! ledger, no books, one thread. npud-bench runs the interposer against it to take the
//! interposer's start-up cost apart: what the process side costs (the library, its
//! connection, its thread, its hooks) against what npud's answers cost. Nothing but the
//! bench uses it; it admits nothing.

use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use prost::Message;
use std::collections::VecDeque;
use std::path::PathBuf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// Streams the stand-in says are free on every device.
const FREE: u32 = 2000;

/// The stand-in, serving on `socket` until dropped.
pub struct StandIn {
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StandIn {
    pub fn start() -> StandIn {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("standin.sock");
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (ready, listening) = std::sync::mpsc::channel();
        let path = socket.clone();
        let thread = std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_io().build().expect("a runtime for the stand-in");
            runtime.block_on(async move {
                let listener = UnixListener::bind(&path).expect("the stand-in's socket");
                let _ = ready.send(());
                tokio::select! {
                    () = accept(listener) => {}
                    _ = stopped => {}
                }
            });
        });
        listening.recv().expect("the stand-in started");
        StandIn { socket, _dir: dir, stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept(listener: UnixListener) {
    while let Ok((conn, _)) = listener.accept().await {
        tokio::spawn(serve(conn));
    }
}

/// Answers each call as soon as it is whole, all answers to one read in one write.
async fn serve(mut conn: UnixStream) {
    let mut preface = [0u8; 8];
    if conn.read_exact(&mut preface).await.is_err() || &preface != npud_proto::BUDGET_PREFACE {
        return;
    }
    let mut input = VecDeque::new();
    let mut chunk = [0u8; 1024];
    loop {
        match conn.read(&mut chunk).await {
            Ok(n) if n > 0 => input.extend(&chunk[..n]),
            _ => return,
        }
        let mut out = Vec::new();
        while let Ok(Some(body)) = npud_proto::frame::take(&mut input) {
            let Ok(call) = pb::BudgetCall::decode(body.as_slice()) else { return };
            npud_proto::frame::put(&mut out, &pb::BudgetReply { reply: Some(answer(call.call)) });
        }
        if !out.is_empty() && conn.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// Every ask granted in full on a device with room; every report taken.
fn answer(call: Option<Call>) -> Reply {
    let share = |device| {
        Some(pb::BudgetShare { device, capacity: FREE, device_free: FREE, available: FREE, ..Default::default() })
    };
    match call {
        Some(Call::Hello(_)) => Reply::Welcome(pb::BudgetWelcome { tenant: "bench".into(), ..Default::default() }),
        Some(Call::Acquire(a)) => Reply::Acquired(pb::AcquireBudgetResponse {
            waited_ms: 0,
            share: share(a.device),
            unpaced: true,
            granted: None,
        }),
        Some(Call::Release(r)) => Reply::Released(pb::ReleaseBudgetResponse { share: share(r.device) }),
        Some(Call::Declare(d)) => Reply::Declared(pb::DeclareBudgetResponse {
            accepted: d.count,
            share: share(d.device),
            events_accepted: d.events,
        }),
        Some(Call::Share(s)) => Reply::Share(share(s.device).unwrap_or_default()),
        Some(Call::Created(_)) => Reply::Created(pb::CreatedBudgetResponse {}),
        Some(Call::AcquireEvents(a)) => Reply::EventsAcquired(pb::AcquireEventsResponse { share: share(a.device) }),
        Some(Call::ReleaseEvents(r)) => Reply::EventsReleased(pb::ReleaseEventsResponse { share: share(r.device) }),
        Some(Call::Captured(c)) => {
            Reply::Captured(pb::CapturedBudgetResponse { accepted: c.count, share: share(c.device) })
        }
        None => Reply::Error(pb::BudgetError { message: "an empty call".into(), ..Default::default() }),
    }
}
