//! Host callbacks (subscribe, launch, acknowledge) and the routing of device reports to
//! the session that owns the stream, never to anyone else.

use crate::backend::Report;
use crate::daemon::Daemon;
use crate::daemon::reports::{PendingCallback, ReportBody};
use crate::error::backend_error;
use crate::error::{NpudError, NpudResult, Reason};
use crate::registry::handle::Kind;
use crate::types::Caller;
use npud_proto::codes::acl;
use std::sync::Arc;

impl Daemon {
    pub fn subscribe_report(&self, caller: &Caller, session: u64, thread_id: u64, stream: u64) -> NpudResult<()> {
        self.registry.touch(caller, session)?;
        self.registry.subscribe(caller, stream, session, thread_id).map_err(|e| {
            if e.reason == Reason::StreamAlreadySubscribed {
                e.with_native(self.backend.name(), i64::from(acl::RT_STREAM_SUBSCRIBE))
            } else {
                e
            }
        })
    }

    pub fn unsubscribe_report(&self, caller: &Caller, thread_id: u64, stream: u64) -> NpudResult<()> {
        self.registry.unsubscribe(caller, stream, thread_id).map_err(|e| {
            if e.reason == Reason::StreamNotSubscribed {
                e.with_native(self.backend.name(), i64::from(acl::STREAM_NOT_SUBSCRIBE))
            } else {
                e
            }
        })
    }

    pub fn launch_callback(&self, caller: &Caller, stream: u64, user_data: Vec<u8>, blocking: bool) -> NpudResult<u64> {
        let max = self.config.limits.max_user_data;
        if user_data.len() > max {
            return Err(NpudError::invalid(
                Reason::PayloadTooLarge,
                format!("callback user data is {} bytes, the limit is {max}", user_data.len()),
            ));
        }
        let s = self.registry.stream(caller, stream)?;
        self.require_healthy(s.device)?;
        let Some((session, thread_id)) = s.subscriber else {
            return Err(NpudError::new(
                Reason::StreamNotSubscribed,
                format!("no thread subscribed to stream {stream}: call subscribe_report first"),
            )
            .with_native(self.backend.name(), i64::from(acl::RT_STREAM_NO_CB_REG)));
        };
        let id = self.registry.minter().mint(Kind::Callback);
        self.reports.add_callback(
            id,
            PendingCallback {
                session,
                tenant: Arc::clone(&caller.tenant),
                stream,
                device: s.device,
                raw_stream: s.raw,
                thread_id,
                user_data: Arc::from(user_data),
                blocking,
                fired: false,
            },
            self.config.limits.max_callbacks_in_flight,
        )?;
        if let Err(e) = self.backend.launch_callback(s.device, s.raw, id, blocking) {
            self.reports.remove_callback(id);
            return Err(backend_error(self.backend.name(), e));
        }
        Ok(id)
    }

    /// Acknowledges a callback; a blocking one releases its stream.
    pub fn ack_callback(&self, caller: &Caller, id: u64) -> NpudResult<()> {
        self.registry.minter().check(id, Kind::Callback)?;
        let cb = match self.reports.callback(id) {
            Some(cb) if cb.tenant == caller.tenant => cb,
            _ => {
                return Err(NpudError::new(Reason::UnknownHandle, format!("no callback {id} awaits acknowledgement")));
            }
        };
        if !cb.fired {
            return Err(NpudError::new(Reason::InvalidArgumentOther, format!("callback {id} has not fired yet")));
        }
        self.reports.remove_callback(id);
        if cb.blocking {
            self.backend
                .ack_callback(cb.device, cb.raw_stream, id)
                .map_err(|e| backend_error(self.backend.name(), e))?;
        }
        Ok(())
    }

    /// Routes one device report (run by the dispatcher task, in device order).
    pub fn route_report(self: &Arc<Self>, report: Report) {
        match report {
            Report::Callback { device, stream, callback, blocking, status } => {
                match self.reports.fire_callback(callback, status) {
                    Some(cb) if cb.blocking => self.arm_callback_deadline(callback),
                    Some(_) => {}
                    None if blocking => {
                        // Its session is gone: nobody will acknowledge, so release the stream.
                        let _ = self.backend.ack_callback(device, stream, callback);
                    }
                    None => {}
                }
            }
            Report::Exception { device, stream, task, code } => match self.registry.stream_by_raw(device, stream) {
                Some((handle, entry)) => {
                    let thread_id = entry.subscriber.map_or(0, |(_, t)| t);
                    tracing::info!(tenant = %entry.tenant, stream = handle, task, code, "task failed on the device");
                    self.reports.post(
                        entry.session,
                        ReportBody::Exception {
                            task,
                            stream: handle,
                            device,
                            thread_id,
                            code,
                            message: format!("task {task} failed with {code}"),
                        },
                    );
                }
                None => tracing::warn!(
                    device,
                    task,
                    code,
                    "exception on a stream no session holds; counted as undeliverable"
                ),
            },
        }
    }

    /// A blocking callback nobody acknowledges in time fails its stream instead of
    /// stalling the device for ever.
    fn arm_callback_deadline(self: &Arc<Self>, id: u64) {
        let this = Arc::clone(self);
        let deadline = self.config.limits.callback_deadline;
        tokio::spawn(async move {
            tokio::time::sleep(deadline).await;
            let Some(cb) = this.reports.remove_callback(id) else {
                return;
            };
            if this.backend.fail_callback(cb.device, cb.raw_stream, id, i64::from(acl::WAIT_CALLBACK_TIMEOUT)) {
                tracing::warn!(tenant = %cb.tenant, stream = cb.stream, callback = id, "blocking callback was not acknowledged in time; stream failed");
            }
        });
    }
}
