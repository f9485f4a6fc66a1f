//! Reconciliation: npud's books against the device's own count of streams in use.
//!
//! npud's books hold what it knows of: its own streams (runtime, held, pooled, draining)
//! and what interposed processes report having created. A device can hold more: a program
//! started without the interposer, a vendor library's internal streams. Where the vendor
//! reports a device-wide free count (AscendCL's aclrtGetStreamAvailableNum in npud's own
//! context; all processes share one budget), the difference is *untracked*:
//!
//! `untracked = max(0, (hardware limit − vendor free) − (npud's own + holders' created))`
//!
//! and the ledger hands out only `capacity − booked − untracked`. Grants are not streams:
//! a holder's count is what it says it created (capped at its grant), never its grant, so a
//! process that asked for 70 and made 61 does not hide 9 of someone else's.
//!
//! The measurement errs toward withholding, never toward handing out twice: a holder's
//! streams count only once it reports them (a batch in flight looks untracked for a
//! moment); the books are read before and after the device and the lower count is used,
//! and what leaves them between then and the measurement's use counts as still on the
//! device (`Ledger::lowered`); when a holder's reported count falls (it destroyed
//! streams, reset the device or went away) the difference counts as untracked at once,
//! and a measurement follows at once to say whether the device still holds them. A fall
//! of the measured figure that the books do not explain (a process destroyed streams and
//! has not said so yet) is held for
//! `budget.untracked_hold` before it is believed (`hold`).

mod hold;

pub use hold::{FallHold, Sample};

use super::Daemon;
use std::sync::Arc;
use std::time::Duration;

/// How often the books are compared with the device (at least every second).
pub const RECONCILE_PERIOD: Duration = Duration::from_millis(500);

/// What reconciliation keeps of one device between measurements.
#[derive(Debug, Clone)]
pub struct Drift {
    /// The falls of its untracked count not yet believed.
    hold: FallHold,
    /// Whether drift (streams outside the books) was logged and has not gone yet.
    logged: bool,
    /// Since when every measurement found streams outside the books beyond what holders
    /// may have made since their last report; None when the last did not.
    seen: Option<std::time::Instant>,
}

/// How long streams outside the books must stay before npud logs them as drift. A
/// process's own exit and its streams made since its last report show there for a
/// measurement or two (the device frees an exiting process's streams a moment after its
/// connection to npud closes); a program npud cannot see stays. Withholding them does
/// not wait for this: only the log line does.
pub const DRIFT_NOTICE: Duration = Duration::from_secs(1);

impl Drift {
    fn new(hold: Duration) -> Drift {
        Drift { hold: FallHold::new(hold), logged: false, seen: None }
    }

    /// Whether drift is to be logged as there after a measurement found `after` streams
    /// outside the books, of which holders' streams in flight may be `in_flight`; with
    /// whether it was before.
    fn notice(&mut self, after: u32, in_flight: u32, now: std::time::Instant) -> (bool, bool) {
        self.seen = match after > in_flight {
            true => Some(self.seen.unwrap_or(now)),
            false => None,
        };
        let logs = match self.logged {
            true => after > 0,
            false => self.seen.is_some_and(|since| now.duration_since(since) >= DRIFT_NOTICE),
        };
        (std::mem::replace(&mut self.logged, logs), logs)
    }
}

/// Compares books and devices every [`RECONCILE_PERIOD`], and at once when asked
/// (`Admission::measure_soon`: a creation the device refused, streams that left the books),
/// until the daemon stops. Returns at once where the backend has no
/// device-wide count.
pub async fn run(daemon: Arc<Daemon>) {
    if !daemon.backend.reports_device_free() {
        return;
    }
    let devices: Vec<u32> = daemon.devices().iter().map(|d| d.id).collect();
    let mut tick = tokio::time::interval(RECONCILE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Only an end still ahead: one a failed measurement left behind waits for the tick.
        let now = std::time::Instant::now();
        let hold_ends = daemon.held_falls_end().filter(|end| *end > now).map(tokio::time::Instant::from_std);
        // Every device at the tick and when a held fall ends; else those asked for.
        let every = tokio::select! {
            _ = tick.tick() => true,
            () = daemon.admission.measurement_wanted() => false,
            // A held fall is believed when its hold is over, not at the next tick after.
            () = tokio::time::sleep_until(hold_ends.unwrap_or_else(tokio::time::Instant::now)), if hold_ends.is_some() => true,
        };
        let wanted = daemon.admission.round_started();
        for &device in devices.iter().filter(|d| every || wanted.contains(d)) {
            if let Some((measured, lowered)) = daemon.untracked_now(device).await {
                daemon.apply_untracked(device, measured, lowered).await;
                daemon.metrics.measured(device);
            }
        }
        daemon.admission.round_finished();
    }
}

impl Daemon {
    /// What the device holds beyond npud's books right now (below zero when the books
    /// hold more), with the books it was measured against; None where the vendor gives no
    /// device-wide count or the call failed. With it, the ledger's `lowered` when the books
    /// were last read (see [`Admission::set_untracked`](crate::policy::admission::Admission::set_untracked)).
    ///
    /// The books are read before and after the device, and the lower count is used: a
    /// holder that went away while the device was read counts as gone from the books (its
    /// streams, if the device still held them, are then outside them), one that reported
    /// new streams counts as not yet booked. Either way the measurement withholds, never
    /// hands out twice, and a measurement racing changes to the books is still used: one
    /// dropped whenever any raced it withheld what every exit in a busy hand-off left
    /// behind until a quiet moment (a crowd's second wave waited a second for it).
    pub async fn untracked_now(self: &Arc<Self>, device: u32) -> Option<(Sample, u64)> {
        let desc = self.device(device).ok()?.clone();
        let (before, _) = self.booked(device, &desc);
        let backend = Arc::clone(&self.backend);
        let free = tokio::task::spawn_blocking(move || backend.device_free(device)).await.ok()??.ok()?;
        let (after, lowered) = self.booked(device, &desc);
        let booked = before.min(after);
        let on_device = i64::from(desc.hardware_limit) - i64::from(free);
        Some((Sample { untracked: on_device - booked, booked }, lowered))
    }

    /// npud's books on `device`: its own streams on the hardware (registered ones, not
    /// grants still being filled; pooled, draining and the runtime's) and what its holders
    /// report created; with the ledger's `lowered`, read first, so a fall of the books
    /// between the two counts twice (withholding), never not at all.
    fn booked(&self, device: u32, desc: &crate::backend::DeviceDesc) -> (i64, u64) {
        let view = self.admission.view(device);
        let registered = self.registry.device_streams(device);
        let own =
            i64::from(desc.runtime_streams) + i64::from(registered) + i64::from(view.pooled) + i64::from(view.draining);
        let natives = i64::from(self.natives.created_on(device)) + i64::from(self.natives.pending_on(device));
        (own + natives, view.lowered)
    }

    /// Of `device`'s untracked streams, those counted only because a fall of the device's
    /// count is held (as of the last measurement).
    pub fn untracked_held(&self, device: u32) -> u32 {
        let drift = self.drift.lock().unwrap_or_else(|e| e.into_inner());
        drift.get(&device).map_or(0, |d| u32::try_from(d.hold.held().max(0)).unwrap_or(u32::MAX))
    }

    /// When the first held fall on any device is to be believed.
    fn held_falls_end(&self) -> Option<std::time::Instant> {
        let drift = self.drift.lock().unwrap_or_else(|e| e.into_inner());
        drift.values().filter_map(|d| d.hold.next_end()).min()
    }

    /// Books what was measured for `device` (with the falls still held), logging when
    /// drift appears and goes. What a holder's going away withholds until this measurement
    /// is not drift, and a measured difference is logged only once it has lasted
    /// [`DRIFT_NOTICE`] beyond holders' streams in flight, so an ordinary process exit
    /// logs nothing.
    pub async fn apply_untracked(&self, device: u32, measured: Sample, lowered: u64) {
        let before = self.admission.untracked(device);
        let mut drift = {
            let drift = self.drift.lock().unwrap_or_else(|e| e.into_inner());
            drift.get(&device).cloned().unwrap_or_else(|| Drift::new(self.config.budget.untracked_hold))
        };
        let counted = drift.hold.apply(measured, std::time::Instant::now());
        self.admission.set_untracked(device, counted, lowered).await;
        self.natives.measured(device);
        if drift.hold.held() > 0 {
            tracing::debug!(
                device,
                measured = measured.untracked,
                held = drift.hold.held(),
                "a fall of untracked streams the books do not explain is held"
            );
        }
        let after = self.admission.untracked(device);
        // Holders' grants they have not reported as created yet may be streams made since
        // their last report: withheld all the same, but logged as drift only beyond them.
        let in_flight = self.natives.granted_on(device).saturating_sub(self.natives.created_on(device));
        let (logged, logs) = drift.notice(after, in_flight, std::time::Instant::now());
        self.drift.lock().unwrap_or_else(|e| e.into_inner()).insert(device, drift);
        match (after, logged) {
            (0, true) => tracing::info!(device, "npud's books match the device again"),
            (0, false) => {}
            (n, false) if !logs => {
                tracing::debug!(device, untracked = n, in_flight, "streams outside the books, not yet drift")
            }
            (n, false) => tracing::warn!(
                device,
                untracked = n,
                "the device holds streams npud's books do not: they are not handed out"
            ),
            (n, true) if n != before => {
                tracing::debug!(device, before, untracked = n, "streams outside npud's books changed")
            }
            (_, true) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DRIFT_NOTICE, Drift};
    use std::time::{Duration, Instant};

    /// (was logged, logs) after each of `seen`, measurements `step` apart: (untracked, in flight).
    fn notices(seen: &[(u32, u32)], step: Duration) -> Vec<(bool, bool)> {
        let (mut drift, start) = (Drift::new(Duration::ZERO), Instant::now());
        seen.iter()
            .enumerate()
            .map(|(i, &(after, flight))| drift.notice(after, flight, start + step * i as u32))
            .collect()
    }

    #[test]
    fn streams_outside_the_books_for_one_measurement_are_not_drift() {
        let half = DRIFT_NOTICE / 2;
        assert!(notices(&[(6, 0), (0, 0), (2, 0), (0, 0)], half).iter().all(|n| *n == (false, false)));
    }

    #[test]
    fn streams_that_stay_are_drift_until_they_go() {
        let half = DRIFT_NOTICE / 2;
        let seen = notices(&[(50, 0), (50, 0), (50, 0), (40, 0), (0, 0)], half);
        assert_eq!(seen, [(false, false), (false, false), (false, true), (true, true), (true, false)]);
    }

    #[test]
    fn holders_streams_in_flight_are_not_drift_however_long() {
        let seen = notices(&[(100, 100), (100, 100), (100, 100), (101, 100), (101, 100), (101, 100)], DRIFT_NOTICE / 2);
        assert_eq!(
            seen.iter().filter(|(_, logs)| *logs).count(),
            1,
            "only the one beyond them, once it stayed: {seen:?}"
        );
        assert_eq!(seen[5], (false, true));
    }
}
