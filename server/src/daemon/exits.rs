//! Ends the budget sessions whose process has exited while the connection stays open.
//!
//! A session is its connection, and a connection normally closes with its process. It
//! does not when another process holds the descriptor too: a child made without the C
//! library's fork handlers (a raw `clone`, glibc's `_Fork`), or a process the descriptor
//! was passed to. The device frees what the exited process held, so its books must go
//! too, or npud withholds streams nobody holds for as long as that other process lives,
//! and the other process could go on asking in the dead one's name.

use crate::config::defaults as d;
use crate::daemon::Daemon;
use crate::tenancy::liveness::{self, Liveness};
use std::sync::Arc;

/// Asks, every [`d::PROCESS_CHECK`], whether each budget session's process still runs,
/// and ends the sessions of those that have exited.
pub async fn watch(daemon: Arc<Daemon>) {
    let mut tick = tokio::time::interval(d::PROCESS_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if daemon.natives().connections() == 0 {
            continue;
        }
        // A system call or two per session: off the runtime's threads, so thousands of
        // sessions never hold up a call being answered.
        let d = Arc::clone(&daemon);
        let ended =
            tokio::task::spawn_blocking(move || d.natives().end_exited(|pid| liveness::of(pid) == Liveness::Exited))
                .await;
        for (id, pid) in ended.unwrap_or_default() {
            tracing::warn!(
                id,
                pid,
                "budget session ended: its process exited while another process kept its connection open"
            );
        }
    }
}
