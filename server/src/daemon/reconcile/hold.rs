//! Which falls in a measured `untracked` count npud believes at once, and which it holds.
//!
//! A measurement is a snapshot of two things that change at different moments: the device's
//! own count, at once, and npud's books, when a holder reports. An interposed process that
//! destroys streams it keeps the grant for says so only when its device has been quiet for
//! a while (up to about a quarter of a second later, off the program's path). A measurement
//! taken in between sees the device hold fewer streams than the books say the holder
//! created, and `untracked` falls by what the process destroyed. Believing that fall would
//! hand those streams out again: the process may create them again within its grant
//! without asking, and a program outside npud still holds what `untracked` counted.
//!
//! So a fall is believed at once only as far as something explains it: npud's books rose by
//! as much (a holder reported streams that were already on the device, a declaration
//! claimed untracked ones), or they fell earlier by as much and the device is catching up
//! (a process went away and the driver freed its streams a moment later). The rest of a
//! fall is held for [`FallHold`]'s `hold` and then believed: a program outside npud did let
//! go of them. The other way round, a report that lowers the books while the device holds
//! as many as before is the other half of a held fall and ends that hold at once; what no
//! held fall matches is owed by the device for as long. Rises are always believed at once.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Held falls kept per device at most; past it the two oldest merge (the merged one is held
/// as long as the newer of them, which only withholds longer).
const MAX_HELD: usize = 64;

/// One measurement of a device: what it holds beyond the books, and the books themselves
/// (npud's own streams and what its holders report created).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub untracked: i64,
    pub booked: i64,
}

/// Amounts that wait for their other half, each with when it was measured. Newest last.
#[derive(Debug, Clone, Default)]
struct Waiting(VecDeque<(Instant, i64)>);

impl Waiting {
    fn expire(&mut self, now: Instant, hold: Duration) {
        self.0.retain(|(since, _)| now.saturating_duration_since(*since) < hold);
    }

    /// When the oldest amount's hold is over.
    fn first_end(&self, hold: Duration) -> Option<Instant> {
        self.0.front().map(|(since, _)| *since + hold)
    }

    fn total(&self) -> i64 {
        self.0.iter().map(|(_, n)| *n).fold(0, i64::saturating_add)
    }

    fn push(&mut self, now: Instant, n: i64) {
        if self.0.len() >= MAX_HELD
            && let Some((_, oldest)) = self.0.pop_front()
            && let Some((_, next)) = self.0.front_mut()
        {
            *next = next.saturating_add(oldest);
        }
        self.0.push_back((now, n));
    }

    /// Takes up to `n` off, the newest first (an other half comes at most a moment after
    /// the first); returns what was not there.
    fn take(&mut self, mut n: i64) -> i64 {
        while n > 0 {
            let Some((_, last)) = self.0.back_mut() else { break };
            let taken = (*last).min(n);
            *last -= taken;
            n -= taken;
            if *last == 0 {
                self.0.pop_back();
            }
        }
        n
    }
}

/// The falls of one device's `untracked` still held, and the last measurement booked.
#[derive(Debug, Clone)]
pub struct FallHold {
    hold: Duration,
    last: Option<Sample>,
    /// Falls of the device the books have not explained yet: held.
    held: Waiting,
    /// Falls of the books the device has not matched yet: a fall of the device up to these
    /// is believed at once.
    owed: Waiting,
}

impl FallHold {
    /// `hold` zero believes every fall at once.
    pub fn new(hold: Duration) -> Self {
        Self { hold, last: None, held: Waiting::default(), owed: Waiting::default() }
    }

    /// What to book as untracked for `sample`, measured at `now`: the measured figure
    /// plus every unexplained fall still held.
    pub fn apply(&mut self, sample: Sample, now: Instant) -> i64 {
        if self.hold.is_zero() {
            return sample.untracked;
        }
        self.held.expire(now, self.hold);
        self.owed.expire(now, self.hold);
        if let Some(last) = self.last {
            let change = sample.untracked.saturating_sub(last.untracked);
            let books_rose = sample.booked.saturating_sub(last.booked);
            if change < 0 {
                let fall = change.saturating_neg();
                let unexplained = self.owed.take(fall - books_rose.clamp(0, fall));
                if unexplained > 0 {
                    self.held.push(now, unexplained);
                }
            } else if change > 0 && books_rose < 0 {
                let unmatched = self.held.take(change.min(books_rose.saturating_neg()));
                if unmatched > 0 {
                    self.owed.push(now, unmatched);
                }
            }
        }
        self.last = Some(sample);
        sample.untracked.saturating_add(self.held())
    }

    /// What is held now.
    pub fn held(&self) -> i64 {
        self.held.total()
    }

    /// When the oldest held fall is believed, if any is held: a measurement then lets it go.
    pub fn next_end(&self) -> Option<Instant> {
        self.held.first_end(self.hold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = Duration::from_secs(2);

    fn s(untracked: i64, booked: i64) -> Sample {
        Sample { untracked, booked }
    }

    #[test]
    fn a_destroy_measured_before_its_report_is_held_and_the_report_ends_the_hold() {
        let (mut h, t) = (FallHold::new(HOLD), Instant::now());
        assert_eq!(h.apply(s(100, 60), t), 100);
        // The process destroyed 30 and has not said so: the device holds 30 fewer.
        assert_eq!(h.apply(s(70, 60), t + Duration::from_millis(100)), 100, "the fall is held");
        // Its report lowers the books by 30; the device is unchanged.
        assert_eq!(h.apply(s(100, 30), t + Duration::from_millis(300)), 100, "and not counted twice");
        assert_eq!(h.held(), 0);
    }

    #[test]
    fn a_fall_nothing_explains_is_believed_once_the_hold_is_over() {
        let (mut h, t) = (FallHold::new(HOLD), Instant::now());
        h.apply(s(100, 60), t);
        assert_eq!(h.apply(s(60, 60), t + Duration::from_millis(500)), 100);
        assert_eq!(h.next_end(), Some(t + Duration::from_millis(2500)));
        assert_eq!(h.apply(s(60, 60), t + Duration::from_millis(2400)), 100, "still within the hold");
        assert_eq!(h.apply(s(60, 60), t + Duration::from_millis(2600)), 60, "a program outside npud let go");
    }

    #[test]
    fn a_fall_the_books_explain_is_believed_at_once() {
        let (mut h, t) = (FallHold::new(HOLD), Instant::now());
        // A batch in flight looked untracked; its report moved it onto the books.
        h.apply(s(161, 0), t);
        assert_eq!(h.apply(s(100, 61), t + Duration::from_millis(10)), 100);
        // A holder that went away: the device and the books fell together.
        assert_eq!(h.apply(s(100, 0), t + Duration::from_millis(20)), 100);
        // Part explained (a report of 10), part not (20 destroyed unreported elsewhere).
        assert_eq!(h.apply(s(70, 10), t + Duration::from_millis(30)), 90);
    }

    #[test]
    fn a_device_that_frees_a_leaving_process_s_streams_late_is_believed_at_once() {
        let (mut h, t) = (FallHold::new(HOLD), Instant::now());
        h.apply(s(100, 61), t);
        // The process went away: npud's books fell, the driver still counts its streams.
        assert_eq!(h.apply(s(161, 0), t + Duration::from_millis(10)), 161);
        // Then the driver frees them.
        assert_eq!(h.apply(s(100, 0), t + Duration::from_millis(40)), 100);
        assert_eq!(h.held(), 0);
    }

    #[test]
    fn rises_are_believed_at_once_and_zero_hold_believes_everything() {
        let (mut h, t) = (FallHold::new(HOLD), Instant::now());
        h.apply(s(0, 0), t);
        assert_eq!(h.apply(s(500, 0), t), 500);
        let mut off = FallHold::new(Duration::ZERO);
        off.apply(s(500, 0), t);
        assert_eq!(off.apply(s(100, 0), t), 100);
    }

    #[test]
    fn what_is_held_stays_bounded_and_never_shrinks_by_merging() {
        let (mut h, t) = (FallHold::new(HOLD), Instant::now());
        h.apply(s(10_000, 0), t);
        for i in 1..=200 {
            h.apply(s(10_000 - i, 0), t + Duration::from_millis(i as u64));
        }
        assert!(h.held.0.len() <= MAX_HELD);
        assert_eq!(h.held(), 200, "every unexplained stream is still held");
    }
}
