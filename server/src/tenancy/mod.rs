//! Who is calling: peer credentials and containers (identity), the HTTP/2 `:authority`
//! rewriter that keeps Unix-socket peers honest (authority), tenant resolution (auth),
//! per-uid connection slots (connections) and per-tenant request rates (limits).

pub mod auth;
pub mod authority;
pub mod cgroup;
pub mod conn;
pub mod connections;
pub mod hpack;
pub mod identity;
pub mod inflight;
pub mod limits;
pub mod liveness;
pub mod replies;
