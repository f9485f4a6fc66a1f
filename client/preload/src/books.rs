//! What one process holds per device, and what it must ask npud for. Pure bookkeeping:
//! no I/O, so the policy is tested directly.
//!
//! Deadlock freedom: only a process that holds nothing on a device waits in npud's queue
//! (its first ask is its whole start-up need). A process that already holds streams and
//! wants more asks without waiting: it either fits now or fails with the vendor's code, as
//! it would without npud. No process ever waits while holding, so processes that each
//! hold part of what they need cannot wait on each other.

use crate::Map;

/// One device's figures in this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Device {
    /// Budget npud granted (or, when npud was unreachable, that the process took itself).
    pub granted: u32,
    /// Streams that exist: default streams of contexts plus created streams.
    pub used: u32,
    /// Of the grant, what graph captures under way hold for the streams they may still
    /// make (their headroom, `reserve`): neither usable for other streams nor given back.
    pub reserved: u32,
    /// aclrtSetDevice calls not yet undone by aclrtResetDevice.
    pub set_count: u32,
    /// The default context aclrtSetDevice made, once known.
    pub default_ctx: usize,
}

/// The most a process growing past its grant asks for beyond what it needs at once.
const GROW_MAX: u32 = 128;

/// What to do before creating `n` streams on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// The existing grant covers it; `used` has been counted.
    Covered,
    /// Ask npud for `count` streams, waiting in its queue only if `wait` is true; `needed`
    /// of them are needed now (the rest is asked ahead, and asked again without it if
    /// refused).
    Ask { count: u32, wait: bool, needed: u32 },
}

#[derive(Debug, Default)]
pub struct Books {
    devices: Map<u32, Device>,
    /// Live streams: handle → (device, context it was created in).
    streams: Map<usize, (u32, usize)>,
    /// Contexts made with aclrtCreateContext: handle → device.
    contexts: Map<usize, u32>,
    /// CUDA primary contexts this process retained: device → (context, retains).
    primary: Map<u32, (usize, u32)>,
    /// CUDA green contexts this process made: handle → device. Their streams outlive them
    /// (cuGreenCtxDestroy leaves them to cuStreamDestroy), so they are booked as streams.
    green: Map<usize, u32>,
    /// Streams for internal synchronisation each AscendCL context holds beside its default
    /// stream: 1 on the inference parts, else 0 (`npud_proto::soc`).
    context_sync: u32,
    /// Per device, what the last grant left the process to take (its share's `available`)
    /// where npud said the device has room to spare; none where it is contended.
    room: Map<u32, u32>,
}

impl Books {
    pub fn device(&self, device: u32) -> Device {
        self.devices.get(&device).copied().unwrap_or_default()
    }

    /// Whether every stream granted on `device` exists.
    pub fn grant_used(&self, device: u32) -> bool {
        let d = self.device(device);
        d.granted > 0 && d.used.saturating_add(d.reserved) >= d.granted
    }

    pub fn devices(&self) -> Vec<(u32, Device)> {
        self.devices.iter().map(|(&d, &v)| (d, v)).collect()
    }

    /// Plans the creation of `n` streams; `startup` is the process's whole start-up need,
    /// asked for at once the first time.
    pub fn plan(&mut self, device: u32, n: u32, startup: u32) -> Plan {
        let room = self.room.get(&device).copied().unwrap_or(0);
        let d = self.devices.entry(device).or_default();
        if d.used.saturating_add(n).saturating_add(d.reserved) <= d.granted {
            d.used += n;
            return Plan::Covered;
        }
        let holding = d.granted > 0 || d.used > 0;
        if holding {
            // Growing past its grant where the device has room to spare, a process asks
            // ahead: half of what it uses, within a quarter of the room its last grant left
            // it. A process that makes streams one at a time past its start-up would
            // otherwise wait for npud once per stream (1,330 round trips for 1,400 streams).
            // What it does not use goes back with `surplus` once the device is quiet.
            let needed = d.used.saturating_add(n).saturating_add(d.reserved) - d.granted;
            let ahead = (d.used / 2).min(room / 4).min(GROW_MAX);
            Plan::Ask { count: needed.max(ahead), wait: false, needed }
        } else {
            let count = startup.max(n);
            Plan::Ask { count, wait: true, needed: count }
        }
    }

    /// What npud's last grant on `device` left the process to take, where it said the
    /// device has room to spare (else 0: nothing is asked ahead there).
    pub fn set_room(&mut self, device: u32, room: u32) {
        self.room.insert(device, room);
    }

    /// npud granted `count` for a plan of `n` streams.
    pub fn granted(&mut self, device: u32, count: u32, n: u32) {
        let d = self.devices.entry(device).or_default();
        d.granted = d.granted.saturating_add(count);
        d.used = d.used.saturating_add(n);
    }

    /// The vendor call the budget was for failed: the streams do not exist.
    pub fn not_created(&mut self, device: u32, n: u32) {
        let d = self.devices.entry(device).or_default();
        d.used = d.used.saturating_sub(n);
    }

    /// Streams went away. Their budget stays with the process as unused grant, so a
    /// program that destroys and re-creates streams asks npud nothing; what is above its
    /// start-up need goes back with [`Books::surplus`] once the device is quiet.
    pub fn freed(&mut self, device: u32, n: u32) {
        let d = self.devices.entry(device).or_default();
        d.used = d.used.saturating_sub(n);
    }

    /// Takes the unused grant above `floor` (the start-up need, which the process keeps
    /// while it uses the device) off the books: how much to give back to npud.
    pub fn surplus(&mut self, device: u32, floor: u32) -> u32 {
        let Some(d) = self.devices.get_mut(&device) else { return 0 };
        let keep = d.used.saturating_add(d.reserved).max(floor.min(d.granted));
        let back = d.granted.saturating_sub(keep);
        d.granted -= back;
        back
    }

    /// Holds `need` streams of the grant on `device` for a graph capture's headroom; what
    /// the grant lacks for it (0: none; npud is asked for that much, all or nothing, and
    /// [`Books::reserved_granted`] books it).
    pub fn reserve(&mut self, device: u32, need: u32) -> u32 {
        let d = self.devices.entry(device).or_default();
        let free = d.granted.saturating_sub(d.used).saturating_sub(d.reserved);
        if free >= need {
            d.reserved += need;
            return 0;
        }
        need - free
    }

    /// npud granted `count` streams for a capture's headroom of `need` (`reserve`).
    pub fn reserved_granted(&mut self, device: u32, count: u32, need: u32) {
        let d = self.devices.entry(device).or_default();
        d.granted = d.granted.saturating_add(count);
        d.reserved = d.reserved.saturating_add(need);
    }

    /// A capture made `n` streams out of its headroom: they exist now (counted as made
    /// even where the headroom is gone, as after npud restarted: `declaring`).
    pub fn reserved_used(&mut self, device: u32, n: u32) {
        let d = self.devices.entry(device).or_default();
        d.reserved = d.reserved.saturating_sub(n);
        d.used = d.used.saturating_add(n);
    }

    /// `n` streams of headroom a capture no longer needs: part of the grant again.
    pub fn unreserve(&mut self, device: u32, n: u32) {
        let d = self.devices.entry(device).or_default();
        d.reserved = d.reserved.saturating_sub(n);
    }

    /// `n` streams just granted and counted as used (a capture growing past its headroom:
    /// `plan`) are headroom instead, made by the call that follows.
    pub fn to_reserved(&mut self, device: u32, n: u32) {
        let d = self.devices.entry(device).or_default();
        let n = n.min(d.used);
        d.used -= n;
        d.reserved = d.reserved.saturating_add(n);
    }

    pub fn stream_created(&mut self, stream: usize, device: u32, ctx: usize) {
        self.streams.insert(stream, (device, ctx));
    }

    /// Forgets a destroyed stream; its device, if it was known.
    pub fn stream_destroyed(&mut self, stream: usize) -> Option<u32> {
        self.streams.remove(&stream).map(|(d, _)| d)
    }

    /// How many internal-sync streams each context holds on this machine's SoC.
    pub fn set_context_sync(&mut self, streams: u32) {
        self.context_sync = streams;
    }

    /// Contexts of the process on `device`, its default one included: the runtime's
    /// retains of the device. The device's own default stream exists while there is one.
    fn retains(&self, device: u32) -> u32 {
        let made = self.contexts.values().filter(|d| **d == device).count() as u32;
        made + u32::from(self.device(device).set_count > 0)
    }

    /// Streams an aclrtCreateContext on `device` makes: the context's default stream (and
    /// its internal-sync stream on the inference parts), and the device's own when no
    /// context of the process holds the device yet (the vendor's aclrtCreateContext page:
    /// a first aclrtCreateContext without aclrtSetDevice takes the device's bound default
    /// stream and the context's streams).
    pub fn context_adds(&self, device: u32) -> u32 {
        1 + self.context_sync + u32::from(self.retains(device) == 0)
    }

    /// Streams a first aclrtSetDevice on `device` makes: the device's default stream,
    /// which its default context uses, unless a context made with aclrtCreateContext
    /// already holds the device (and made it); and the default context's internal-sync
    /// stream on the inference parts.
    pub fn set_adds(&self, device: u32) -> u32 {
        u32::from(self.retains(device) == 0) + self.context_sync
    }

    /// A context was made with aclrtCreateContext: the streams that made, as
    /// [`Books::context_adds`] says now (a thread that made a context at the same time may
    /// have made the device's default stream instead).
    pub fn context_created(&mut self, ctx: usize, device: u32) -> u32 {
        let made = self.context_adds(device);
        self.contexts.insert(ctx, device);
        made
    }

    /// Forgets a destroyed context and the streams left in it: (device, streams freed,
    /// its default stream included, and the device's when it was the last context there).
    pub fn context_destroyed(&mut self, ctx: usize) -> Option<(u32, u32)> {
        let device = self.contexts.remove(&ctx)?;
        let last = u32::from(self.retains(device) == 0);
        Some((device, 1 + self.context_sync + last + self.drop_streams_of(ctx)))
    }

    /// A context that holds no budget of its own went away (CUDA): forgets the streams
    /// made in it; (device, streams freed) when there were any.
    pub fn context_streams_gone(&mut self, ctx: usize) -> Option<(u32, u32)> {
        let device = self.streams.values().find(|(_, c)| *c == ctx).map(|(d, _)| *d)?;
        Some((device, self.drop_streams_of(ctx)))
    }

    pub fn context_device(&self, ctx: usize) -> Option<u32> {
        self.contexts
            .get(&ctx)
            .copied()
            .or_else(|| self.devices.iter().find(|(_, d)| d.default_ctx == ctx && ctx != 0).map(|(&id, _)| id))
    }

    /// aclrtSetDevice succeeded: whether it was the first (the default context is new),
    /// and the streams it made ([`Books::set_adds`] before it).
    pub fn set_device(&mut self, device: u32) -> (bool, u32) {
        let made = self.set_adds(device);
        let d = self.devices.entry(device).or_default();
        d.set_count += 1;
        (d.set_count == 1, made)
    }

    pub fn set_default_context(&mut self, device: u32, ctx: usize) {
        self.devices.entry(device).or_default().default_ctx = ctx;
    }

    /// aclrtResetDevice succeeded. When the last use goes (or at once with `force`) the
    /// default context, its stream and every stream made in it are gone: returns how much
    /// budget to give back then (including any unused grant).
    pub fn reset_device(&mut self, device: u32, force: bool) -> u32 {
        let Some(d) = self.devices.get_mut(&device) else { return 0 };
        if d.set_count == 0 {
            return 0;
        }
        d.set_count = if force { 0 } else { d.set_count - 1 };
        if d.set_count > 0 {
            return 0;
        }
        let ctx = d.default_ctx;
        d.default_ctx = 0;
        // The device's captures went with its default context (`Captures::drop_context`).
        d.reserved = 0;
        // The default context's stream is the device's own: it goes with the last context.
        let freed = u32::from(self.retains(device) == 0) + self.context_sync + self.drop_streams_of(ctx);
        let d = self.devices.entry(device).or_default();
        d.used = d.used.saturating_sub(freed);
        // What is left in use belongs to contexts made with aclrtCreateContext.
        let back = d.granted.saturating_sub(d.used);
        d.granted -= back;
        back
    }

    fn drop_streams_of(&mut self, ctx: usize) -> u32 {
        let before = self.streams.len();
        self.streams.retain(|_, (_, c)| *c != ctx);
        (before - self.streams.len()) as u32
    }

    /// Takes every unused grant on `device` off the books (its context is gone, as after the
    /// last device reset): how much to give back to npud.
    pub fn release_unused(&mut self, device: u32) -> u32 {
        let Some(d) = self.devices.get_mut(&device) else { return 0 };
        d.reserved = 0;
        let back = d.granted.saturating_sub(d.used);
        d.granted -= back;
        back
    }

    /// cuDevicePrimaryCtxRetain succeeded with `ctx`.
    pub fn primary_retained(&mut self, device: u32, ctx: usize) {
        let entry = self.primary.entry(device).or_insert((ctx, 0));
        *entry = (ctx, entry.1.saturating_add(1));
    }

    /// cuDevicePrimaryCtxRelease succeeded: the context when that was its last retain (the
    /// driver then destroys it, and its streams with it).
    pub fn primary_released(&mut self, device: u32) -> Option<usize> {
        let (ctx, refs) = self.primary.get_mut(&device)?;
        *refs = refs.saturating_sub(1);
        let (ctx, last) = (*ctx, *refs == 0);
        if last {
            self.primary.remove(&device);
        }
        last.then_some(ctx)
    }

    /// The primary context of `device`, if this process retained it.
    pub fn primary_context(&self, device: u32) -> Option<usize> {
        self.primary.get(&device).map(|(ctx, _)| *ctx)
    }

    /// A green context was made on `device`, or (None) destroyed.
    pub fn set_green(&mut self, ctx: usize, device: Option<u32>) {
        match device {
            Some(d) => self.green.insert(ctx, d),
            None => self.green.remove(&ctx),
        };
    }

    /// The device of a green context this process made.
    pub fn green_device(&self, ctx: usize) -> Option<u32> {
        self.green.get(&ctx).copied()
    }

    /// A (re)opened connection is about to declare what the process holds: the devices
    /// where it uses streams, with how many. npud knows nothing of the grant the last
    /// connection had, so the grant becomes what is used, in the same step: a stream made
    /// after this snapshot must ask the new connection (and so waits for the declaration),
    /// where it would otherwise be made on the old grant and never be declared.
    pub fn declaring(&mut self) -> Vec<(u32, u32)> {
        for d in self.devices.values_mut() {
            // A restarted npud holds no headroom for captures under way: what they make
            // from now on is counted as made (`reserved_used`) and reported.
            d.granted = d.used;
            d.reserved = 0;
        }
        self.devices.iter().filter(|(_, d)| d.used > 0).map(|(&id, d)| (id, d.used)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 72: a capture's headroom is held out of the grant: no other stream is made
    /// from it, it never goes back as surplus, and what the capture makes moves it to used.
    #[test]
    fn a_captures_headroom_is_neither_used_by_others_nor_given_back() {
        let mut b = Books::default();
        b.granted(0, 20, 10);
        assert_eq!(b.reserve(0, 16), 6, "10 of the grant are free: 6 short");
        assert_eq!(b.device(0).reserved, 0, "nothing held until it is all there");
        b.reserved_granted(0, 6, 16);
        assert_eq!(
            b.plan(0, 1, 0),
            Plan::Ask { count: 1, wait: false, needed: 1 },
            "the headroom is not the process's"
        );
        b.not_created(0, 0);
        b.reserved_used(0, 3);
        assert_eq!((b.device(0).used, b.device(0).reserved), (13, 13));
        assert_eq!(b.surplus(0, 0), 0, "the headroom is kept");
        b.unreserve(0, 13);
        assert_eq!(b.surplus(0, 0), 13, "once the capture ended, it goes back");
    }

    /// The race issue 56's restart test caught: a stream made on the dead npud's unused
    /// grant while the watcher declared was never declared, so the restarted npud counted
    /// two of the program's streams as another's. The snapshot now drops that grant.
    #[test]
    fn after_the_declaration_snapshot_a_new_stream_asks_instead_of_using_the_old_grant() {
        let mut b = Books::default();
        assert_eq!(b.plan(0, 1, 12), Plan::Ask { count: 12, wait: true, needed: 12 });
        b.granted(0, 12, 1);
        for _ in 0..8 {
            assert_eq!(b.plan(0, 1, 12), Plan::Covered);
        }
        assert_eq!(b.declaring(), [(0, 9)]);
        assert_eq!(b.device(0).granted, 9, "the old grant is gone with the old connection");
        assert!(matches!(b.plan(0, 1, 12), Plan::Ask { needed: 1, .. }), "the next stream asks");
        b.freed(0, 9);
        assert_eq!(b.declaring(), [], "nothing held: nothing to declare");
        assert_eq!(b.device(0).granted, 0);
    }

    #[test]
    fn the_last_release_of_a_primary_context_names_it() {
        let mut b = Books::default();
        b.primary_retained(0, 0x50);
        b.primary_retained(0, 0x50);
        assert_eq!(b.primary_context(0), Some(0x50));
        assert_eq!(b.primary_released(0), None, "one retain is left");
        assert_eq!(b.primary_released(0), Some(0x50));
        assert_eq!(b.primary_released(0), None, "not retained any more");
        assert_eq!(b.primary_context(0), None);
    }

    #[test]
    fn the_first_ask_is_the_whole_start_up_need_and_waits() {
        let mut b = Books::default();
        assert_eq!(b.set_device(0), (true, 1));
        assert_eq!(b.plan(0, 1, 71), Plan::Ask { count: 71, wait: true, needed: 71 });
        b.granted(0, 71, 1);
        for _ in 0..70 {
            assert_eq!(b.plan(0, 1, 71), Plan::Covered);
        }
        assert_eq!(b.device(0), Device { granted: 71, used: 71, reserved: 0, set_count: 1, default_ctx: 0 });
    }

    #[test]
    fn growth_past_the_grant_never_waits_while_holding() {
        let mut b = Books::default();
        b.granted(0, 2, 2);
        assert_eq!(b.plan(0, 3, 71), Plan::Ask { count: 3, wait: false, needed: 3 });
    }

    #[test]
    fn growth_asks_ahead_only_where_the_device_has_room_to_spare() {
        let mut b = Books::default();
        b.granted(0, 71, 71);
        assert_eq!(
            b.plan(0, 1, 71),
            Plan::Ask { count: 1, wait: false, needed: 1 },
            "no room known: just what is needed"
        );
        b.set_room(0, 1000);
        // Half of the 71 it uses, within a quarter of the room.
        assert_eq!(b.plan(0, 1, 71), Plan::Ask { count: 35, wait: false, needed: 1 });
        b.set_room(0, 40);
        assert_eq!(b.plan(0, 1, 71), Plan::Ask { count: 10, wait: false, needed: 1 }, "a quarter of the room");
        b.set_room(0, 1 << 20);
        b.granted(0, 1000, 1000);
        assert_eq!(b.plan(0, 1, 71), Plan::Ask { count: GROW_MAX, wait: false, needed: 1 }, "never more than GROW_MAX");
        assert_eq!(b.plan(0, 500, 71), Plan::Ask { count: 500, wait: false, needed: 500 }, "at least what is needed");
        b.set_room(0, 0);
        assert_eq!(b.plan(0, 1, 71), Plan::Ask { count: 1, wait: false, needed: 1 }, "contended: no more than needed");
    }

    #[test]
    fn a_failed_creation_keeps_the_grant_for_the_next_try() {
        let mut b = Books::default();
        b.granted(0, 4, 1);
        assert_eq!(b.plan(0, 1, 4), Plan::Covered);
        b.not_created(0, 1);
        assert_eq!(b.device(0).used, 1);
        assert_eq!(b.device(0).granted, 4);
    }

    #[test]
    fn destroyed_streams_keep_their_budget_until_it_is_surplus() {
        let mut b = Books::default();
        b.granted(0, 71, 61);
        b.stream_created(0x10, 0, 7);
        assert_eq!(b.stream_destroyed(0x10), Some(0));
        b.freed(0, 1);
        assert_eq!(b.device(0), Device { granted: 71, used: 60, reserved: 0, set_count: 0, default_ctx: 0 });
        assert_eq!(b.stream_destroyed(0x10), None, "only once");
        assert_eq!(b.plan(0, 1, 71), Plan::Covered, "re-creating asks npud nothing");
        // Growth past the start-up need goes back once it is destroyed; the need stays.
        assert_eq!(b.plan(0, 20, 71), Plan::Ask { count: 10, wait: false, needed: 10 });
        b.granted(0, 10, 20);
        b.freed(0, 30);
        assert_eq!(b.surplus(0, 71), 10);
        assert_eq!(b.device(0).granted, 71);
        assert_eq!(b.surplus(0, 71), 0, "nothing twice");
        assert_eq!(b.surplus(1, 71), 0, "an unknown device");
    }

    #[test]
    fn the_last_reset_frees_the_default_context_its_streams_and_the_unused_grant() {
        let mut b = Books::default();
        b.set_device(0);
        b.set_device(0);
        b.set_default_context(0, 7);
        b.granted(0, 71, 1); // the default stream
        for s in 0..3 {
            assert_eq!(b.plan(0, 1, 71), Plan::Covered);
            b.stream_created(0x100 + s, 0, 7);
        }
        assert_eq!(b.context_adds(0), 1, "the device is held already");
        assert_eq!(b.context_created(9, 0), 1);
        assert_eq!(b.plan(0, 1, 71), Plan::Covered); // context 9's default stream
        assert_eq!(b.reset_device(0, false), 0, "one use is left");
        // The default context's 3 streams go; its default stream is the device's own, which
        // context 9 still holds, with its own default stream.
        assert_eq!(b.reset_device(0, false), 69);
        assert_eq!(b.device(0).used, 2);
        assert_eq!(b.device(0).granted, 2);
        assert_eq!(b.context_destroyed(9), Some((0, 2)), "the last context takes the device's stream");
        assert_eq!(b.reset_device(0, true), 0, "nothing left to reset");
    }

    #[test]
    fn a_first_context_without_a_set_device_makes_the_devices_default_stream_too() {
        let mut b = Books::default();
        assert_eq!(b.context_adds(0), 2);
        assert_eq!(b.context_created(5, 0), 2);
        assert_eq!(b.context_adds(0), 1);
        assert_eq!(b.context_created(6, 0), 1);
        assert_eq!(b.set_adds(0), 0, "the default context uses the device's stream");
        assert_eq!(b.set_device(0), (true, 0));
        assert_eq!(b.reset_device(0, false), 0);
        assert_eq!(b.context_destroyed(5), Some((0, 1)));
        assert_eq!(b.context_destroyed(6), Some((0, 2)));
        assert_eq!(b.set_adds(0), 1, "nothing holds the device any more");
        assert_eq!(b.context_adds(1), 2, "each device on its own");
    }

    #[test]
    fn on_an_inference_part_every_context_holds_an_internal_sync_stream_too() {
        let mut b = Books::default();
        b.set_context_sync(1);
        assert_eq!(b.set_adds(0), 2, "the device's stream and the default context's sync stream");
        assert_eq!(b.set_device(0), (true, 2));
        b.set_default_context(0, 7);
        assert_eq!(b.context_created(9, 0), 2, "its default stream and its sync stream");
        b.granted(0, 4, 4);
        assert_eq!(b.context_destroyed(9), Some((0, 2)));
        b.freed(0, 2);
        // The last context takes the device's stream and its sync stream: nothing is left,
        // and the whole grant goes back.
        assert_eq!(b.reset_device(0, false), 4);
        assert_eq!(b.device(0).used, 0);
        assert_eq!(b.context_adds(0), 3, "a first context without a set: the device's stream and two of its own");
    }
}
