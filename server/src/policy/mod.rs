//! The stream budget's rules, free of transport and of the daemon's other books: one
//! ledger per device (ledger), grants whole or not at all and the warm pool (admission),
//! tenants' quotas and the state file they persist in (quota, state), processes that create
//! streams themselves (natives) and device-plugin allocations (allocations).

pub mod admission;
pub mod allocations;
pub mod ledger;
pub mod natives;
pub mod quota;
pub mod slots;
pub mod state;
