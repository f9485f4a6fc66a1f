//! A fake `libdcmi.so` (Ascend's DCMI, the device management interface the device plugin and
//! npu-smi use), for the calls npud makes, with the signatures of `dcmi_interface_api.h`
//! (mind-cluster `component/ascend-common/devmanager/dcmi`): `dcmi_init`,
//! `dcmi_get_card_id_device_id_from_phyid` and `dcmi_get_device_errorcode_v2`.
//!
//! The NPUs are the fake AscendCL's (`NPU_SIM_DEVICES`): card `N` holds one chip, device 0,
//! whose physical id is `N`, as on a host of single-chip cards (an Atlas 800 A2's). The
//! error codes each holds are injected across processes through a file a test writes:
//! `NPU_SIM_DCMI_FAULTS`, one `PHYSICAL_ID HEX_CODE` per line (read on every call, so a
//! line removed is a fault cleared). DCMI returns 0 on success; a card it does not know is
//! -8005 (DCMI_ERR_CODE_INVALID_DEVICE_ID).

use std::ffi::{c_int, c_uint};

const SUCCESS: c_int = 0;
const INVALID_PARAMETER: c_int = -8001;
const INVALID_DEVICE_ID: c_int = -8005;

fn devices() -> c_int {
    std::env::var("NPU_SIM_DEVICES").ok().and_then(|v| v.parse().ok()).unwrap_or(1)
}

/// The codes NPU `physical` holds now.
pub fn codes(physical: c_int) -> Vec<c_uint> {
    let Some(path) = std::env::var_os("NPU_SIM_DCMI_FAULTS") else { return Vec::new() };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let phy: c_int = w.next()?.parse().ok()?;
            let code = c_uint::from_str_radix(w.next()?.trim_start_matches("0x"), 16).ok()?;
            (phy == physical).then_some(code)
        })
        .collect()
}

#[unsafe(no_mangle)]
pub extern "C" fn dcmi_init() -> c_int {
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dcmi_get_card_id_device_id_from_phyid(
    card: *mut c_int,
    device: *mut c_int,
    phy: c_uint,
) -> c_int {
    if card.is_null() || device.is_null() {
        return INVALID_PARAMETER;
    }
    let Ok(phy) = c_int::try_from(phy) else { return INVALID_DEVICE_ID };
    if phy >= devices() {
        return INVALID_DEVICE_ID;
    }
    // SAFETY: the caller's non-null out-pointers.
    unsafe {
        card.write(phy);
        device.write(0);
    }
    SUCCESS
}

/// The error codes the chip holds: as many as fit in `list_len`, `error_count` set to how
/// many it holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dcmi_get_device_errorcode_v2(
    card: c_int,
    device: c_int,
    error_count: *mut c_int,
    list: *mut c_uint,
    list_len: c_uint,
) -> c_int {
    if error_count.is_null() || (list.is_null() && list_len > 0) {
        return INVALID_PARAMETER;
    }
    if card < 0 || card >= devices() || device != 0 {
        return INVALID_DEVICE_ID;
    }
    let codes = codes(card);
    for (i, code) in codes.iter().take(list_len as usize).enumerate() {
        // SAFETY: the caller's list of `list_len` entries; i < list_len.
        unsafe { list.add(i).write(*code) };
    }
    // SAFETY: the caller's non-null out-pointer.
    unsafe { error_count.write(codes.len() as c_int) };
    SUCCESS
}
