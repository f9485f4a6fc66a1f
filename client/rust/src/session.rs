//! A connection with its session: every session-scoped call carries `npud-session`, and a
//! background task renews the lease while the client lives.

use crate::connect::{Target, channel};
use crate::error::{Error, Result};
use crate::handles::Device;
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
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self { name: None, lease: None, renew: true, token: std::env::var("NPUD_TOKEN").ok().filter(|t| !t.is_empty()) }
    }
}

/// What every call carries: the session it belongs to and the caller's bearer token.
#[derive(Clone, Default)]
pub struct Headers {
    session: Option<MetadataValue<Ascii>>,
    token: Option<MetadataValue<Ascii>>,
}

impl Headers {
    /// Headers with just a bearer token (for calls outside a session).
    pub fn with_token(token: Option<&str>) -> Result<Headers> {
        let token = token.map(|t| MetadataValue::try_from(format!("Bearer {t}"))).transpose().map_err(|_| {
            Error::Connect { target: "token".into(), message: "the bearer token is not valid header text".into() }
        })?;
        Ok(Headers { session: None, token })
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
        Ok(req)
    }
}

pub type SessionChannel = InterceptedService<Channel, Headers>;

/// A channel for calls outside a session (device list, status, admin), with the token.
pub async fn unscoped(target: &Target, token: Option<&str>) -> Result<SessionChannel> {
    Ok(InterceptedService::new(channel(target).await?, Headers::with_token(token)?))
}

struct Inner {
    channel: Channel,
    header: Headers,
    session: u64,
    tenant: String,
    epoch: u32,
    lease: Duration,
    attached: bool,
    renewer: Option<tokio::task::AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(r) = self.renewer.take() {
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
        f.debug_struct("Client").field("session", &self.inner.session).field("tenant", &self.inner.tenant).finish()
    }
}

impl Client {
    /// Connects and opens an anonymous session whose lease is renewed in the background.
    pub async fn connect(target: Target) -> Result<Client> {
        Self::connect_with(target, SessionOptions::default()).await
    }

    pub async fn connect_with(target: Target, options: SessionOptions) -> Result<Client> {
        let channel = channel(&target).await?;
        let lease_ms = options.lease.map_or(0, |l| l.as_millis().min(u128::from(u32::MAX)) as u32);
        let mut header = Headers::with_token(options.token.as_deref())?;
        let opened = SessionServiceClient::new(InterceptedService::new(channel.clone(), header.clone()))
            .open(pb::OpenSessionRequest { name: options.name.clone().unwrap_or_default(), lease_ms })
            .await?
            .into_inner();
        let value = MetadataValue::try_from(opened.session.to_string())
            .map_err(|e| Error::Connect { target: format!("{target:?}"), message: e.to_string() })?;
        header.session = Some(value);
        let lease = Duration::from_millis(u64::from(opened.lease_ms));
        let renewer = options
            .renew
            .then(|| spawn_renewer(InterceptedService::new(channel.clone(), header.clone()), opened.session, lease));
        Ok(Client {
            inner: Arc::new(Inner {
                channel,
                header,
                session: opened.session,
                tenant: opened.tenant,
                epoch: opened.epoch,
                lease,
                attached: opened.attached,
                renewer,
            }),
        })
    }

    pub fn session_id(&self) -> u64 {
        self.inner.session
    }
    pub fn tenant(&self) -> &str {
        &self.inner.tenant
    }
    pub fn epoch(&self) -> u32 {
        self.inner.epoch
    }
    pub fn lease(&self) -> Duration {
        self.inner.lease
    }
    /// True when a named session already existed and this client attached to it.
    pub fn attached(&self) -> bool {
        self.inner.attached
    }

    fn scoped(&self) -> SessionChannel {
        InterceptedService::new(self.inner.channel.clone(), self.inner.header.clone())
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
        Ok(self.device_service().list(pb::ListDevicesRequest {}).await?.into_inner().devices)
    }

    pub fn device(&self, id: u32) -> Device {
        Device::new(self.clone(), id)
    }

    pub async fn status(&self) -> Result<pb::StatusResponse> {
        Ok(self.admin().status(pb::StatusRequest {}).await?.into_inner())
    }

    /// Renews the lease now.
    pub async fn renew(&self) -> Result<Duration> {
        let r = self.sessions().renew(pb::RenewSessionRequest { session: self.inner.session }).await?.into_inner();
        Ok(Duration::from_millis(u64::from(r.lease_ms)))
    }

    /// Closes the session: everything it holds is synchronised and reclaimed.
    pub async fn close(&self) -> Result<(u32, u32)> {
        let r = self
            .sessions()
            .close(pb::CloseSessionRequest { session: self.inner.session, name: String::new() })
            .await?
            .into_inner();
        Ok((r.streams_released, r.events_released))
    }

    /// Routes a stream's host callbacks to this session, labelled with `thread_id`.
    pub async fn subscribe(&self, thread_id: u64, stream: u64) -> Result<()> {
        self.reports().subscribe(pb::SubscribeRequest { thread_id, stream }).await?;
        Ok(())
    }

    pub async fn unsubscribe(&self, thread_id: u64, stream: u64) -> Result<()> {
        self.reports().unsubscribe(pb::UnsubscribeRequest { thread_id, stream }).await?;
        Ok(())
    }

    /// Enqueues a host callback; it is reported when all earlier work on the stream is done.
    pub async fn launch_callback(&self, stream: u64, user_data: Vec<u8>, blocking: bool) -> Result<u64> {
        let block_type =
            if blocking { pb::CallbackBlockType::CallbackBlock } else { pb::CallbackBlockType::CallbackNoBlock };
        let r = self
            .reports()
            .launch_callback(pb::LaunchCallbackRequest { stream, user_data, block_type: block_type as i32 })
            .await?;
        Ok(r.into_inner().callback_id)
    }

    /// The session's reports as an async stream, resuming after `after_sequence`.
    pub async fn report_stream(&self, after_sequence: u64) -> Result<tonic::Streaming<pb::Report>> {
        Ok(self.reports().reports(pb::ReportsRequest { after_sequence }).await?.into_inner())
    }

    /// Pull form (process_report): waits up to `timeout` for reports for `thread_id`.
    pub async fn process_reports(&self, thread_id: u64, timeout: Duration, max: u32) -> Result<Vec<pb::Report>> {
        let timeout_ms = timeout.as_millis().min(u128::from(u32::MAX)) as u32;
        let r = self.reports().process(pb::ProcessReportRequest { thread_id, timeout_ms, max_reports: max }).await?;
        Ok(r.into_inner().reports)
    }

    /// Acknowledges a callback (releases a BLOCK callback's stream).
    pub async fn ack(&self, callback_id: u64) -> Result<()> {
        self.reports().ack(pb::AckRequest { callback_id }).await?;
        Ok(())
    }
}

fn spawn_renewer(channel: SessionChannel, session: u64, lease: Duration) -> tokio::task::AbortHandle {
    let period = (lease / 3).max(Duration::from_millis(20));
    tokio::spawn(async move {
        let mut client = SessionServiceClient::new(channel);
        loop {
            tokio::time::sleep(period).await;
            match client.renew(pb::RenewSessionRequest { session }).await {
                Ok(_) => {}
                Err(s) if matches!(s.code(), tonic::Code::NotFound | tonic::Code::FailedPrecondition) => {
                    tracing::warn!(session, "session is gone ({}); lease renewal stops", s.message());
                    return;
                }
                Err(s) => tracing::debug!(session, "lease renewal failed: {}", s.message()),
            }
        }
    })
    .abort_handle()
}
