//! Typed Rust client for npud.
//!
//! ```no_run
//! # async fn demo() -> npud_client::Result<()> {
//! let client = npud_client::Client::connect(npud_client::Target::default_socket()).await?;
//! let device = client.device(0);
//! let streams = device.create_streams(4, npud_client::StreamOptions::default()).await?;
//! streams[0].delay(std::time::Duration::from_millis(5)).await?;
//! streams[0].sync().await?;
//! # Ok(()) }
//! ```
//! Streams and events are destroyed when dropped (inside a Tokio runtime); everything a
//! client holds is also reclaimed by the daemon when its session's lease lapses.

mod connect;
mod error;
mod handles;
mod session;

pub use connect::{Target, TlsOptions, channel, socket_target};
pub use error::{Error, Result};
pub use handles::{Device, Event, EventOptions, Stream, StreamOptions};
pub use npud_proto::v1 as proto;
pub use session::{Client, Headers, SessionChannel, SessionOptions, unscoped};
