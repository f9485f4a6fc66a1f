//! What each npuctl command does; one file per command group. Here, what the groups share:
//! the connection context, `--session`, and durations.

pub mod device;
pub mod event;
pub mod run;
pub mod session;
pub mod status;
pub mod stream;
pub mod tenant;

use crate::output::Output;
use clap::Args;
use npud_client::{Client, SessionChannel, SessionOptions, Target};
use npud_proto::v1::{admin_service_client::AdminServiceClient, session_service_client::SessionServiceClient};

pub struct Ctx {
    pub target: Target,
    pub output: Output,
    pub token: Option<String>,
}

impl Ctx {
    /// A channel for calls outside a session; it carries the bearer token if one is set.
    pub async fn channel(&self) -> npud_client::Result<SessionChannel> {
        npud_client::unscoped(&self.target, self.token.as_deref()).await
    }

    /// Attaches to (or opens) the named session. npuctl exits right after the call, so it
    /// does not renew: the daemon's named-session lease keeps the session alive.
    pub async fn session(&self, name: &str) -> npud_client::Result<Client> {
        let options = SessionOptions {
            name: Some(name.to_string()),
            renew: false,
            token: self.token.clone(),
            ..Default::default()
        };
        Client::connect_with(self.target.clone(), options).await
    }

    /// A session for calls that only need the caller's identity.
    pub async fn default_session(&self) -> npud_client::Result<Client> {
        self.session("npuctl").await
    }

    pub async fn sessions(&self) -> npud_client::Result<SessionServiceClient<SessionChannel>> {
        Ok(SessionServiceClient::new(self.channel().await?))
    }

    pub async fn admin(&self) -> npud_client::Result<AdminServiceClient<SessionChannel>> {
        Ok(AdminServiceClient::new(self.channel().await?))
    }
}

pub fn flag_names(flags: u32) -> Vec<&'static str> {
    npud_proto::flags::stream_flag_names(flags)
}

/// The named session a command works in; streams made by one npuctl call stay in it for
/// the next until its lease runs out or it is closed.
#[derive(Debug, Args, Clone)]
pub struct SessionArg {
    /// The session to work in (streams and events stay in it between calls).
    #[arg(long, value_name = "NAME", default_value = "npuctl", value_parser = session_name)]
    pub session: String,
}

/// An empty name would open an unnamed session, whose streams go when this call ends:
/// not what `--session` asks for. The daemon checks the rest of the name.
fn session_name(s: &str) -> Result<String, String> {
    match s.is_empty() {
        true => Err("a session needs a name (the default is npuctl)".to_string()),
        false => Ok(s.to_string()),
    }
}

/// A duration argument: `0`, or a span like `500ms`, `30s` or `2m`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    if s == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 500ms or 30s: {e}"))
}
