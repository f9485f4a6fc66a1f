//! A crowd's timeline (issue 33): when each process was spawned, when its streams all
//! existed, when it failed, when it exited — from outside, as a user watching the crowd
//! sees it. The summary says where a crowd's makespan goes: spawning, the first wave's
//! start-ups, the hand-offs from a release to a waiting process, and the holds.

use super::micros;
use serde_json::json;
use std::time::Duration;

/// One start-up of one process, timed from the crowd's start.
#[derive(Debug, Clone, Copy)]
pub struct Life {
    pub spawned: Duration,
    /// When the program said `ok`: every stream it asked for exists.
    pub ready: Option<Duration>,
    /// When the program said `fail` (a creation refused by the device).
    pub failed: Option<Duration>,
    pub exited: Duration,
}

/// Where a crowd's time went.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub last_spawned: Duration,
    /// Processes ready before any ready process exited: the first wave.
    pub first_wave: usize,
    pub first_wave_last_ready: Duration,
    /// The first exit of a process that had been ready (the first hold ending).
    pub first_release: Option<Duration>,
    /// Processes ready after a release: they waited (or were restarted) for room.
    pub later: usize,
    /// For each later process, its `ok` minus the latest exit of a ready process before
    /// it: a release handed over to a waiting process, its streams created.
    pub handoff: Vec<Duration>,
    pub failures: usize,
    pub last_failure: Option<Duration>,
    pub makespan: Duration,
}

impl Summary {
    pub fn of(lives: &[Life]) -> Summary {
        let mut releases: Vec<Duration> = lives.iter().filter(|l| l.ready.is_some()).map(|l| l.exited).collect();
        releases.sort();
        let first_release = releases.first().copied();
        let mut s = Summary {
            last_spawned: lives.iter().map(|l| l.spawned).max().unwrap_or_default(),
            first_release,
            failures: lives.iter().filter(|l| l.failed.is_some()).count(),
            last_failure: lives.iter().filter_map(|l| l.failed).max(),
            makespan: lives.iter().map(|l| l.exited).max().unwrap_or_default(),
            ..Summary::default()
        };
        for ready in lives.iter().filter_map(|l| l.ready) {
            match first_release {
                Some(first) if ready > first => {
                    s.later += 1;
                    let before = releases.partition_point(|r| *r < ready);
                    s.handoff.push(ready - releases[before - 1]);
                }
                _ => {
                    s.first_wave += 1;
                    s.first_wave_last_ready = s.first_wave_last_ready.max(ready);
                }
            }
        }
        s.handoff.sort();
        s
    }

    fn handoff_at(&self, p: f64) -> Option<Duration> {
        let last = self.handoff.len().checked_sub(1)?;
        Some(self.handoff[((p / 100.0) * last as f64).round() as usize])
    }

    /// One line for the bench's table, milliseconds from the crowd's start.
    pub fn line(&self) -> String {
        let ms = |d: Duration| format!("{:.0}", d.as_secs_f64() * 1e3);
        let opt = |d: Option<Duration>| d.map_or("-".into(), ms);
        format!(
            "spawned by {}; {} ready by {}; first release {}; {} later, hand-off p50 {} max {}; {} failed (last at {}); done {}",
            ms(self.last_spawned),
            self.first_wave,
            ms(self.first_wave_last_ready),
            opt(self.first_release),
            self.later,
            opt(self.handoff_at(50.0)),
            opt(self.handoff_at(100.0)),
            self.failures,
            opt(self.last_failure),
            ms(self.makespan)
        )
    }

    pub fn to_json(&self) -> serde_json::Value {
        let ms = |d: Duration| micros(d) / 1e3;
        json!({
            "last_spawned_ms": ms(self.last_spawned),
            "first_wave": self.first_wave,
            "first_wave_last_ready_ms": ms(self.first_wave_last_ready),
            "first_release_ms": self.first_release.map(ms),
            "later": self.later,
            "handoff_p50_ms": self.handoff_at(50.0).map(ms),
            "handoff_max_ms": self.handoff_at(100.0).map(ms),
            "failures": self.failures,
            "last_failure_ms": self.last_failure.map(ms),
            "makespan_ms": ms(self.makespan),
        })
    }
}

/// Every start-up of a crowd, in milliseconds, for a profile to plot.
pub fn lives_json(lives: &[Life]) -> serde_json::Value {
    let ms = |d: Duration| (micros(d) / 1e3 * 10.0).round() / 10.0;
    lives
        .iter()
        .map(|l| {
            json!({
                "spawned": ms(l.spawned), "ready": l.ready.map(ms), "failed": l.failed.map(ms), "exited": ms(l.exited),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn life(spawned: u64, ready: Option<u64>, exited: u64) -> Life {
        let ms = Duration::from_millis;
        Life { spawned: ms(spawned), ready: ready.map(ms), failed: None, exited: ms(exited) }
    }

    #[test]
    fn a_process_ready_after_a_release_counts_the_hand_off_from_the_latest_one() {
        let lives = [
            life(0, Some(10), 1010),
            life(1, Some(12), 1020),
            // Waited: ready 15 ms after the second release.
            life(2, Some(1035), 2035),
            Life { failed: Some(Duration::from_millis(5)), ..life(3, None, 6) },
        ];
        let s = Summary::of(&lives);
        assert_eq!((s.first_wave, s.later, s.failures), (2, 1, 1));
        assert_eq!(s.first_wave_last_ready, Duration::from_millis(12));
        assert_eq!(s.first_release, Some(Duration::from_millis(1010)));
        assert_eq!(s.handoff, vec![Duration::from_millis(15)]);
        assert_eq!(s.makespan, Duration::from_millis(2035));
        // A failed process's exit is no release: nothing was held.
        assert_eq!(s.last_failure, Some(Duration::from_millis(5)));
    }
}
