use super::{Ctx, flag_names};
use super::{SessionArg, parse_duration};
use crate::output::{emit, table};
use clap::Subcommand;
use npud_client::StreamOptions;
use npud_proto::v1::{self as pb, stream_service_client::StreamServiceClient};
use serde_json::json;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum StreamCmd {
    /// Create streams, all or none, waiting for budget up to --wait.
    #[command(
        after_help = "Example:\n  npuctl stream create --count 60 --flags fast-launch,fast-sync --wait 60s --session job-7"
    )]
    Create {
        /// The device, as `device list` numbers it.
        #[arg(long, default_value_t = 0)]
        device: u32,
        /// How many streams: granted all together or not at all.
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// Lower is more urgent; the range is the device's (`device list`: 0..=7 on Ascend, -5..=0 on CUDA, where 0 is the least urgent).
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        priority: i32,
        /// Comma-separated: fast-launch, fast-sync, persistent, huge, cpu-schedule, device-use-only, non-blocking.
        #[arg(long, default_value = "")]
        flags: String,
        /// How long to wait for budget, e.g. 30s (0 fails at once).
        #[arg(long, default_value = "0s", value_parser = parse_duration)]
        wait: std::time::Duration,
        #[command(flatten)]
        session: SessionArg,
    },
    /// Your streams.
    #[command(after_help = "Example:\n  npuctl stream list")]
    List,
    /// Destroy streams (all named handles or none).
    #[command(after_help = "Example:\n  npuctl stream destroy 1234 1235 --session job-7")]
    Destroy {
        #[arg(required = true, value_name = "HANDLE")]
        handles: Vec<u64>,
        #[command(flatten)]
        session: SessionArg,
    },
    /// Wait until all work on the stream has finished.
    #[command(after_help = "Example:\n  npuctl stream sync 1234 --timeout 5s")]
    Sync {
        handle: u64,
        /// Give up after this long, e.g. 5s [default: wait until done].
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<std::time::Duration>,
    },
    /// Whether all work on the stream has finished.
    #[command(after_help = "Example:\n  npuctl stream query 1234")]
    Query { handle: u64 },
    /// Put timed work on a stream (npud extension).
    #[command(after_help = "Example:\n  npuctl stream delay 1234 20ms")]
    Delay {
        handle: u64,
        #[arg(value_parser = parse_duration)]
        duration: std::time::Duration,
    },
    /// Make later work on STREAM wait for EVENT's current record.
    #[command(after_help = "Example:\n  npuctl stream wait-event 1235 77")]
    WaitEvent { stream: u64, event: u64 },
}

impl StreamCmd {
    pub async fn run(self, ctx: &Ctx) -> anyhow::Result<()> {
        match self {
            StreamCmd::Create { device, count, priority, flags, wait, session } => {
                create(ctx, device, count, priority, &flags, wait, &session.session).await?
            }
            StreamCmd::List => list(ctx).await?,
            StreamCmd::Destroy { handles, session } => destroy(ctx, handles, &session.session).await?,
            StreamCmd::Sync { handle, timeout } => sync(ctx, handle, timeout).await?,
            StreamCmd::Query { handle } => query(ctx, handle).await?,
            StreamCmd::Delay { handle, duration } => delay(ctx, handle, duration).await?,
            StreamCmd::WaitEvent { stream, event } => wait_event(ctx, stream, event).await?,
        }
        Ok(())
    }
}

fn stream_json(s: &pb::StreamInfo) -> serde_json::Value {
    json!({
        "handle": s.handle, "device": s.device, "priority": s.priority, "flags": s.flags,
        "flag_names": flag_names(s.flags), "pending_tasks": s.pending_tasks, "failed": s.failed,
        "reused": s.reused,
    })
}

fn stream_rows(streams: &[pb::StreamInfo]) -> String {
    let rows: Vec<Vec<String>> = streams
        .iter()
        .map(|s| {
            vec![
                s.handle.to_string(),
                s.device.to_string(),
                s.priority.to_string(),
                flag_names(s.flags).join(","),
                s.pending_tasks.to_string(),
                if s.failed { "failed".into() } else { "ok".into() },
            ]
        })
        .collect();
    table(&["HANDLE", "DEVICE", "PRIORITY", "FLAGS", "PENDING", "STATE"], &rows)
}

pub async fn create(
    ctx: &Ctx,
    device: u32,
    count: u32,
    priority: i32,
    flags: &str,
    wait: Duration,
    session: &str,
) -> anyhow::Result<()> {
    let flags = npud_proto::flags::parse_stream_flags(flags).map_err(anyhow::Error::msg)?;
    let client = ctx.session(session).await?;
    let streams = client.device(device).create_streams(count, StreamOptions { priority, flags, wait }).await?;
    // The streams belong to the named session; the next npuctl call can use them.
    let infos: Vec<pb::StreamInfo> = streams.into_iter().map(npud_client::Stream::detach).collect();
    emit(ctx.output, json!(infos.iter().map(stream_json).collect::<Vec<_>>()), || stream_rows(&infos));
    Ok(())
}

pub async fn list(ctx: &Ctx) -> npud_client::Result<()> {
    let client = ctx.default_session().await?;
    let streams = client.streams().list(pb::ListStreamsRequest {}).await?.into_inner().streams;
    emit(ctx.output, json!(streams.iter().map(stream_json).collect::<Vec<_>>()), || stream_rows(&streams));
    Ok(())
}

pub async fn destroy(ctx: &Ctx, handles: Vec<u64>, session: &str) -> npud_client::Result<()> {
    let client = ctx.session(session).await?;
    let n = client.streams().destroy(pb::DestroyStreamsRequest { handles }).await?.into_inner().destroyed;
    emit(ctx.output, json!({ "destroyed": n }), || format!("destroyed {n} stream(s)"));
    Ok(())
}

pub async fn sync(ctx: &Ctx, handle: u64, timeout: Option<Duration>) -> npud_client::Result<()> {
    let timeout_ms = timeout.map_or(0, |t| t.as_millis().clamp(1, u128::from(u32::MAX)) as u32);
    StreamServiceClient::new(ctx.channel().await?)
        .synchronize(pb::SynchronizeStreamRequest { handle, timeout_ms })
        .await?;
    emit(ctx.output, json!({ "handle": handle, "state": "complete" }), || format!("stream {handle}: complete"));
    Ok(())
}

pub async fn query(ctx: &Ctx, handle: u64) -> npud_client::Result<()> {
    let r = StreamServiceClient::new(ctx.channel().await?).query(pb::QueryStreamRequest { handle }).await?.into_inner();
    let state = if r.state == pb::WorkState::Complete as i32 { "complete" } else { "not_ready" };
    emit(ctx.output, json!({ "handle": handle, "state": state }), || format!("stream {handle}: {state}"));
    Ok(())
}

pub async fn delay(ctx: &Ctx, handle: u64, duration: Duration) -> npud_client::Result<()> {
    let duration_us = duration.as_micros().min(u128::from(u64::MAX)) as u64;
    let r = StreamServiceClient::new(ctx.channel().await?)
        .enqueue_delay(pb::EnqueueDelayRequest { stream: handle, duration_us })
        .await?;
    let task = r.into_inner().task_id;
    emit(ctx.output, json!({ "handle": handle, "task_id": task }), || format!("stream {handle}: task {task} enqueued"));
    Ok(())
}

pub async fn wait_event(ctx: &Ctx, stream: u64, event: u64) -> npud_client::Result<()> {
    StreamServiceClient::new(ctx.channel().await?).wait_event(pb::StreamWaitEventRequest { stream, event }).await?;
    emit(ctx.output, json!({ "stream": stream, "event": event }), || {
        format!("stream {stream} waits for event {event}")
    });
    Ok(())
}
