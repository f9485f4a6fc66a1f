//! Raw clients for hostile tests: the budget wire frame by frame (a stray byte, a close,
//! a call cut short wherever a test wants), and gRPC calls whose bodies do not decode.
//! Test code: a failure here is a failed test, so it panics.

use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use prost::Message;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// One raw budget-wire frame: length, then the call.
pub fn frame(call: Call) -> Vec<u8> {
    let body = pb::BudgetCall { call: Some(call) }.encode_to_vec();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// A budget-wire connection spoken by hand.
pub struct Wire {
    pub conn: UnixStream,
}

impl Wire {
    /// Connects to `socket` and says the budget preface; nothing else.
    pub fn connect(socket: &Path) -> Wire {
        let mut conn = UnixStream::connect(socket).expect("connect to npud");
        conn.write_all(npud_proto::BUDGET_PREFACE).expect("preface");
        conn.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
        Wire { conn }
    }

    /// Connects and says hello; panics unless welcomed.
    pub fn hello(socket: &Path, hello: pb::BudgetHello) -> Wire {
        let mut w = Wire::connect(socket);
        match w.call(Call::Hello(hello)) {
            Ok(Reply::Welcome(_)) => w,
            other => panic!("expected a welcome, got {other:?}"),
        }
    }

    pub fn send(&mut self, call: Call) {
        self.conn.write_all(&frame(call)).expect("write a call");
    }

    /// The next reply, or the error npud answered with.
    pub fn reply(&mut self) -> Result<Reply, pb::BudgetError> {
        let mut len = [0u8; 4];
        self.conn.read_exact(&mut len).expect("a reply's length");
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        self.conn.read_exact(&mut body).expect("a reply's body");
        match pb::BudgetReply::decode(body.as_slice()).expect("a reply").reply.expect("a reply body") {
            Reply::Error(e) => Err(e),
            r => Ok(r),
        }
    }

    pub fn call(&mut self, call: Call) -> Result<Reply, pb::BudgetError> {
        self.send(call);
        self.reply()
    }

    /// Acquires `count` streams on `device`, waiting at most `wait_ms`.
    pub fn acquire(&mut self, device: u32, count: u32, wait_ms: u32) -> Result<Reply, pb::BudgetError> {
        self.call(Call::Acquire(pb::AcquireBudgetRequest { device, count, wait_ms, ..Default::default() }))
    }

    /// Reads until npud closes the connection (or `limit` passes); returns whether it did.
    pub fn closed_within(&mut self, limit: Duration) -> bool {
        self.conn.set_read_timeout(Some(limit)).expect("timeout");
        let mut rest = Vec::new();
        self.conn.read_to_end(&mut rest).is_ok()
    }
}

/// A message that is not the one any npud method expects: field 1 as a varint where every
/// request has a message or a string.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Garbage {
    #[prost(uint64, tag = "1")]
    pub x: u64,
}

/// Calls the client-streaming-and-streaming-back method at `path` with one message that
/// does not decode; returns the status the response stream ends with.
pub async fn garbage_stream(channel: tonic::transport::Channel, path: &'static str) -> tonic::Status {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<Garbage, pb::BudgetReply>::default();
    let calls = tokio_stream::iter(vec![Garbage { x: 7 }]);
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    match grpc.streaming(tonic::Request::new(calls), path, codec).await {
        Err(status) => status,
        Ok(res) => {
            let mut replies = res.into_inner();
            loop {
                match replies.message().await {
                    Ok(Some(_)) => continue,
                    Ok(None) => panic!("the stream ended without an error"),
                    Err(status) => break status,
                }
            }
        }
    }
}

/// Calls the unary method at `path` with a message that does not decode.
pub async fn garbage_unary(channel: tonic::transport::Channel, path: &'static str) -> tonic::Status {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<Garbage, ()>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    match grpc.unary(tonic::Request::new(Garbage { x: 7 }), path, codec).await {
        Err(status) => status,
        Ok(_) => panic!("garbage was accepted"),
    }
}
