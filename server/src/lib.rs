//! npud: a daemon that owns accelerator devices and their hardware stream budget, and
//! serves stream, event, synchronisation and callback requests to many tenants over gRPC.
//!
//! The crate is a library so tests and benchmarks can run the daemon in-process; the
//! `npud` binary is a thin wrapper around [`server::serve`].

pub mod admission;
pub mod api;
pub mod auth;
pub mod authority;
pub mod backend;
pub mod cli;
pub mod config;
pub mod connections;
pub mod daemon;
pub mod error;
pub mod handle;
pub mod health;
pub mod identity;
pub mod kubernetes;
pub mod ledger;
pub mod limits;
pub mod metrics;
pub mod native;
pub mod ops;
pub mod quota;
pub mod registry;
pub mod reports;
pub mod server;
pub mod state;
pub mod systemd;

pub use config::Config;
pub use daemon::Daemon;
pub use server::serve;
