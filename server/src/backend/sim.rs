//! The `sim` backend: drives in-process `npu-sim` devices.

use super::{
    Backend, BackendError, BackendResult, DeviceDesc, ErrorKind, EventState, RawEvent, RawStream, Report, ReportSink,
    StreamState, Wait, WaitKind,
};
use npu_sim::{FailureMode, Profile, SimDevice, SimError, SimOptions, SimReport, codes};
use std::sync::Arc;
use std::time::Duration;

pub struct SimBackend {
    devices: Vec<Arc<SimDevice>>,
    descs: Vec<DeviceDesc>,
}

impl SimBackend {
    /// Opens `count` devices of `profile`, each with the daemon's own context (which costs
    /// the device its default stream, as on real hardware).
    pub fn new(profile: &Profile, count: u32, options: &SimOptions) -> BackendResult<Self> {
        let mut devices = Vec::new();
        let mut descs = Vec::new();
        for id in 0..count {
            let device = Arc::new(SimDevice::new(id, profile.clone(), options.clone()));
            device.create_context().map_err(convert)?;
            descs.push(DeviceDesc {
                id,
                identity: crate::backend::Identity { physical_id: Some(id), ..Default::default() },
                name: format!("npu-sim{id}"),
                profile: profile.name.to_string(),
                hardware_limit: profile.stream_limit,
                runtime_streams: profile.internal_sync_streams + 1,
                event_limit: profile.event_limit,
                priority_highest: 0,
                priority_lowest: profile.priority_lowest as i32,
                client_slots: None,
            });
            devices.push(device);
        }
        Ok(Self { devices, descs })
    }

    fn dev(&self, device: u32) -> BackendResult<&SimDevice> {
        self.devices.get(device as usize).map(|d| d.as_ref()).ok_or_else(|| BackendError {
            kind: ErrorKind::InvalidArgument,
            native_code: i64::from(codes::RT_INVALID_DEVICEID),
            message: format!("no device {device}"),
        })
    }

    fn wait_on(&self, device: u32, register: impl FnOnce(&SimDevice, npu_sim::Waiter) -> Result<(), SimError>) -> Wait {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let registered =
            self.dev(device).and_then(|d| register(d, Box::new(move |r| drop(tx.send(r)))).map_err(convert));
        Box::pin(async move {
            registered?;
            match rx.await {
                Ok(result) => result.map_err(convert),
                Err(_) => Err(BackendError {
                    kind: ErrorKind::Other,
                    native_code: i64::from(codes::RT_INTERNAL_ERROR),
                    message: "the device went away while waiting".into(),
                }),
            }
        })
    }
}

fn convert(e: SimError) -> BackendError {
    BackendError { kind: e.kind, native_code: i64::from(e.code), message: e.message }
}

fn code(code: i64) -> BackendResult<i32> {
    i32::try_from(code).map_err(|_| BackendError {
        kind: ErrorKind::InvalidArgument,
        native_code: i64::from(codes::INVALID_PARAM),
        message: format!("error code {code} does not fit an aclError"),
    })
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn calls_block(&self) -> bool {
        false
    }

    fn devices(&self) -> &[DeviceDesc] {
        &self.descs
    }

    fn set_report_sink(&self, sink: ReportSink) {
        for d in &self.devices {
            let sink = Arc::clone(&sink);
            let device = d.id();
            d.set_report_sink(Arc::new(move |r| {
                sink(match r {
                    SimReport::Callback { stream, callback, blocking, status } => Report::Callback {
                        device,
                        stream: RawStream(stream),
                        callback,
                        blocking,
                        status: i64::from(status),
                    },
                    SimReport::Exception { stream, task, code } => {
                        Report::Exception { device, stream: RawStream(stream), task, code: i64::from(code) }
                    }
                })
            }));
        }
    }

    fn timeout_code(&self, kind: WaitKind) -> i64 {
        i64::from(match kind {
            WaitKind::Stream | WaitKind::Device => codes::RT_STREAM_SYNC_TIMEOUT,
            WaitKind::Event => codes::RT_EVENT_SYNC_TIMEOUT,
        })
    }

    fn create_stream(&self, device: u32, priority: i32, flags: u32) -> BackendResult<RawStream> {
        let priority = u32::try_from(priority).map_err(|_| BackendError {
            kind: ErrorKind::InvalidArgument,
            native_code: i64::from(codes::INVALID_PARAM),
            message: format!("priority {priority} is negative"),
        })?;
        self.dev(device)?.create_stream(priority, flags).map(RawStream).map_err(convert)
    }

    fn destroy_stream(&self, device: u32, stream: RawStream) -> BackendResult<()> {
        self.dev(device)?.destroy_stream(stream.0).map_err(convert)
    }

    fn destroy_stream_force(&self, device: u32, stream: RawStream) -> BackendResult<()> {
        self.dev(device)?.destroy_stream_force(stream.0).map_err(convert)
    }

    fn stream_state(&self, device: u32, stream: RawStream) -> BackendResult<StreamState> {
        let s = self.dev(device)?.stream_status(stream.0).map_err(convert)?;
        Ok(StreamState {
            pending_tasks: s.pending_tasks,
            failed: s.failed,
            stop_on_failure: s.failure_mode == FailureMode::Stop,
            failure_mode_set: s.failure_mode_set,
        })
    }

    fn renew_stream(&self, device: u32, stream: RawStream) -> BackendResult<()> {
        match self.dev(device)?.renew_stream(stream.0).map_err(convert)? {
            true => Ok(()),
            false => Err(BackendError {
                kind: ErrorKind::Other,
                native_code: i64::from(codes::RT_INTERNAL_ERROR),
                message: "the stream still has work or a failure; it is not pooled".into(),
            }),
        }
    }

    fn stream_query(&self, device: u32, stream: RawStream) -> BackendResult<bool> {
        self.dev(device)?.stream_query(stream.0).map_err(convert)
    }

    fn stream_drained(&self, device: u32, stream: RawStream) -> Wait {
        self.wait_on(device, |d, w| d.on_stream_drained(stream.0, w))
    }

    fn stream_wait_event(&self, device: u32, stream: RawStream, event: RawEvent) -> BackendResult<()> {
        self.dev(device)?.stream_wait_event(stream.0, event.0).map_err(convert)
    }

    fn enqueue_delay(&self, device: u32, stream: RawStream, duration: Duration) -> BackendResult<u64> {
        self.dev(device)?.enqueue_delay(stream.0, duration).map_err(convert)
    }

    fn set_stop_on_failure(&self, device: u32, stream: RawStream, stop: bool) -> BackendResult<()> {
        let mode = if stop { FailureMode::Stop } else { FailureMode::Continue };
        self.dev(device)?.set_failure_mode(stream.0, mode).map_err(convert)
    }

    fn create_event(&self, device: u32, flags: u32, timing: bool) -> BackendResult<RawEvent> {
        self.dev(device)?.create_event(flags, timing).map(RawEvent).map_err(convert)
    }

    fn destroy_event(&self, device: u32, event: RawEvent) -> BackendResult<()> {
        self.dev(device)?.destroy_event(event.0).map_err(convert)
    }

    fn record_event(&self, device: u32, event: RawEvent, stream: RawStream) -> BackendResult<()> {
        self.dev(device)?.record_event(event.0, stream.0).map_err(convert)
    }

    fn reset_event(&self, device: u32, event: RawEvent, stream: RawStream) -> BackendResult<()> {
        self.dev(device)?.reset_event(event.0, stream.0).map_err(convert)
    }

    fn event_state(&self, device: u32, event: RawEvent) -> BackendResult<EventState> {
        Ok(match self.dev(device)?.event_state(event.0).map_err(convert)? {
            npu_sim::EventState::NotRecorded => EventState::NotRecorded,
            npu_sim::EventState::Pending => EventState::Pending,
            npu_sim::EventState::Complete => EventState::Complete,
        })
    }

    fn event_complete(&self, device: u32, event: RawEvent) -> Wait {
        self.wait_on(device, |d, w| d.on_event_complete(event.0, w))
    }

    fn elapsed_ms(&self, device: u32, start: RawEvent, end: RawEvent) -> BackendResult<f32> {
        self.dev(device)?.elapsed_ms(start.0, end.0).map_err(convert)
    }

    fn launch_callback(&self, device: u32, stream: RawStream, callback: u64, blocking: bool) -> BackendResult<u64> {
        self.dev(device)?.launch_callback(stream.0, callback, blocking).map_err(convert)
    }

    fn ack_callback(&self, device: u32, stream: RawStream, callback: u64) -> BackendResult<bool> {
        self.dev(device)?.ack_callback(stream.0, callback).map_err(convert)
    }

    fn fail_callback(&self, device: u32, stream: RawStream, callback: u64, code: i64) -> bool {
        let code = i32::try_from(code).unwrap_or(codes::RT_INTERNAL_ERROR);
        self.dev(device).is_ok_and(|d| d.fail_callback(stream.0, callback, code))
    }

    fn available_streams(&self, device: u32) -> BackendResult<u32> {
        Ok(self.dev(device)?.available_streams())
    }

    fn hardware_creations(&self, device: u32) -> u64 {
        self.dev(device).map(|d| d.counts().hardware_creations).unwrap_or(0)
    }

    fn heartbeat(&self, device: u32) -> Wait {
        self.wait_on(device, |d, w| {
            d.heartbeat(w);
            Ok(())
        })
    }

    fn hardware_in_use(&self, device: u32) -> u32 {
        self.dev(device).map(|d| d.counts().streams_in_use).unwrap_or(0)
    }

    fn set_stalled(&self, device: u32, stalled: bool) -> BackendResult<()> {
        self.dev(device)?.set_stalled(stalled);
        Ok(())
    }

    fn fail_next_creations(&self, device: u32, count: u32) -> BackendResult<()> {
        self.dev(device)?.fail_next_creations(count);
        Ok(())
    }

    fn fail_task(&self, device: u32, stream: RawStream, task: u64, native: i64) -> BackendResult<()> {
        self.dev(device)?.fail_task(stream.0, task, code(native)?).map_err(convert)
    }
}
