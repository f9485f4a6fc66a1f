//! The device numbering entry points (the aclrtGet*DevId* pages): user, logical and physical
//! ids mapped through the process's numbering (`numbering.rs`).

use crate::*;

/// Maps one id through the process's numbering; ACL_ERROR_RT_INVALID_DEVICEID when it names
/// no device this process can see.
unsafe fn map_id(id: i32, out: *mut i32, map: impl FnOnce(&numbering::Numbering, i32) -> Option<u32>) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match map(&r.numbering, id) {
        // SAFETY: out-pointer from the caller.
        Some(v) => unsafe { put(out, v as i32) },
        None => npud_proto::codes::acl::RT_INVALID_DEVICEID,
    }
}

/// The vendor's note: "the logical device ID in this API is actually the user device ID";
/// aclrtGetPhyDevIdByUserDevId is its substitute. The fake answers both the same way.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetPhyDevIdByLogicDevId(logic: i32, phy: *mut i32) -> AclError {
    // SAFETY: forwarded out-pointer.
    unsafe { map_id(logic, phy, numbering::Numbering::physical_of_user) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetPhyDevIdByUserDevId(user: i32, phy: *mut i32) -> AclError {
    // SAFETY: forwarded out-pointer.
    unsafe { map_id(user, phy, numbering::Numbering::physical_of_user) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetUserDevIdByPhyDevId(phy: i32, user: *mut i32) -> AclError {
    // SAFETY: forwarded out-pointer.
    unsafe { map_id(phy, user, |n, p| u32::try_from(p).ok().and_then(|p| n.user_of_physical(p))) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetLogicDevIdByPhyDevId(phy: i32, logic: *mut i32) -> AclError {
    // SAFETY: forwarded out-pointer.
    unsafe { map_id(phy, logic, numbering::Numbering::logical_of_physical) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetLogicDevIdByUserDevId(user: i32, logic: *mut i32) -> AclError {
    // SAFETY: forwarded out-pointer.
    unsafe { map_id(user, logic, numbering::Numbering::logical_of_user) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetUserDevIdByLogicDevId(logic: i32, user: *mut i32) -> AclError {
    // SAFETY: forwarded out-pointer.
    unsafe { map_id(logic, user, numbering::Numbering::user_of_logical) }
}
