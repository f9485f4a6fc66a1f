//! What the runtime refuses around a capture, and which streams and events may take part,
//! each rule where hicann/runtime @681ef76 has it (the table in docs/hardware.md names the
//! test that checks each against this fake):
//!
//! - a stream made with a flag that does not support the ACL graph (AICPU, FORBIDDEN_DEFAULT,
//!   CP_PROCESS_USE, VECTOR_CORE_USE: `StreamFlagIsSupportCapture`,
//!   `feature/aclgraph/v100/capture_adapt_v100.cc` 22-34) cannot begin a capture, record
//!   into one or wait in one: RT_ERROR_STREAM_INVALID, which AscendCL reports as
//!   ACL_ERROR_RT_INTERNAL_ERROR (`api_error_aclgraph.cc` 46-49, `api_impl.cc` 1626-1628 and
//!   2173-2176; `core/src/common/errcode_manage.cc` 127);
//! - the default stream cannot record into a capture or wait on a captured event
//!   (ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT, `api_impl.cc` 1630-1633 and 2177-2179);
//! - an event made by aclrtCreateEvent or aclrtCreateEventWithFlag (the runtime's old-mode
//!   `rtEventCreate`/`rtEventCreateWithFlag`) cannot be recorded in a capture, nor waited on
//!   by a capturing stream unless made with ACL_EVENT_EXTERNAL: RT_ERROR_FEATURE_NOT_SUPPORT
//!   (207000; `api_impl.cc` 2169-2172 and 1645-1652). aclrtCreateEventExWithFlag's events
//!   are the new mode, which captures take;
//! - a capturing stream cannot wait on a new-mode event whose record is outside the
//!   capture: RT_ERROR_STREAM_CAPTURE_ISOLATION, reported as
//!   ACL_ERROR_RT_CAPTURE_DEPENDENCY (107024; `api_impl.cc` 1653-1666, `errcode_manage.cc`
//!   205-207);
//! - a stream's flags at creation (`ApiErrorDecorator::CheckStreamFlags`,
//!   `api/impl/api_error.cc` 1355-1381): a value above the OR of the known flags, or
//!   CP_PROCESS_USE with anything but ACSQ_LOCK, is RT_ERROR_INVALID_VALUE (107000); HUGE on
//!   a part without RT_FEATURE_STREAM_HUGE_DEPTH (of the simulated ones, the inference
//!   part: the `dc` device table lacks it) is RT_ERROR_FEATURE_NOT_SUPPORT (207000).

use super::Captures;
use crate::Handle;
use crate::state::Rt;
use npud_proto::codes::acl::{AclError, RT_FEATURE_NOT_SUPPORT, RT_INTERNAL_ERROR, RT_PARAM_INVALID};

/// ACL_ERROR_RT_CAPTURE_DEPENDENCY and ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT
/// (`include/external/acl/error_codes/rt_error_codes.h` 46, 52).
pub const RT_CAPTURE_DEPENDENCY: AclError = 107024;
pub const RT_STREAM_CAPTURE_IMPLICIT: AclError = 107031;

/// RT_STREAM_* (`pkg_inc/runtime/rt_external_stream.h` 26-40, `runtime/stream.h` 27-29).
pub const RT_STREAM_HUGE: u32 = 0x04;
pub const RT_STREAM_AICPU: u32 = 0x08;
pub const RT_STREAM_FORBIDDEN_DEFAULT: u32 = 0x10;
pub const RT_STREAM_CP_PROCESS_USE: u32 = 0x800;
pub const RT_STREAM_VECTOR_CORE_USE: u32 = 0x1000;
pub const RT_STREAM_ACSQ_LOCK: u32 = 0x2000;
/// `maxFlags` in `CheckStreamFlags`: DEFAULT | PERSISTENT | FORCE_COPY | HUGE | AICPU |
/// FORBIDDEN_DEFAULT | HEAD | OVERFLOW | FAST_LAUNCH | FAST_SYNC | CP_PROCESS_USE |
/// VECTOR_CORE_USE | ACSQ_LOCK | DQS_CTRL | DQS_INTER_CHIP, compared as a number.
pub const MAX_FLAGS: u32 = 0x01 | 0x02 | 0x04 | 0x08 | 0x10 | 0x20 | 0x100 | 0x200 | 0x400 | 0x800 | 0xF000;

/// `CheckStreamFlags` on RT_STREAM_* `flags`.
pub fn check_create_flags(flags: u32) -> Result<(), AclError> {
    if flags & RT_STREAM_HUGE != 0 && !huge_streams() {
        return Err(RT_FEATURE_NOT_SUPPORT);
    }
    if flags > MAX_FLAGS {
        return Err(RT_PARAM_INVALID);
    }
    if flags & RT_STREAM_CP_PROCESS_USE != 0
        && flags | RT_STREAM_ACSQ_LOCK != RT_STREAM_ACSQ_LOCK | RT_STREAM_CP_PROCESS_USE
    {
        return Err(RT_PARAM_INVALID);
    }
    Ok(())
}

/// Whether the simulated part has RT_FEATURE_STREAM_HUGE_DEPTH: all but the inference
/// part (Ascend310P, the `dc` table).
fn huge_streams() -> bool {
    !crate::state::soc_name().to_bytes().starts_with(b"Ascend310P")
}

/// `StreamFlagIsSupportCapture` on RT_STREAM_* `flags`.
pub fn supports_capture(flags: u32) -> bool {
    [RT_STREAM_AICPU, RT_STREAM_FORBIDDEN_DEFAULT, RT_STREAM_CP_PROCESS_USE, RT_STREAM_VECTOR_CORE_USE]
        .iter()
        .all(|f| flags & f != *f)
}

impl Captures {
    fn stream_refuses(&self, stream: usize) -> bool {
        self.uncapturable.contains(&stream)
    }
}

impl Rt {
    /// A stream was made with RT_STREAM_* `flags`: kept out of captures where they say so.
    pub fn stream_flags_made(&self, stream: Handle, flags: u32) {
        if !supports_capture(flags) {
            self.captures().uncapturable.insert(stream as usize);
        }
    }

    /// An event was made with ACL_EVENT_* `flags`, by aclrtCreateEventExWithFlag (`ex`:
    /// the new mode, which captures take) or the older calls.
    pub fn event_made(&self, event: Handle, flags: u32, ex: bool) {
        let mut c = self.captures();
        if ex {
            c.new_mode.insert(event as usize);
        }
        if flags & npud_proto::flags::EVENT_EXTERNAL != 0 {
            c.external_made.insert(event as usize);
        }
    }

    /// The stream's flags let it take part in a capture; 507000 otherwise.
    pub(super) fn capture_flags_ok(&self, stream: usize) -> Result<(), AclError> {
        if self.captures().stream_refuses(stream) { Err(RT_INTERNAL_ERROR) } else { Ok(()) }
    }

    /// A record of `event` on `stream` that is to be captured (`ApiImpl::EventRecord`,
    /// `ToBeCaptured`): the event's mode, the stream's flags, not the default stream.
    pub(super) fn capture_record_allowed(&self, event: usize, stream: usize) -> Result<(), AclError> {
        if !self.captures().new_mode.contains(&event) {
            return Err(RT_FEATURE_NOT_SUPPORT);
        }
        self.capture_flags_ok(stream)?;
        if self.is_default_stream(stream as Handle) {
            return Err(RT_STREAM_CAPTURE_IMPLICIT);
        }
        Ok(())
    }

    /// A wait by `stream` on `event` whose record is in a capture (`IsCapturing`): the
    /// stream's flags, not the default stream.
    pub(super) fn captured_wait_allowed(&self, stream: usize) -> Result<(), AclError> {
        self.capture_flags_ok(stream)?;
        if self.is_default_stream(stream as Handle) {
            return Err(RT_STREAM_CAPTURE_IMPLICIT);
        }
        Ok(())
    }

    /// A wait by a capturing stream on `event` recorded in no capture: an old-mode event
    /// only if made with ACL_EVENT_EXTERNAL, a new-mode one only if never recorded.
    pub(super) fn outside_wait_allowed(&self, event: usize) -> Result<(), AclError> {
        let c = self.captures();
        if !c.new_mode.contains(&event) {
            return if c.external_made.contains(&event) { Ok(()) } else { Err(RT_FEATURE_NOT_SUPPORT) };
        }
        if c.event_use.get(&event).is_some_and(|u| u.recorded) {
            return Err(RT_CAPTURE_DEPENDENCY);
        }
        Ok(())
    }

    /// A stream or event is gone: its capture attributes with it.
    pub fn capture_attrs_gone(&self, handle: usize) {
        let mut c = self.captures();
        c.uncapturable.remove(&handle);
        c.new_mode.remove(&handle);
        c.external_made.remove(&handle);
    }
}
