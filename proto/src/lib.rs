//! The `npud.v1` gRPC contract, generated from `proto/npud/v1/*.proto`.
//!
//! Kept in its own crate so the daemon, the Rust client and the CLI share one definition,
//! and so clients in other languages can be generated from the same files.

/// Generated messages and services of package `npud.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("npud.v1");
}

/// Encoded `FileDescriptorSet` of the whole package, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/npud_descriptor.bin"));

/// Metadata key that names the session of a session-scoped call.
pub const SESSION_METADATA_KEY: &str = "npud-session";
