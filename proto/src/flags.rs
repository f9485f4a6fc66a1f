//! The stream and event flag vocabulary (ACL_STREAM_*, ACL_EVENT_*) and its rules, shared
//! by the daemon, the simulator, the fakes and the CLI. The bit values are common.proto's
//! `StreamFlag` and `EventFlag`, so the wire contract is their one definition.

use crate::v1::{EventFlag, StreamFlag};

pub const STREAM_FAST_LAUNCH: u32 = StreamFlag::FastLaunch as u32;
pub const STREAM_FAST_SYNC: u32 = StreamFlag::FastSync as u32;
pub const STREAM_PERSISTENT: u32 = StreamFlag::Persistent as u32;
pub const STREAM_HUGE: u32 = StreamFlag::Huge as u32;
pub const STREAM_CPU_SCHEDULE: u32 = StreamFlag::CpuSchedule as u32;
pub const STREAM_DEVICE_USE_ONLY: u32 = StreamFlag::DeviceUseOnly as u32;
/// npud extension mirroring CU_STREAM_NON_BLOCKING; no effect on an ACL device.
pub const STREAM_NON_BLOCKING: u32 = StreamFlag::NonBlocking as u32;
const STREAM_KNOWN: u32 = STREAM_FAST_LAUNCH
    | STREAM_FAST_SYNC
    | STREAM_PERSISTENT
    | STREAM_HUGE
    | STREAM_CPU_SCHEDULE
    | STREAM_DEVICE_USE_ONLY
    | STREAM_NON_BLOCKING;

pub const EVENT_SYNC: u32 = EventFlag::Sync as u32;
pub const EVENT_CAPTURE_STREAM_PROGRESS: u32 = EventFlag::CaptureStreamProgress as u32;
pub const EVENT_TIME_LINE: u32 = EventFlag::TimeLine as u32;
pub const EVENT_DEVICE_USE_ONLY: u32 = EventFlag::DeviceUseOnly as u32;
pub const EVENT_EXTERNAL: u32 = EventFlag::External as u32;
pub const EVENT_IPC: u32 = EventFlag::Ipc as u32;
const EVENT_KNOWN: u32 =
    EVENT_SYNC | EVENT_CAPTURE_STREAM_PROGRESS | EVENT_TIME_LINE | EVENT_DEVICE_USE_ONLY | EVENT_EXTERNAL | EVENT_IPC;
/// What aclrtCreateEvent gives: usable by stream waits and resets, and timed.
pub const EVENT_DEFAULT: u32 = EVENT_SYNC | EVENT_TIME_LINE;

/// Checks a stream flag word: DEVICE_USE_ONLY, the macro that cannot be OR-ed, stands on
/// its own among the documented macros. Other values are not errors (see
/// [`effective_stream_flags`]).
pub fn check_stream_flags(flags: u32) -> Result<(), String> {
    if flags & STREAM_DEVICE_USE_ONLY != 0 && flags & STREAM_KNOWN != STREAM_DEVICE_USE_ONLY {
        return Err("DEVICE_USE_ONLY cannot be combined with other stream flags".into());
    }
    Ok(())
}

/// The flags a stream is made with. aclrtCreateStreamWithConfig's seed: macros that cannot
/// be OR-ed are refused, and "a stream created with any other value is the same as one
/// made by aclrtCreateStream": a word with bits outside the documented macros makes an
/// ordinary stream (flags 0).
pub fn effective_stream_flags(flags: u32) -> Result<u32, String> {
    check_stream_flags(flags)?;
    Ok(if flags & !STREAM_KNOWN != 0 { 0 } else { flags })
}

/// Checks an event flag word: known bits only, EXTERNAL on its own.
pub fn check_event_flags(flags: u32) -> Result<(), String> {
    if flags & !EVENT_KNOWN != 0 {
        return Err(format!("unknown event flag bits {:#x}", flags & !EVENT_KNOWN));
    }
    if flags & EVENT_EXTERNAL != 0 && flags != EVENT_EXTERNAL {
        return Err("EXTERNAL cannot be combined with other event flags".into());
    }
    Ok(())
}

/// Parses a comma-separated flag list such as `fast-launch,fast-sync` (case-insensitive,
/// `_` and `-` alike), for command lines and config files.
pub fn parse_stream_flags(text: &str) -> Result<u32, String> {
    let mut flags = 0;
    for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let bit = match word.to_ascii_lowercase().replace('_', "-").as_str() {
            "fast-launch" => STREAM_FAST_LAUNCH,
            "fast-sync" => STREAM_FAST_SYNC,
            "persistent" => STREAM_PERSISTENT,
            "huge" => STREAM_HUGE,
            "cpu-schedule" => STREAM_CPU_SCHEDULE,
            "device-use-only" => STREAM_DEVICE_USE_ONLY,
            "non-blocking" | "nonblocking" => STREAM_NON_BLOCKING,
            "none" | "default" => 0,
            other => {
                return Err(format!(
                    "unknown stream flag {other:?}; expected fast-launch, fast-sync, persistent, huge, cpu-schedule, device-use-only, non-blocking"
                ));
            }
        };
        flags |= bit;
    }
    check_stream_flags(flags)?;
    Ok(flags)
}

/// Names the set bits of a stream flag word, for display.
pub fn stream_flag_names(flags: u32) -> Vec<&'static str> {
    [
        (STREAM_FAST_LAUNCH, "fast-launch"),
        (STREAM_FAST_SYNC, "fast-sync"),
        (STREAM_PERSISTENT, "persistent"),
        (STREAM_HUGE, "huge"),
        (STREAM_CPU_SCHEDULE, "cpu-schedule"),
        (STREAM_DEVICE_USE_ONLY, "device-use-only"),
        (STREAM_NON_BLOCKING, "non-blocking"),
    ]
    .into_iter()
    .filter(|(bit, _)| flags & bit != 0)
    .map(|(_, name)| name)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_use_only_stands_alone() {
        assert!(check_stream_flags(STREAM_DEVICE_USE_ONLY).is_ok());
        assert!(check_stream_flags(STREAM_DEVICE_USE_ONLY | STREAM_FAST_LAUNCH).is_err());
        assert!(check_stream_flags(STREAM_FAST_LAUNCH | STREAM_FAST_SYNC).is_ok());
        assert_eq!(effective_stream_flags(0x4000), Ok(0), "another value: an ordinary stream");
        assert_eq!(effective_stream_flags(0x4000 | STREAM_FAST_LAUNCH), Ok(0));
        assert_eq!(effective_stream_flags(STREAM_FAST_LAUNCH | STREAM_FAST_SYNC), Ok(3));
        assert!(effective_stream_flags(u32::MAX).is_err(), "DEVICE_USE_ONLY OR-ed with the rest");
    }

    #[test]
    fn the_bits_are_aclrt_s() {
        assert_eq!((STREAM_FAST_LAUNCH, STREAM_FAST_SYNC, STREAM_DEVICE_USE_ONLY), (0x1, 0x2, 0x20));
        assert_eq!((EVENT_SYNC, EVENT_TIME_LINE, EVENT_EXTERNAL, EVENT_IPC), (0x1, 0x8, 0x20, 0x40));
        assert_eq!(STREAM_NON_BLOCKING, 0x100);
    }

    #[test]
    fn parses_flag_lists() {
        assert_eq!(parse_stream_flags("fast-launch, FAST_SYNC"), Ok(3));
        assert!(parse_stream_flags("fast-launch,device-use-only").is_err());
        assert!(parse_stream_flags("warp-speed").is_err());
        assert_eq!(stream_flag_names(3), vec!["fast-launch", "fast-sync"]);
    }

    #[test]
    fn external_event_stands_alone() {
        assert!(check_event_flags(EVENT_EXTERNAL).is_ok());
        assert!(check_event_flags(EVENT_EXTERNAL | EVENT_SYNC).is_err());
        assert!(check_event_flags(EVENT_DEFAULT).is_ok());
        assert!(check_event_flags(0x80).is_err());
    }
}
