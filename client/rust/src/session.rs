//! A connection with its session: every session-scoped call carries `npud-session`, and a
//! background task renews the lease while the client lives.

use crate::connect::{Target, channel};
use crate::error::{Error, Result};
use npud_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient, device_service_client::DeviceServiceClient,
    event_service_client::EventServiceClient, report_service_client::ReportServiceClient,
    session_service_client::SessionServiceClient, stream_service_client::StreamServiceClient,
};
use std::sync::Arc;
use std::time::Duration;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Attach to (or create) the tenant's session of this name; it outlives the process
    /// until its lease lapses or it is closed.
    pub name: Option<String>,
    /// Requested lease; None takes the daemon's default.
    pub lease: Option<Duration>,
    /// Renew the lease in the background while this client lives.
    pub renew: bool,
    /// Bearer token for TCP daemons that authenticate by token (default: `$NPUD_TOKEN`).
    pub token: Option<String>,
    /// On Kubernetes, the allocation token the device plugin mounted into the container
    /// (default: the contents of the file `$NPUD_ALLOCATION`); it binds the container to
    /// its allocation, which becomes its quota.
    pub allocation: Option<String>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            name: None,
            lease: None,
            renew: true,
            token: std::env::var("NPUD_TOKEN").ok().filter(|t| !t.is_empty()),
            allocation: std::env::var_os("NPUD_ALLOCATION")
                .and_then(|p| npud_proto::read_allocation_token(std::path::Path::new(&p))),
        }
    }
}

/// What every call carries: the session it belongs to and the caller's bearer token.
#[derive(Clone, Default)]
pub struct Headers {
    session: Option<MetadataValue<Ascii>>,
    token: Option<MetadataValue<Ascii>>,
    allocation: Option<MetadataValue<Ascii>>,
}

impl Headers {
    /// Headers with just a bearer token (for calls outside a session).
    pub fn with_token(token: Option<&str>) -> Result<Headers> {
        let token = token.map(|t| MetadataValue::try_from(format!("Bearer {t}"))).transpose().map_err(|_| {
            Error::Connect { target: "token".into(), message: "the bearer token is not valid header text".into() }
        })?;
        Ok(Headers { session: None, token, allocation: None })
    }

    /// The same headers presenting a device-plugin allocation token at session open.
    pub fn with_allocation(mut self, allocation: Option<&str>) -> Result<Headers> {
        self.allocation = allocation.map(MetadataValue::try_from).transpose().map_err(|_| Error::Connect {
            target: "allocation".into(),
            message: "the allocation token is not valid header text".into(),
        })?;
        Ok(self)
    }
}

impl tonic::service::Interceptor for Headers {
    fn call(&mut self, mut req: tonic::Request<()>) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        if let Some(s) = &self.session {
            req.metadata_mut().insert(npud_proto::SESSION_METADATA_KEY, s.clone());
        }
        if let Some(t) = &self.token {
            req.metadata_mut().insert("authorization", t.clone());
        }
        // Only a session open reads it (the one call without a session here): calls in a
        // session do not carry it.
        if let (None, Some(a)) = (&self.session, &self.allocation) {
            req.metadata_mut().insert(npud_proto::ALLOCATION_METADATA_KEY, a.clone());
        }
        Ok(req)
    }
}

pub type SessionChannel = InterceptedService<Channel, Headers>;

/// A channel for calls outside a session (device list, status, admin), with the token.
pub async fn unscoped(target: &Target, token: Option<&str>) -> Result<SessionChannel> {
    Ok(InterceptedService::new(channel(target).await?, Headers::with_token(token)?))
}

/// The session a client currently speaks for. It changes when the library re-opens a
/// session on its own (after a daemon restart or a lapsed lease).
struct Current {
    session: u64,
    epoch: u32,
    header: Headers,
}

struct Inner {
    channel: Channel,
    current: std::sync::RwLock<Current>,
    tenant: String,
    lease: Duration,
    attached: bool,
    name: Option<String>,
    lease_ms: u32,
    reopened: std::sync::atomic::AtomicU64,
    renewer: std::sync::Mutex<Option<tokio::task::AbortHandle>>,
    /// Re-open a lost session on our own (renewing clients only: one that lets its lease
    /// lapse on purpose wants to see it gone).
    heals: bool,
    /// Set by `close()`: a session we closed is not re-opened behind the caller's back.
    closed: std::sync::atomic::AtomicBool,
    /// One re-open at a time: the renewer and failed calls may notice the loss together.
    reopening: tokio::sync::Mutex<()>,
}

impl Inner {
    fn current(&self) -> std::sync::RwLockReadGuard<'_, Current> {
        self.current.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(r) = self.renewer.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            r.abort();
        }
    }
}

/// A connected client with an open session. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("session", &self.session_id()).field("tenant", &self.inner.tenant).finish()
    }
}

fn session_header(mut base: Headers, session: u64) -> Result<Headers> {
    let value = MetadataValue::try_from(session.to_string())
        .map_err(|e| Error::Connect { target: "session".into(), message: e.to_string() })?;
    base.session = Some(value);
    Ok(base)
}

impl Client {
    /// Connects and opens an anonymous session whose lease is renewed in the background.
    pub async fn connect(target: Target) -> Result<Client> {
        Self::connect_with(target, SessionOptions::default()).await
    }

    pub async fn connect_with(target: Target, options: SessionOptions) -> Result<Client> {
        let channel = channel(&target).await?;
        let lease_ms = options.lease.map_or(0, |l| l.as_millis().min(u128::from(u32::MAX)) as u32);
        let base = Headers::with_token(options.token.as_deref())?.with_allocation(options.allocation.as_deref())?;
        let opened = SessionServiceClient::new(InterceptedService::new(channel.clone(), base.clone()))
            .open(pb::OpenSessionRequest { name: options.name.clone().unwrap_or_default(), lease_ms })
            .await?
            .into_inner();
        let header = session_header(base, opened.session)?;
        let inner = Arc::new(Inner {
            channel,
            current: std::sync::RwLock::new(Current { session: opened.session, epoch: opened.epoch, header }),
            tenant: opened.tenant,
            lease: Duration::from_millis(u64::from(opened.lease_ms)),
            attached: opened.attached,
            name: options.name.clone(),
            lease_ms,
            reopened: std::sync::atomic::AtomicU64::new(0),
            renewer: std::sync::Mutex::new(None),
            heals: options.renew,
            closed: std::sync::atomic::AtomicBool::new(false),
            reopening: tokio::sync::Mutex::new(()),
        });
        if options.renew {
            let handle = spawn_renewer(Arc::downgrade(&inner));
            *inner.renewer.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        }
        Ok(Client { inner })
    }

    pub fn session_id(&self) -> u64 {
        self.inner.current().session
    }
    pub fn tenant(&self) -> &str {
        &self.inner.tenant
    }
    /// Boot epoch of the daemon this session belongs to.
    pub fn epoch(&self) -> u32 {
        self.inner.current().epoch
    }

    /// How many times the library has opened a new session on its own because the old
    /// one was lost (the daemon restarted, or the lease lapsed while the process slept).
    pub fn sessions_reopened(&self) -> u64 {
        self.inner.reopened.load(std::sync::atomic::Ordering::Relaxed)
    }
    pub fn lease(&self) -> Duration {
        self.inner.lease
    }
    /// True when a named session already existed and this client attached to it.
    pub fn attached(&self) -> bool {
        self.inner.attached
    }

    /// The connection itself, for other gRPC services on the same channel (health).
    pub fn channel(&self) -> Channel {
        self.inner.channel.clone()
    }

    fn scoped(&self) -> SessionChannel {
        InterceptedService::new(self.inner.channel.clone(), self.inner.current().header.clone())
    }

    pub fn streams(&self) -> StreamServiceClient<SessionChannel> {
        StreamServiceClient::new(self.scoped())
    }
    pub fn events(&self) -> EventServiceClient<SessionChannel> {
        EventServiceClient::new(self.scoped())
    }
    pub fn reports(&self) -> ReportServiceClient<SessionChannel> {
        ReportServiceClient::new(self.scoped())
    }
    pub fn device_service(&self) -> DeviceServiceClient<SessionChannel> {
        DeviceServiceClient::new(self.scoped())
    }
    pub fn sessions(&self) -> SessionServiceClient<SessionChannel> {
        SessionServiceClient::new(self.scoped())
    }
    pub fn admin(&self) -> AdminServiceClient<SessionChannel> {
        AdminServiceClient::new(self.scoped())
    }

    pub async fn devices(&self) -> Result<Vec<pb::Device>> {
        Ok(self.call(pb::ListDevicesRequest {}, |c, r| async move { c.device_service().list(r).await }).await?.devices)
    }

    pub async fn status(&self) -> Result<pb::StatusResponse> {
        self.call(pb::StatusRequest {}, |c, r| async move { c.admin().status(r).await }).await
    }

    /// Runs a session-scoped call. When the daemon answers that the session the call
    /// carried is gone (its lease lapsed while this process was stalled, or the daemon
    /// restarted), a renewing client opens a new session and runs the call once more, as
    /// the renewer would at its next tick. What the lost session held stays lost: its
    /// handles answer NOT_FOUND or STALE_EPOCH.
    pub(crate) async fn call<R, T, F, Fut>(&self, request: R, f: F) -> Result<T>
    where
        R: Clone,
        F: Fn(Client, R) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let used = self.session_id();
        match f(self.clone(), request.clone()).await {
            Ok(r) => Ok(r.into_inner()),
            Err(s) if self.healed(&s, used).await => Ok(f(self.clone(), request).await?.into_inner()),
            Err(s) => Err(s.into()),
        }
    }

    /// True when `status` (from a call made with session `used`) meant the session is
    /// lost and a new one is now current.
    async fn healed(&self, status: &tonic::Status, used: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.inner.heals || self.inner.closed.load(Relaxed) {
            return false;
        }
        let reason = Error::from(status.clone()).reason();
        if !matches!(reason, Some(pb::ErrorReason::UnknownSession | pb::ErrorReason::StaleEpoch)) {
            return false;
        }
        // STALE_EPOCH may be about a handle in the request while the session is fine:
        // ask about the session itself before giving it up.
        if reason == Some(pb::ErrorReason::StaleEpoch) && self.session_id() == used {
            let mut sessions = SessionServiceClient::new(self.scoped());
            match sessions.renew(pb::RenewSessionRequest { session: used }).await {
                Err(s) if session_lost(&s) => {}
                _ => return false,
            }
        }
        reopen(&self.inner, used).await
    }

    /// Renews the lease now.
    pub async fn renew(&self) -> Result<Duration> {
        let r = self.sessions().renew(pb::RenewSessionRequest { session: self.session_id() }).await?.into_inner();
        Ok(Duration::from_millis(u64::from(r.lease_ms)))
    }

    /// Closes the session: everything it holds is synchronised and reclaimed.
    pub async fn close(&self) -> Result<(u32, u32)> {
        self.inner.closed.store(true, std::sync::atomic::Ordering::Relaxed);
        let r = self
            .sessions()
            .close(pb::CloseSessionRequest { session: self.session_id(), name: String::new() })
            .await?
            .into_inner();
        Ok((r.streams_released, r.events_released))
    }

    /// Routes a stream's host callbacks to this session, labelled with `thread_id`.
    pub async fn subscribe(&self, thread_id: u64, stream: u64) -> Result<()> {
        self.call(pb::SubscribeRequest { thread_id, stream }, |c, r| async move { c.reports().subscribe(r).await })
            .await?;
        Ok(())
    }

    pub async fn unsubscribe(&self, thread_id: u64, stream: u64) -> Result<()> {
        self.call(pb::UnsubscribeRequest { thread_id, stream }, |c, r| async move { c.reports().unsubscribe(r).await })
            .await?;
        Ok(())
    }

    /// Enqueues a host callback; it is reported when all earlier work on the stream is done.
    pub async fn launch_callback(&self, stream: u64, user_data: Vec<u8>, blocking: bool) -> Result<u64> {
        let block_type =
            if blocking { pb::CallbackBlockType::CallbackBlock } else { pb::CallbackBlockType::CallbackNoBlock };
        let req = pb::LaunchCallbackRequest { stream, user_data, block_type: block_type as i32 };
        let r = self.call(req, |c, r| async move { c.reports().launch_callback(r).await }).await?;
        Ok(r.callback_id)
    }

    /// The session's reports as an async stream, resuming after `after_sequence`.
    pub async fn report_stream(&self, after_sequence: u64) -> Result<tonic::Streaming<pb::Report>> {
        self.call(pb::ReportsRequest { after_sequence }, |c, r| async move { c.reports().reports(r).await }).await
    }

    /// Pull form (process_report): waits up to `timeout` for reports for `thread_id`.
    pub async fn process_reports(&self, thread_id: u64, timeout: Duration, max: u32) -> Result<Vec<pb::Report>> {
        let timeout_ms = timeout.as_millis().min(u128::from(u32::MAX)) as u32;
        let req = pb::ProcessReportRequest { thread_id, timeout_ms, max_reports: max };
        Ok(self.call(req, |c, r| async move { c.reports().process(r).await }).await?.reports)
    }

    /// Acknowledges a callback (releases a BLOCK callback's stream).
    pub async fn ack(&self, callback_id: u64) -> Result<()> {
        self.call(pb::AckRequest { callback_id }, |c, r| async move { c.reports().ack(r).await }).await?;
        Ok(())
    }
}

/// Renews the lease every third of it. When the session is lost (the daemon restarted:
/// STALE_EPOCH; or the lease lapsed: NOT_FOUND) it opens a new one, so a long-lived
/// client recovers by itself; old handles then answer STALE_EPOCH or NOT_FOUND.
fn spawn_renewer(inner: std::sync::Weak<Inner>) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        loop {
            let Some(me) = inner.upgrade() else { return };
            let period = (me.lease / 3).max(Duration::from_millis(20));
            drop(me);
            tokio::time::sleep(period).await;
            let Some(me) = inner.upgrade() else { return };
            if me.closed.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            let (session, header) = {
                let c = me.current();
                (c.session, c.header.clone())
            };
            let mut client = SessionServiceClient::new(InterceptedService::new(me.channel.clone(), header));
            match client.renew(pb::RenewSessionRequest { session }).await {
                Err(s) if session_lost(&s) => {
                    tracing::debug!(session, "lease renewal failed: {}", s.message());
                    reopen(&me, session).await;
                }
                Err(s) => tracing::debug!(session, "lease renewal failed: {}", s.message()),
                Ok(_) => {}
            }
        }
    })
    .abort_handle()
}

/// A renewal answer that means the session no longer exists (lapsed: NOT_FOUND; from an
/// earlier daemon: FAILED_PRECONDITION).
fn session_lost(s: &tonic::Status) -> bool {
    matches!(s.code(), tonic::Code::NotFound | tonic::Code::FailedPrecondition)
}

/// Opens a new session in place of `lost`, unless another task already did; true when a
/// session other than `lost` is current afterwards.
async fn reopen(inner: &Inner, lost: u64) -> bool {
    let _one_at_a_time = inner.reopening.lock().await;
    if inner.current().session != lost {
        return true;
    }
    let header = inner.current().header.clone();
    let mut base = header.clone();
    base.session = None;
    let mut client = SessionServiceClient::new(InterceptedService::new(inner.channel.clone(), base.clone()));
    let open = pb::OpenSessionRequest { name: inner.name.clone().unwrap_or_default(), lease_ms: inner.lease_ms };
    match client.open(open).await {
        Ok(opened) => {
            let opened = opened.into_inner();
            let Ok(header) = session_header(base, opened.session) else { return false };
            *inner.current.write().unwrap_or_else(|e| e.into_inner()) =
                Current { session: opened.session, epoch: opened.epoch, header };
            inner.reopened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(old = lost, new = opened.session, "the session was lost; opened a new one");
            true
        }
        Err(s) => {
            tracing::debug!("re-opening the session failed: {}", s.message());
            false
        }
    }
}
