//! Each holder's capture counter: the streams npud granted it for graph captures (asks
//! marked `capture`: a capture's Begin stream, each stream that joins it, each cascade
//! stream, the open runtime's rules, asked for by the interposer before the device makes
//! them) that it still holds. A `captured` claim is evidence of streams such a capture
//! made beyond what was asked for; it is accepted only up to this counter, and each
//! accepted stream uses it up. So a session that began no capture claims nothing, a
//! capture whose streams went back is no longer live to claim for (each release lowers
//! the counter: `Natives::remove`), and no claim books more than the
//! captures npud admitted can have grown by once more.

use super::Natives;

impl Natives {
    /// `n` streams were granted to holder `id` on `device` for a capture.
    pub fn capture_granted(&self, id: u64, device: u32, n: u32) {
        if let Some(h) = self.lock().get_mut(&id) {
            let room = h.capture_room.entry(device).or_insert(0);
            *room = room.saturating_add(n);
        }
    }

    /// What a claim of holder `id` on `device` may still book.
    pub fn capture_room(&self, id: u64, device: u32) -> u32 {
        self.lock().get(&id).and_then(|h| h.capture_room.get(&device).copied()).unwrap_or(0)
    }

    /// `n` streams of a claim were booked: they use the counter up.
    pub fn capture_matched(&self, id: u64, device: u32, n: u32) {
        if let Some(room) = self.lock().get_mut(&id).and_then(|h| h.capture_room.get_mut(&device)) {
            *room = room.saturating_sub(n);
        }
    }
}
