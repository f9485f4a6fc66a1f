//! `npu-sim`: a simulated Ascend-like device runtime.
//!
//! It is npud's embedded default device and the oracle its tests run against, so it
//! models what the vendor documents (shared/seeds): a hardware stream budget per product
//! profile that fails with 207008 when exhausted, contexts that cost a default stream,
//! FIFO streams sharing a fixed number of execution lanes with priority when lanes are
//! short, events whose record replaces the pending one, stream waits bound to the record
//! current when they were enqueued, blocking and non-blocking host callbacks, and faults.

mod device;
mod engine;
pub mod error;
/// The flag vocabulary lives with the wire contract; re-exported for the simulator's users.
pub use npud_proto::flags;
mod exit;
pub mod fleet;
pub mod fork;
mod pidfd;
pub mod profile;
pub mod shared;
pub mod watch;

pub use device::{DeviceCounts, ForkHold, ReportSink, SimDevice, SimOptions};
pub use engine::{EventId, EventState, FailureMode, SimReport, StreamId, StreamStatus, Waiter};
pub use error::{ErrorKind, SimError, SimResult, codes};
pub use profile::{PROFILES, Profile};

#[cfg(test)]
mod tests;
