//! npud: a daemon that owns accelerator devices and their hardware stream budget, and
//! serves stream, event, synchronisation and callback requests to many tenants over gRPC.
//!
//! The crate is a library so tests and benchmarks can run the daemon in-process; the
//! `npud` binary is a thin wrapper around [`serve::serve`]. Modules are layered: each uses
//! only those listed before it (docs/architecture.md has the map).

pub mod api;
pub mod backend;
pub mod config;
pub mod daemon;
pub mod error;
pub mod files;
pub mod kubernetes;
pub mod native;
pub mod observe;
pub mod policy;
pub mod registry;
pub mod serve;
pub mod tenancy;
pub mod types;

pub use config::Config;
pub use daemon::Daemon;
pub use serve::serve;
