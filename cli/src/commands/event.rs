use super::Ctx;
use super::{SessionArg, parse_duration};
use crate::output::{emit, table};
use clap::Subcommand;
use npud_client::EventOptions;
use npud_proto::v1::{self as pb, event_service_client::EventServiceClient};
use serde_json::json;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum EventCmd {
    /// Create an event.
    #[command(after_help = "Examples:\n  npuctl event create\n  npuctl event create --no-timing --session job-7")]
    Create {
        /// The device, as `device list` numbers it.
        #[arg(long, default_value_t = 0)]
        device: u32,
        /// ACL event flags as a number (0 = default: sync + timeline).
        #[arg(long, default_value_t = 0)]
        flags: u32,
        /// No timestamps (cheaper; elapsed time is refused).
        #[arg(long)]
        no_timing: bool,
        #[command(flatten)]
        session: SessionArg,
    },
    /// Record EVENT on STREAM.
    #[command(after_help = "Example:\n  npuctl event record 77 1234")]
    Record { event: u64, stream: u64 },
    /// State of the event's most recent record.
    #[command(after_help = "Example:\n  npuctl event query 77")]
    Query { event: u64 },
    /// Wait for the event's most recent record.
    #[command(after_help = "Example:\n  npuctl event sync 77 --timeout 2s")]
    Sync {
        event: u64,
        /// Give up after this long, e.g. 2s [default: wait until done].
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<std::time::Duration>,
    },
    /// Milliseconds between two recorded, completed, timed events.
    #[command(after_help = "Example:\n  npuctl event elapsed 77 78")]
    Elapsed { start: u64, end: u64 },
    /// Destroy events.
    #[command(after_help = "Example:\n  npuctl event destroy 77 78")]
    Destroy {
        #[arg(required = true)]
        events: Vec<u64>,
    },
    /// Your events.
    #[command(after_help = "Example:\n  npuctl event list")]
    List,
}

impl EventCmd {
    pub async fn run(self, ctx: &Ctx) -> anyhow::Result<()> {
        match self {
            EventCmd::Create { device, flags, no_timing, session } => {
                create(ctx, device, flags, no_timing, &session.session).await?
            }
            EventCmd::Record { event, stream } => record(ctx, event, stream).await?,
            EventCmd::Query { event } => query(ctx, event).await?,
            EventCmd::Sync { event, timeout } => sync(ctx, event, timeout).await?,
            EventCmd::Elapsed { start, end } => elapsed(ctx, start, end).await?,
            EventCmd::Destroy { events } => destroy(ctx, events).await?,
            EventCmd::List => list(ctx).await?,
        }
        Ok(())
    }
}

fn state_name(state: i32) -> &'static str {
    match pb::EventState::try_from(state) {
        Ok(pb::EventState::NotRecorded) => "not_recorded",
        Ok(pb::EventState::Pending) => "pending",
        Ok(pb::EventState::Complete) => "complete",
        _ => "unknown",
    }
}

async fn events(ctx: &Ctx) -> npud_client::Result<EventServiceClient<npud_client::SessionChannel>> {
    Ok(EventServiceClient::new(ctx.channel().await?))
}

pub async fn create(ctx: &Ctx, device: u32, flags: u32, no_timing: bool, session: &str) -> npud_client::Result<()> {
    let client = ctx.session(session).await?;
    let ev = client
        .device(device)
        .create_event(EventOptions { flags, disable_timing: no_timing, blocking_sync: false })
        .await?;
    let timing = ev.timing();
    let handle = ev.leak(); // it belongs to the named session, for later npuctl calls
    emit(ctx.output, json!({ "handle": handle, "device": device, "timing": timing }), || {
        format!("event {handle} on device {device}")
    });
    Ok(())
}

pub async fn record(ctx: &Ctx, event: u64, stream: u64) -> npud_client::Result<()> {
    events(ctx).await?.record(pb::RecordEventRequest { event, stream }).await?;
    emit(ctx.output, json!({ "event": event, "stream": stream }), || {
        format!("event {event} recorded on stream {stream}")
    });
    Ok(())
}

pub async fn query(ctx: &Ctx, event: u64) -> npud_client::Result<()> {
    let r = events(ctx).await?.query(pb::QueryEventRequest { handle: event }).await?.into_inner();
    let state = state_name(r.state);
    emit(ctx.output, json!({ "event": event, "state": state }), || format!("event {event}: {state}"));
    Ok(())
}

pub async fn sync(ctx: &Ctx, event: u64, timeout: Option<Duration>) -> npud_client::Result<()> {
    let timeout_ms = timeout.map_or(0, |t| t.as_millis().clamp(1, u128::from(u32::MAX)) as u32);
    events(ctx).await?.synchronize(pb::SynchronizeEventRequest { handle: event, timeout_ms }).await?;
    emit(ctx.output, json!({ "event": event, "state": "complete" }), || format!("event {event}: complete"));
    Ok(())
}

pub async fn elapsed(ctx: &Ctx, start: u64, end: u64) -> npud_client::Result<()> {
    let ms = events(ctx).await?.elapsed_time(pb::ElapsedTimeRequest { start, end }).await?.into_inner().milliseconds;
    emit(ctx.output, json!({ "start": start, "end": end, "milliseconds": ms }), || format!("{ms:.3} ms"));
    Ok(())
}

pub async fn destroy(ctx: &Ctx, handles: Vec<u64>) -> npud_client::Result<()> {
    let mut svc = events(ctx).await?;
    for &handle in &handles {
        svc.destroy(pb::DestroyEventRequest { handle }).await?;
    }
    emit(ctx.output, json!({ "destroyed": handles.len() }), || format!("destroyed {} event(s)", handles.len()));
    Ok(())
}

pub async fn list(ctx: &Ctx) -> npud_client::Result<()> {
    let list = events(ctx).await?.list(pb::ListEventsRequest {}).await?.into_inner().events;
    let json = json!(list.iter().map(|e| json!({"handle": e.handle, "device": e.device, "flags": e.flags, "timing": e.timing, "state": state_name(e.state)})).collect::<Vec<_>>());
    emit(ctx.output, json, || {
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|e| {
                vec![
                    e.handle.to_string(),
                    e.device.to_string(),
                    format!("{:#x}", e.flags),
                    e.timing.to_string(),
                    state_name(e.state).into(),
                ]
            })
            .collect();
        table(&["HANDLE", "DEVICE", "FLAGS", "TIMING", "STATE"], &rows)
    });
    Ok(())
}
