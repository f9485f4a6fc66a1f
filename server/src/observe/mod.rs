//! What the daemon tells about itself: accumulated metrics and device health state. Both
//! are handles the daemon makes once and passes to whatever updates them.

pub mod health;
pub mod heap;
pub mod metrics;
