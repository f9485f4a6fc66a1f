//! The budget wire: interposed processes (`libnpud_preload.so`) ask npud before the vendor
//! creates a stream in their own context. This is only the transport: `wire` frames the
//! calls of one connection; the session they drive is `crate::daemon::budget` (shared with
//! the BudgetService gRPC stream), and the books of what native holders hold are
//! `crate::policy::natives`.

pub mod wire;
