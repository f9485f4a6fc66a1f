//! Which devices reconciliation is to measure, and when: every device at its tick, and at
//! once only the devices something asked for.
//!
//! Measuring every device whenever any one was asked for cost a node of eight busy devices
//! eight driver queries per exit or report: in issue 59's crowd of 40 processes on each of
//! eight NPUs, 169 rounds of 8 in 7 s, half of npud's CPU. A device is now measured at once
//! only when it was asked for, and an ask waits for a round that measured its device.

use super::Admission;
use std::collections::BTreeSet;
use std::time::Duration;

/// Reconciliation's rounds, started and finished, with the devices asked for since the
/// last round began: an ask can wait for a round that began after its booking and measured
/// its device.
#[derive(Debug, Clone, Default)]
pub(super) struct Rounds {
    started: u64,
    finished: u64,
    wanted: BTreeSet<u32>,
}

impl Rounds {
    /// Records an ask for `device`: the number of the last round begun, above which the
    /// first round measures it.
    fn ask(&mut self, device: u32) -> u64 {
        self.wanted.insert(device);
        self.started
    }

    /// Begins a round: the devices asked for since the last one began.
    fn begin(&mut self) -> BTreeSet<u32> {
        self.started += 1;
        std::mem::take(&mut self.wanted)
    }
}

impl Admission {
    /// Asks for `device` to be measured at once, where the backend counts the device's
    /// streams; returns whether a measurement will come.
    pub(super) fn measure_soon(&self, device: u32) -> bool {
        self.measure_soon_from(device).is_some()
    }

    /// [`Admission::measure_soon`], returning the number of the last round begun when the
    /// ask was recorded: the first round numbered above it measures `device`. Recorded and
    /// read in one step, so a round cannot begin between the two and leave the device out.
    fn measure_soon_from(&self, device: u32) -> Option<u64> {
        if !self.backend.reports_device_free() {
            return None;
        }
        let mut started = 0;
        self.rounds.send_modify(|r| started = r.ask(device));
        self.remeasure.notify_one();
        Some(started)
    }

    /// Waits, at most `bound`, until a measurement of `device` that began after now has
    /// been applied, asking for one at once: for a holder that may not wait for room (it
    /// holds another device), so its ask is judged on books its own report corrected. It
    /// waits on no other holder, so two such holders cannot wait for each other. Returns at
    /// once where the backend does not count the device's streams. Cancellation-safe: it
    /// changes nothing but the ask for a measurement.
    pub async fn measured_since_now(&self, device: u32, bound: Duration) {
        let mut rounds = self.rounds.subscribe();
        if let Some(started) = self.measure_soon_from(device) {
            let _ = tokio::time::timeout(bound, rounds.wait_for(|r| r.finished > started)).await;
        }
    }

    /// Reconciliation begins a round of measurements (what was booked before now is in
    /// it): the devices asked for since the last one began, which it is to measure.
    pub fn round_started(&self) -> BTreeSet<u32> {
        let mut wanted = BTreeSet::new();
        self.rounds.send_modify(|r| wanted = r.begin());
        wanted
    }

    /// Reconciliation has applied the round it last began.
    pub fn round_finished(&self) {
        self.rounds.send_modify(|r| r.finished = r.started);
    }

    /// Until a device is asked for (`Admission::measure_soon`).
    pub async fn measurement_wanted(&self) {
        self.remeasure.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::Rounds;

    /// A round measures the devices asked for since the last began, each once; an ask
    /// recorded after a round began waits for a round numbered above it, which measures it.
    #[test]
    fn a_round_takes_the_devices_asked_for_since_the_last_began() {
        let mut r = Rounds::default();
        assert_eq!(r.ask(2), 0);
        assert_eq!(r.ask(0), 0);
        assert_eq!(r.ask(2), 0);
        assert_eq!(r.begin().into_iter().collect::<Vec<_>>(), [0, 2]);
        assert_eq!(r.ask(1), 1, "asked during round 1: round 2 measures it");
        assert_eq!(r.begin().into_iter().collect::<Vec<_>>(), [1]);
        assert!(r.begin().is_empty(), "nothing asked since");
    }
}
