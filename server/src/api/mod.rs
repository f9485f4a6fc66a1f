//! Thin tonic services over the daemon's domain operations. They authenticate the peer,
//! find the session, convert messages, and nothing else.

mod admin;
mod budget;
mod convert;
mod devices;
mod events;
mod reports;
mod sessions;
pub mod status;
mod streams;

use crate::daemon::Daemon;
use crate::error::{NpudError, Reason};
use crate::tenancy::identity::Peer;
use crate::types::Caller;
use npud_proto::v1::{
    admin_service_server::AdminServiceServer, budget_service_server::BudgetServiceServer,
    device_service_server::DeviceServiceServer, event_service_server::EventServiceServer,
    report_service_server::ReportServiceServer, session_service_server::SessionServiceServer,
    stream_service_server::StreamServiceServer,
};
use std::sync::Arc;
use tonic::{Request, Status};

/// Every service holds the daemon; cloning is an Arc bump.
#[derive(Clone)]
pub struct Api {
    daemon: Arc<Daemon>,
}

/// The largest request a client may send.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

impl Api {
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }

    /// The request's caller, resolved once by [`Authenticate`] before the handler ran.
    /// A request that reached a handler without one is refused: identity fails closed.
    fn caller<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        req.extensions()
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| NpudError::new(Reason::NoIdentity, "the request was not authenticated").into())
    }

    /// The caller and the live session the request names in `npud-session`.
    fn session<T>(&self, req: &Request<T>) -> Result<(Caller, u64), Status> {
        let caller = self.caller(req)?;
        let id = session_id(req)?;
        self.daemon.registry().touch(&caller, id)?;
        Ok((caller, id))
    }

    /// The caller and the session id the request names, without checking the session:
    /// for operations whose daemon call checks and renews it itself (once, next to the
    /// work it guards).
    fn caller_and_session<T>(&self, req: &Request<T>) -> Result<(Caller, u64), Status> {
        Ok((self.caller(req)?, session_id(req)?))
    }

    fn admin<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        let caller = self.caller(req)?;
        crate::daemon::admin::require_admin(&caller)?;
        Ok(caller)
    }
}

/// Resolves every request's caller before its handler runs (a tonic interceptor on each
/// npud service) and puts it in the request's extensions: the kernel's word on the Unix
/// socket, the client certificate or bearer token on TCP, then the tenant's request rate.
/// Handlers read it with `Api::caller`, so none can skip or repeat the resolution.
#[derive(Clone)]
pub struct Authenticate {
    daemon: Arc<Daemon>,
}

impl tonic::service::Interceptor for Authenticate {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let caller = self.resolve(&req)?;
        req.extensions_mut().insert(caller);
        Ok(req)
    }
}

impl Authenticate {
    fn resolve<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        let caller = match unix_peer(req) {
            Some(peer) => self.daemon.resolve_peer(peer)?,
            None => {
                let names: Vec<String> = req
                    .peer_certs()
                    .and_then(|certs| certs.first().map(|c| crate::tenancy::auth::certificate_names(c)))
                    .unwrap_or_default();
                let token = bearer_token(req);
                let tls = req
                    .extensions()
                    .get::<tonic::transport::server::TlsConnectInfo<tonic::transport::server::TcpConnectInfo>>()
                    .is_some();
                if tls || token.is_some() {
                    self.daemon.resolve_remote(&names, token)?
                } else if req.extensions().get::<tonic::transport::server::TcpConnectInfo>().is_some() {
                    // Plain TCP (--insecure-tcp) without a token: `tcp-anonymous`.
                    self.daemon.resolve_anonymous_tcp()?
                } else {
                    return Err(NpudError::new(Reason::NoIdentity, "the connection carries no peer identity").into());
                }
            }
        };
        Ok(caller)
    }
}

fn session_id<T>(req: &Request<T>) -> Result<u64, Status> {
    let value = req.metadata().get(npud_proto::SESSION_METADATA_KEY).ok_or_else(|| {
        Status::from(NpudError::new(Reason::UnknownSession, "this call needs a session: set the npud-session metadata"))
    })?;
    value.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()).ok_or_else(|| {
        NpudError::new(Reason::UnknownSession, "npud-session metadata is not a decimal session id").into()
    })
}

fn unix_peer<T>(req: &Request<T>) -> Option<&Peer> {
    req.extensions().get::<crate::tenancy::identity::Connected>().map(|c| &*c.peer)
}

/// `authorization: Bearer <token>`, bounded so a huge header is not hashed.
fn bearer_token<T>(req: &Request<T>) -> Option<&str> {
    let value = req.metadata().get("authorization")?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer "))?.trim();
    (!token.is_empty() && token.len() <= 4096).then_some(token)
}

/// Fully qualified names of the npud services, for health reporting.
pub const SERVICE_NAMES: &[&str] = &[
    "",
    "npud.v1.DeviceService",
    "npud.v1.SessionService",
    "npud.v1.StreamService",
    "npud.v1.EventService",
    "npud.v1.ReportService",
    "npud.v1.AdminService",
    "npud.v1.BudgetService",
];

/// All npud.v1 services as a tonic router.
pub fn router(daemon: Arc<Daemon>) -> tonic::service::Routes {
    use tonic::service::interceptor::InterceptedService as Auth;
    let auth = Authenticate { daemon: Arc::clone(&daemon) };
    let api = Api::new(daemon);
    let max = MAX_MESSAGE_BYTES;
    tonic::service::Routes::new(Auth::new(
        DeviceServiceServer::new(api.clone()).max_decoding_message_size(max),
        auth.clone(),
    ))
    .add_service(Auth::new(SessionServiceServer::new(api.clone()).max_decoding_message_size(max), auth.clone()))
    .add_service(Auth::new(StreamServiceServer::new(api.clone()).max_decoding_message_size(max), auth.clone()))
    .add_service(Auth::new(EventServiceServer::new(api.clone()).max_decoding_message_size(max), auth.clone()))
    .add_service(Auth::new(ReportServiceServer::new(api.clone()).max_decoding_message_size(max), auth.clone()))
    .add_service(Auth::new(AdminServiceServer::new(api.clone()).max_decoding_message_size(max), auth.clone()))
    .add_service(Auth::new(BudgetServiceServer::new(api).max_decoding_message_size(npud_proto::BUDGET_MAX_FRAME), auth))
}
