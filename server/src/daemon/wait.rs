//! Waiting on the device with the caller's timeout, shared by every operation that syncs.

use crate::backend::WaitKind;
use crate::daemon::Daemon;
use crate::error::backend_error;
use crate::error::{NpudError, NpudResult, Reason};
use crate::types::Tenant;
use std::time::Duration;

/// Longest wait a single call may ask for (0 means this, bounded by the gRPC deadline).
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

impl Daemon {
    /// Awaits a device wait with an optional timeout, reporting expiry with the vendor's code.
    /// The wait holds one of the tenant's places for blocking calls until it ends or is
    /// cancelled; none left is TOO_MANY_BLOCKING_CALLS.
    pub(crate) async fn wait(
        &self,
        tenant: &Tenant,
        wait: crate::backend::Wait,
        timeout_ms: u32,
        kind: WaitKind,
        what: &str,
    ) -> NpudResult<()> {
        let Some(_place) = self.blocking.enter(tenant) else {
            return Err(NpudError::new(
                Reason::TooManyBlockingCalls,
                format!(
                    "tenant {tenant} has {} blocking calls in flight, the most allowed (limits.max_blocking_calls)",
                    self.blocking.max()
                ),
            ));
        };
        let limit = if timeout_ms == 0 { MAX_WAIT } else { Duration::from_millis(u64::from(timeout_ms)) };
        match tokio::time::timeout(limit, wait).await {
            Ok(result) => result.map_err(|e| backend_error(self.backend.name(), e)),
            Err(_) => Err(NpudError::new(
                Reason::SyncTimeout,
                format!("{what} did not finish within {timeout_ms} ms; the work keeps running"),
            )
            .with_native(self.backend.name(), self.backend.timeout_code(kind))),
        }
    }
}
