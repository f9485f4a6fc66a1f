//! aclrtSetStreamAttribute and aclrtGetStreamAttribute: one call for several of a stream's
//! settings (the pages; the open runtime's `rtsStreamSetAttribute` and
//! `rtsStreamGetAttribute`). HCCL sets its streams' failure mode this way, and torch_npu
//! switches ACL_STREAM_ATTR_CACHE_OP_INFO around a graph capture.
//!
//! - ACL_STREAM_ATTR_FAILURE_MODE (1, `failureMode`): aclrtSetStreamFailureMode's setting,
//!   with its rules (0 or 1, once per stream);
//! - ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK (2), ACL_STREAM_ATTR_USER_CUSTOM_TAG (3): kept
//!   and read back (the fake runs no operators to check or tag);
//! - ACL_STREAM_ATTR_CACHE_OP_INFO (4, `cacheOpInfoSwitch`): 0 or 1, anything else is
//!   ACL_ERROR_RT_PARAM_INVALID;
//! - ACL_STREAM_ATTR_PRIORITY (5, `streamPriority`): the stream's priority from now on,
//!   clamped into 0..=7 as at creation (`ApiErrorDecorator::SetStreamPriorityValue`);
//!   aclrtStreamGetPriority reads it too;
//! - any other attribute: ACL_ERROR_RT_PARAM_INVALID; a NULL value: ACL_ERROR_INVALID_PARAM.
//!
//! A NULL stream names the current context's default stream, as for the runtime's other
//! stream calls.

use crate::state::{Rt, rt};
use crate::{Handle, UNINITIALIZE, aclrtSetStreamFailureMode, clamped_priority, code, failed};
use npu_sim::{SimDevice, StreamId};
use npud_proto::codes::acl::{AclError, INVALID_PARAM, RT_PARAM_INVALID, SUCCESS};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

const FAILURE_MODE: u32 = 1;
const FLOAT_OVERFLOW_CHECK: u32 = 2;
const USER_CUSTOM_TAG: u32 = 3;
const CACHE_OP_INFO: u32 = 4;
const PRIORITY: u32 = 5;

/// aclrtStreamAttrValue: `failureMode`, or one 32-bit field of the others, in 16 bytes.
#[repr(C)]
pub union AttrValue {
    failure_mode: u64,
    word: u32,
    /// Never read: it gives the union the header's size.
    #[allow(dead_code)]
    reserve: [u32; 4],
}

const _: () = assert!(std::mem::size_of::<AttrValue>() == 16);

/// What a get reads: the failure mode's 64 bits, or another attribute's 32.
enum Read {
    Mode(u64),
    Word(u32),
}

/// Per stream, the kept attributes 2, 3 and 4 (index `attribute - 2`).
static KEPT: Mutex<BTreeMap<usize, [u32; 3]>> = Mutex::new(BTreeMap::new());

fn kept() -> MutexGuard<'static, BTreeMap<usize, [u32; 3]>> {
    KEPT.lock().unwrap_or_else(|e| e.into_inner())
}

/// A stream is gone: its kept attributes with it.
pub fn forget(stream: usize) {
    kept().remove(&stream);
}

/// The live stream a call names (NULL: the current context's default one): its handle,
/// device and id on the device.
fn named(r: &Rt, stream: Handle) -> Result<(usize, &Arc<SimDevice>, StreamId), AclError> {
    let h = r.resolve(stream)?;
    r.stream(h).map(|(dev, id)| (h as usize, dev, id))
}

/// aclrtSetStreamAttribute(stream, stmAttrType, value).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtSetStreamAttribute(stream: Handle, attribute: u32, value: *const AttrValue) -> AclError {
    if value.is_null() {
        return failed(INVALID_PARAM);
    }
    // SAFETY: the caller's aclrtStreamAttrValue (checked non-null); every field is plain
    // data, so whichever the caller wrote reads as a number.
    let (mode, word) = unsafe { ((*value).failure_mode, (*value).word) };
    if attribute == FAILURE_MODE {
        return aclrtSetStreamFailureMode(stream, mode);
    }
    let Some(r) = rt() else { return UNINITIALIZE };
    code(named(r, stream).and_then(|(h, dev, id)| match attribute {
        PRIORITY => dev.set_priority(id, clamped_priority(word)).map_err(|e| e.code),
        CACHE_OP_INFO if word > 1 => Err(RT_PARAM_INVALID),
        FLOAT_OVERFLOW_CHECK | USER_CUSTOM_TAG | CACHE_OP_INFO => {
            kept().entry(h).or_default()[(attribute - 2) as usize] = word;
            Ok(())
        }
        _ => Err(RT_PARAM_INVALID),
    }))
}

/// aclrtGetStreamAttribute(stream, stmAttrType, value).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetStreamAttribute(stream: Handle, attribute: u32, value: *mut AttrValue) -> AclError {
    if value.is_null() {
        return failed(INVALID_PARAM);
    }
    let Some(r) = rt() else { return UNINITIALIZE };
    let read = named(r, stream).and_then(|(h, dev, id)| {
        Ok(match attribute {
            FAILURE_MODE => Read::Mode(match dev.stream_status(id).map_err(|e| e.code)?.failure_mode {
                npu_sim::FailureMode::Continue => 0,
                npu_sim::FailureMode::Stop => 1,
            }),
            PRIORITY => Read::Word(dev.stream_status(id).map_err(|e| e.code)?.priority),
            FLOAT_OVERFLOW_CHECK | USER_CUSTOM_TAG | CACHE_OP_INFO => {
                Read::Word(kept().get(&h).map_or(0, |k| k[(attribute - 2) as usize]))
            }
            _ => return Err(RT_PARAM_INVALID),
        })
    });
    // SAFETY (both writes): the field of the caller's aclrtStreamAttrValue (checked
    // non-null) that the attribute names, as the runtime writes it; the rest is left.
    match read {
        Ok(Read::Mode(m)) => unsafe { (*value).failure_mode = m },
        Ok(Read::Word(w)) => unsafe { (*value).word = w },
        Err(e) => return failed(e),
    }
    SUCCESS
}
