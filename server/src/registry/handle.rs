//! Opaque handles: `[epoch:12][kind:3][serial:38]`, 53 bits in all.
//!
//! The epoch changes at every daemon start, so a handle kept across a restart is
//! recognised and answered with a clear STALE_EPOCH instead of hitting a new resource.
//! Handles stay below 2^53 so they survive JSON tools that read numbers as doubles (jq,
//! JavaScript): `npuctl -o json ... | jq .handle` prints the handle exactly, and clients
//! keep them as plain integers. The price: 4,095 epochs (a handle from two or more
//! restarts ago is told from a live one with probability 4094/4095, from the previous
//! instance always) and 2^38 serials per run (years of minting at the daemon's peak rate).

use crate::error::{NpudError, NpudResult, Reason};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Stream = 1,
    Event = 2,
    Session = 3,
    Callback = 4,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Stream => "stream",
            Kind::Event => "event",
            Kind::Session => "session",
            Kind::Callback => "callback",
        }
    }
}

const SERIAL_BITS: u32 = 38;
const SERIAL_MASK: u64 = (1 << SERIAL_BITS) - 1;
const KIND_BITS: u32 = 3;
const EPOCH_SHIFT: u32 = SERIAL_BITS + KIND_BITS;
/// Epochs are 1..=EPOCH_MASK.
pub const EPOCH_MASK: u16 = (1 << 12) - 1;
/// Every handle is below this (2^53, the largest exact integer of an IEEE double).
pub const HANDLE_LIMIT: u64 = 1 << (EPOCH_SHIFT + 12);

#[derive(Debug)]
pub struct Minter {
    epoch: u16,
    next: AtomicU64,
}

impl Minter {
    /// `epoch` is taken modulo the epoch space (see [`new_epoch`]).
    pub fn new(epoch: u16) -> Self {
        Self { epoch: (epoch & EPOCH_MASK).max(1), next: AtomicU64::new(1) }
    }

    pub fn epoch(&self) -> u16 {
        self.epoch
    }

    pub fn mint(&self, kind: Kind) -> u64 {
        let serial = self.next.fetch_add(1, Ordering::Relaxed) & SERIAL_MASK;
        (u64::from(self.epoch) << EPOCH_SHIFT) | ((kind as u64) << SERIAL_BITS) | serial
    }

    /// Checks that `handle` is of this daemon instance and of `kind`.
    pub fn check(&self, handle: u64, kind: Kind) -> NpudResult<u64> {
        let epoch = (handle >> EPOCH_SHIFT) as u16;
        let handle_kind = (handle >> SERIAL_BITS) & ((1 << KIND_BITS) - 1);
        if handle == 0 || handle >= HANDLE_LIMIT || handle_kind == 0 || handle_kind > 4 {
            // A session id that was never minted is an unknown session, as a closed one
            // is: clients tell the two apart by reason, not by how the number looks.
            return Err(match kind {
                Kind::Session => NpudError::unknown_session(),
                _ => NpudError::unknown_handle(handle),
            });
        }
        if epoch != self.epoch {
            return Err(NpudError::new(
                Reason::StaleEpoch,
                format!(
                    "{} handle {handle} belongs to an earlier npud instance (the daemon restarted); open a new session",
                    kind.name()
                ),
            ));
        }
        if handle_kind != kind as u64 {
            return Err(NpudError::new(
                Reason::InvalidHandleKind,
                format!("handle {handle} is not a {} handle", kind.name()),
            ));
        }
        Ok(handle)
    }
}

/// A boot epoch that differs from `previous` (when the last one is known) and is nonzero.
pub fn new_epoch(previous: Option<u16>) -> u16 {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mut x = nanos ^ (u64::from(std::process::id()) << 32);
    // splitmix64 finaliser: spreads the clock's low bits over the 12 we keep.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    let mut epoch = (x as u16 & EPOCH_MASK).max(1);
    if Some(epoch) == previous.map(|p| p & EPOCH_MASK) {
        epoch = (epoch % EPOCH_MASK) + 1;
    }
    epoch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_reject_the_wrong_kind_or_epoch() {
        let m = Minter::new(7);
        let h = m.mint(Kind::Stream);
        assert_eq!(m.check(h, Kind::Stream).unwrap(), h);
        assert_eq!(m.check(h, Kind::Event).unwrap_err().reason, Reason::InvalidHandleKind);
        let other = Minter::new(8);
        assert_eq!(other.check(h, Kind::Stream).unwrap_err().reason, Reason::StaleEpoch);
        assert_eq!(m.check(0, Kind::Stream).unwrap_err().reason, Reason::UnknownHandle);
        assert_eq!(m.check(12345, Kind::Stream).unwrap_err().reason, Reason::UnknownHandle);
    }

    #[test]
    fn epochs_change_and_are_nonzero() {
        let e = new_epoch(None);
        assert!((1..=EPOCH_MASK).contains(&e));
        assert_ne!(new_epoch(Some(e)), e);
        assert_ne!(new_epoch(Some(EPOCH_MASK)), EPOCH_MASK);
    }

    #[test]
    fn every_handle_is_exact_as_a_json_number() {
        let m = Minter::new(EPOCH_MASK);
        m.next.store(SERIAL_MASK, Ordering::Relaxed);
        for kind in [Kind::Stream, Kind::Event, Kind::Session, Kind::Callback] {
            let h = m.mint(kind);
            assert!(h < HANDLE_LIMIT, "{h:#x} fits in 53 bits");
            assert_eq!(h as f64 as u64, h, "a double holds {h} exactly");
        }
        assert_eq!(m.check(HANDLE_LIMIT | 1, Kind::Stream).unwrap_err().reason, Reason::UnknownHandle);
    }
}
