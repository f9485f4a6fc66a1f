//! Owning handles: a Stream or Event is destroyed when dropped (in a Tokio runtime).

use crate::error::Result;
use crate::session::Client;
use npud_proto::v1 as pb;
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct StreamOptions {
    /// 0 is the most urgent (ACL convention).
    pub priority: i32,
    /// OR of `pb::StreamFlag` values.
    pub flags: u32,
    /// How long to wait for budget.
    pub wait: Duration,
}

#[derive(Debug, Clone, Default)]
pub struct EventOptions {
    /// OR of `pb::EventFlag` values; 0 is the vendor default (SYNC | TIME_LINE).
    pub flags: u32,
    pub disable_timing: bool,
    pub blocking_sync: bool,
}

/// A device of the daemon, as seen through one client.
#[derive(Debug, Clone)]
pub struct Device {
    client: Client,
    id: u32,
}

impl Client {
    /// Device `id` of the daemon, through this client (defined here, beside the handle,
    /// so the session module needs nothing of the handles built on it).
    pub fn device(&self, id: u32) -> Device {
        Device { client: self.clone(), id }
    }
}

impl Device {
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Creates `count` streams, all or none.
    pub async fn create_streams(&self, count: u32, options: StreamOptions) -> Result<Vec<Stream>> {
        let wait_ms = options.wait.as_millis().min(u128::from(u32::MAX)) as u32;
        let req = pb::CreateStreamsRequest {
            device: self.id,
            count,
            priority: options.priority,
            flags: options.flags,
            wait_ms,
        };
        let r = self.client.call(req, |c, r| async move { c.streams().create(r).await }).await?;
        Ok(r.streams.into_iter().map(|info| Stream { client: self.client.clone(), info, live: true }).collect())
    }

    pub async fn create_stream(&self, options: StreamOptions) -> Result<Stream> {
        let mut v = self.create_streams(1, options).await?;
        Ok(v.remove(0))
    }

    pub async fn create_event(&self, options: EventOptions) -> Result<Event> {
        let req = pb::CreateEventRequest {
            device: self.id,
            flags: options.flags,
            disable_timing: options.disable_timing,
            blocking_sync: options.blocking_sync,
        };
        let info = self.client.call(req, |c, r| async move { c.events().create(r).await }).await?;
        Ok(Event { client: self.client.clone(), info, live: true })
    }

    /// Waits for this tenant's work on the device (never another tenant's).
    pub async fn sync(&self, timeout: Option<Duration>) -> Result<()> {
        let timeout_ms = timeout.map_or(0, |t| t.as_millis().clamp(1, u128::from(u32::MAX)) as u32);
        let req = pb::SynchronizeDeviceRequest { device: self.id, timeout_ms };
        self.client.call(req, |c, r| async move { c.device_service().synchronize(r).await }).await?;
        Ok(())
    }
}

#[derive(Debug)]
pub struct Stream {
    client: Client,
    info: pb::StreamInfo,
    live: bool,
}

fn millis(timeout: Option<Duration>) -> u32 {
    timeout.map_or(0, |t| t.as_millis().clamp(1, u128::from(u32::MAX)) as u32)
}

impl Stream {
    pub fn handle(&self) -> u64 {
        self.info.handle
    }
    pub fn device(&self) -> u32 {
        self.info.device
    }
    pub fn priority(&self) -> i32 {
        self.info.priority
    }
    pub fn flags(&self) -> u32 {
        self.info.flags
    }
    /// True when it came from the daemon's warm pool.
    pub fn reused(&self) -> bool {
        self.info.reused
    }

    /// Puts timed work on the stream (npud extension); returns the task's number.
    pub async fn delay(&self, duration: Duration) -> Result<u64> {
        let duration_us = duration.as_micros().min(u128::from(u64::MAX)) as u64;
        let req = pb::EnqueueDelayRequest { stream: self.handle(), duration_us };
        Ok(self.client.call(req, |c, r| async move { c.streams().enqueue_delay(r).await }).await?.task_id)
    }

    pub async fn sync(&self) -> Result<()> {
        self.sync_timeout(None).await
    }

    pub async fn sync_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        let req = pb::SynchronizeStreamRequest { handle: self.handle(), timeout_ms: millis(timeout) };
        self.client.call(req, |c, r| async move { c.streams().synchronize(r).await }).await?;
        Ok(())
    }

    /// True when all work enqueued so far has finished.
    pub async fn is_done(&self) -> Result<bool> {
        let req = pb::QueryStreamRequest { handle: self.handle() };
        let r = self.client.call(req, |c, r| async move { c.streams().query(r).await }).await?;
        Ok(r.state == pb::WorkState::Complete as i32)
    }

    /// Later work on this stream waits for the event's current record.
    pub async fn wait(&self, event: &Event) -> Result<()> {
        let req = pb::StreamWaitEventRequest { stream: self.handle(), event: event.handle() };
        self.client.call(req, |c, r| async move { c.streams().wait_event(r).await }).await?;
        Ok(())
    }

    pub async fn record(&self, event: &Event) -> Result<()> {
        let req = pb::RecordEventRequest { event: event.handle(), stream: self.handle() };
        self.client.call(req, |c, r| async move { c.events().record(r).await }).await?;
        Ok(())
    }

    pub async fn info(&self) -> Result<pb::StreamInfo> {
        let req = pb::GetStreamRequest { handle: self.handle() };
        self.client.call(req, |c, r| async move { c.streams().get(r).await }).await
    }

    /// Destroys the stream now, reporting errors (dropping does it quietly).
    pub async fn close(mut self) -> Result<()> {
        self.live = false;
        let req = pb::DestroyStreamsRequest { handles: vec![self.handle()] };
        self.client.call(req, |c, r| async move { c.streams().destroy(r).await }).await?;
        Ok(())
    }

    /// Gives up ownership without destroying (the session still holds the stream).
    pub fn leak(self) -> u64 {
        self.detach().handle
    }

    /// Gives up ownership without destroying, returning what npud said of the stream: for
    /// a named session's streams that later calls (another process) will use.
    pub fn detach(mut self) -> pb::StreamInfo {
        self.live = false;
        std::mem::take(&mut self.info)
    }
}

/// A handle dropped without `close()` is destroyed in the background when a runtime is
/// there to run the call; otherwise the session's reclaim frees it when the session ends.
fn destroy_in_background(destroy: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(destroy);
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.live {
            let mut streams = self.client.streams();
            let handles = vec![self.info.handle];
            destroy_in_background(async move {
                let _ = streams.destroy(pb::DestroyStreamsRequest { handles }).await;
            });
        }
    }
}

#[derive(Debug)]
pub struct Event {
    client: Client,
    info: pb::EventInfo,
    live: bool,
}

impl Event {
    pub fn handle(&self) -> u64 {
        self.info.handle
    }
    pub fn timing(&self) -> bool {
        self.info.timing
    }

    pub async fn state(&self) -> Result<pb::EventState> {
        let req = pb::QueryEventRequest { handle: self.handle() };
        let r = self.client.call(req, |c, r| async move { c.events().query(r).await }).await?;
        Ok(pb::EventState::try_from(r.state).unwrap_or(pb::EventState::Unspecified))
    }

    /// cuda.core semantics: a never-recorded event counts as done.
    pub async fn is_done(&self) -> Result<bool> {
        Ok(self.state().await? != pb::EventState::Pending)
    }

    pub async fn sync(&self) -> Result<()> {
        self.sync_timeout(None).await
    }

    pub async fn sync_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        let req = pb::SynchronizeEventRequest { handle: self.handle(), timeout_ms: millis(timeout) };
        self.client.call(req, |c, r| async move { c.events().synchronize(r).await }).await?;
        Ok(())
    }

    /// Enqueues a reset on `stream` (ACL semantics).
    pub async fn reset(&self, stream: &Stream) -> Result<()> {
        let req = pb::ResetEventRequest { event: self.handle(), stream: stream.handle() };
        self.client.call(req, |c, r| async move { c.events().reset(r).await }).await?;
        Ok(())
    }

    /// Milliseconds from `start` to this event.
    pub async fn elapsed_since(&self, start: &Event) -> Result<f32> {
        let req = pb::ElapsedTimeRequest { start: start.handle(), end: self.handle() };
        Ok(self.client.call(req, |c, r| async move { c.events().elapsed_time(r).await }).await?.milliseconds)
    }

    /// Gives up ownership without destroying (the session still holds the event).
    pub fn leak(self) -> u64 {
        self.detach().handle
    }

    /// Gives up ownership without destroying, returning what npud said of the event.
    pub fn detach(mut self) -> pb::EventInfo {
        self.live = false;
        std::mem::take(&mut self.info)
    }

    pub async fn close(mut self) -> Result<()> {
        self.live = false;
        let req = pb::DestroyEventRequest { handle: self.handle() };
        self.client.call(req, |c, r| async move { c.events().destroy(r).await }).await?;
        Ok(())
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.live {
            let mut events = self.client.events();
            let handle = self.info.handle;
            destroy_in_background(async move {
                let _ = events.destroy(pb::DestroyEventRequest { handle }).await;
            });
        }
    }
}
