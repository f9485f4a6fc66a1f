//! Events a process holds per device, and when to ask npud for more. Pure bookkeeping, as
//! `books.rs` is for streams.
//!
//! Events matter where the part's event table is small (1023 on inference parts), and a
//! program makes them one at a time on its hot path, so the process asks for a chunk at a
//! time and keeps up to a chunk of unused grant: a program that makes and destroys events
//! in a loop asks npud nothing after its first. Asks never wait (npud refuses at once when
//! the table or the tenant's `max_events` is spent, as the vendor would), so events cannot
//! deadlock processes either.

use crate::Map;

/// Events asked for at once, and the unused grant a process keeps.
pub const EVENT_CHUNK: u32 = 32;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventDevice {
    pub granted: u32,
    pub used: u32,
}

#[derive(Debug, Default)]
pub struct EventBooks {
    devices: Map<u32, EventDevice>,
    /// Live events: handle → device.
    live: Map<usize, u32>,
}

impl EventBooks {
    pub fn device(&self, device: u32) -> EventDevice {
        self.devices.get(&device).copied().unwrap_or_default()
    }

    /// Before making one event: `None` when the grant covers it (counted now), else how
    /// many to ask npud for.
    pub fn plan(&mut self, device: u32) -> Option<u32> {
        let d = self.devices.entry(device).or_default();
        if d.used < d.granted {
            d.used += 1;
            return None;
        }
        Some(EVENT_CHUNK)
    }

    /// npud granted `count` for one event about to be made.
    pub fn granted(&mut self, device: u32, count: u32) {
        let d = self.devices.entry(device).or_default();
        d.granted = d.granted.saturating_add(count);
        d.used = d.used.saturating_add(1);
    }

    /// The vendor did not make the event the budget was counted for.
    pub fn not_created(&mut self, device: u32) {
        let d = self.devices.entry(device).or_default();
        d.used = d.used.saturating_sub(1);
    }

    pub fn created(&mut self, event: usize, device: u32) {
        self.live.insert(event, device);
    }

    /// Forgets a destroyed event; its device, if it was one of ours.
    pub fn destroyed(&mut self, event: usize) -> Option<u32> {
        let device = self.live.remove(&event)?;
        let d = self.devices.entry(device).or_default();
        d.used = d.used.saturating_sub(1);
        Some(device)
    }

    /// Takes the unused grant beyond one chunk off the books: how much to give back.
    pub fn surplus(&mut self, device: u32) -> u32 {
        let Some(d) = self.devices.get_mut(&device) else { return 0 };
        let back = d.granted.saturating_sub(d.used.saturating_add(EVENT_CHUNK));
        d.granted -= back;
        back
    }

    /// The device was reset: its events are gone with it. Returns the whole grant to give
    /// back.
    pub fn reset(&mut self, device: u32) -> u32 {
        self.live.retain(|_, d| *d != device);
        self.devices.remove(&device).map_or(0, |d| d.granted)
    }

    /// Whether the process holds an event anywhere.
    pub fn holds_any(&self) -> bool {
        self.devices.values().any(|d| d.used > 0)
    }

    /// Devices where the process holds events, with how many, for a declaration on a
    /// (re)opened connection; as [`crate::books::Books::declaring`], the grant the last
    /// connection had becomes what is used in the same step.
    pub fn declaring(&mut self) -> Vec<(u32, u32)> {
        for d in self.devices.values_mut() {
            d.granted = d.used;
        }
        self.devices.iter().filter(|(_, d)| d.used > 0).map(|(&id, d)| (id, d.used)).collect()
    }

    /// After npud counted a declaration of `accepted` events: the grant is what it counted.
    pub fn declared(&mut self, device: u32, accepted: u32) {
        let d = self.devices.entry(device).or_default();
        d.granted = accepted;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_ask_covers_a_chunk_and_a_loop_of_make_and_destroy_asks_nothing_more() {
        let mut b = EventBooks::default();
        assert_eq!(b.plan(0), Some(EVENT_CHUNK));
        b.granted(0, EVENT_CHUNK);
        b.created(0x10, 0);
        for i in 0..1000 {
            assert_eq!(b.plan(0), None, "iteration {i} is covered");
            b.created(0x20, 0);
            assert_eq!(b.destroyed(0x20), Some(0));
        }
        assert_eq!(b.device(0), EventDevice { granted: EVENT_CHUNK, used: 1 });
        assert_eq!(b.surplus(0), 0, "up to a chunk of unused grant is kept");
    }

    #[test]
    fn a_declaration_drops_the_old_connections_grant_so_the_next_event_asks_the_new_one() {
        let mut b = EventBooks::default();
        b.granted(1, EVENT_CHUNK);
        b.created(0x10, 1);
        assert_eq!(b.declaring(), [(1, 1)]);
        assert_eq!(b.device(1), EventDevice { granted: 1, used: 1 });
        assert_eq!(b.plan(1), Some(EVENT_CHUNK), "made after the snapshot: asked, so declared");
    }

    #[test]
    fn surplus_beyond_a_chunk_goes_back_and_a_reset_returns_everything() {
        let mut b = EventBooks::default();
        for i in 0..100 {
            if let Some(n) = b.plan(1) {
                b.granted(1, n);
            }
            b.created(i, 1);
        }
        assert_eq!(b.device(1), EventDevice { granted: 128, used: 100 });
        for i in 0..90 {
            b.destroyed(i);
        }
        assert_eq!(b.surplus(1), 128 - 10 - EVENT_CHUNK);
        assert_eq!(b.device(1).granted, 10 + EVENT_CHUNK);
        assert_eq!(b.reset(1), 10 + EVENT_CHUNK);
        assert_eq!(b.destroyed(95), None, "the reset device's events are forgotten");
        assert_eq!(b.device(1), EventDevice::default());
    }

    #[test]
    fn a_failed_make_gives_its_count_back() {
        let mut b = EventBooks::default();
        let ask = b.plan(0).expect("ask");
        b.granted(0, ask);
        b.not_created(0);
        assert_eq!(b.device(0).used, 0);
        assert_eq!(b.plan(0), None);
    }
}
