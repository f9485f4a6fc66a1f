//! Peer access between devices, from the aclrtDeviceCanAccessPeer,
//! aclrtDeviceEnablePeerAccess, aclrtDeviceDisablePeerAccess and
//! aclrtDevicePeerAccessStatus pages and the open runtime's checks (`aclrt_impl/memory.cpp`):
//!
//! - the ids are user ids (what aclrtSetDevice takes); the runtime turns the peer into its
//!   physical device before asking the driver, so access is kept per physical pair, and two
//!   numberings that name the same pair see the same state;
//! - a device and its peer must differ (ACL_ERROR_INVALID_PARAM), and name devices the
//!   process can see (ACL_ERROR_RT_INVALID_DEVICEID);
//! - enabling is one-way, from the current device to the peer, and device-wide; `flags` is
//!   reserved and must be 0 (ACL_ERROR_FEATURE_UNSUPPORTED otherwise);
//! - the fake's devices sit in one server, so every pair can access each other (the page:
//!   "in the AI Server case, even across PCIe switches"). Enabling twice, or disabling what
//!   was never enabled, succeeds: the pages give no error for either.
//!
//! Copies between devices need nothing of this in the fake, whose device memory is the
//! host's; programs call these first all the same, as on the device.

use crate::state::rt;
use crate::{UNINITIALIZE, code, failed};
use npud_proto::codes::acl::{
    AclError, FEATURE_UNSUPPORTED, INVALID_PARAM, RT_INVALID_DEVICEID, RT_PARAM_INVALID, SUCCESS,
};
use std::collections::BTreeSet;
use std::sync::Mutex;

/// (current device, peer), physical ids, for each direction enabled.
static ENABLED: Mutex<BTreeSet<(u32, u32)>> = Mutex::new(BTreeSet::new());

fn enabled() -> std::sync::MutexGuard<'static, BTreeSet<(u32, u32)>> {
    ENABLED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The physical pair (device, peer) two user ids name, checked as the runtime checks them.
fn pair(device: i32, peer: i32) -> Result<(u32, u32), AclError> {
    if device == peer {
        return Err(INVALID_PARAM);
    }
    let r = rt().ok_or(UNINITIALIZE)?;
    let physical = |user| r.numbering.physical_of_user(user).ok_or(RT_INVALID_DEVICEID);
    Ok((physical(device)?, physical(peer)?))
}

/// The pair from the current device to `peer`.
fn from_current(peer: i32) -> Result<(u32, u32), AclError> {
    let r = rt().ok_or(UNINITIALIZE)?;
    let current = r.user_id(r.current_device()?.id());
    pair(current as i32, peer)
}

/// aclrtDeviceCanAccessPeer(canAccessPeer, deviceId, peerDeviceId): 1 for every pair.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceCanAccessPeer(can: *mut i32, device: i32, peer: i32) -> AclError {
    code(pair(device, peer).and_then(|_| {
        if can.is_null() {
            return Err(RT_PARAM_INVALID);
        }
        // SAFETY: a non-null out-pointer from the caller.
        unsafe { can.write(1) };
        Ok(())
    }))
}

/// aclrtDeviceEnablePeerAccess(peerDeviceId, flags): from the current device to the peer.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtDeviceEnablePeerAccess(peer: i32, flags: u32) -> AclError {
    if flags != 0 {
        return failed(FEATURE_UNSUPPORTED);
    }
    code(from_current(peer).map(|p| {
        enabled().insert(p);
    }))
}

/// aclrtDeviceDisablePeerAccess(peerDeviceId).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtDeviceDisablePeerAccess(peer: i32) -> AclError {
    code(from_current(peer).map(|p| {
        enabled().remove(&p);
    }))
}

/// aclrtDevicePeerAccessStatus(deviceId, peerDeviceId, status): 1 once enabled from
/// `deviceId` to the peer, else 0; ids out of range are ACL_ERROR_RT_PARAM_INVALID (the
/// page's words).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDevicePeerAccessStatus(device: i32, peer: i32, status: *mut i32) -> AclError {
    if status.is_null() {
        return failed(INVALID_PARAM);
    }
    let p = match pair(device, peer) {
        Ok(p) => p,
        Err(INVALID_PARAM) => {
            // The same device: nothing was enabled from it to itself.
            // SAFETY: checked non-null out-pointer from the caller.
            unsafe { status.write(0) };
            return SUCCESS;
        }
        Err(RT_INVALID_DEVICEID) => return failed(RT_PARAM_INVALID),
        Err(e) => return failed(e),
    };
    // SAFETY: checked non-null out-pointer from the caller.
    unsafe { status.write(i32::from(enabled().contains(&p))) };
    SUCCESS
}
