//! The device entry points: the driver's version, how many devices there are, each one's
//! ordinal, name, UUID and PCI bus id (what `visible.rs` makes of CUDA_VISIBLE_DEVICES).

use crate::*;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut i32) -> CuResult {
    // SAFETY: out-pointer from the caller.
    unsafe { put(v, 12080) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(n: *mut i32) -> CuResult {
    match rt() {
        // SAFETY: out-pointer from the caller.
        Ok(r) => unsafe { put(n, r.visible.len() as i32) },
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut i32, ordinal: i32) -> CuResult {
    let r = runtime!();
    if let Err(e) = r.physical(ordinal) {
        return e;
    }
    // SAFETY: out-pointer from the caller.
    unsafe { put(dev, ordinal) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: i32, dev: i32) -> CuResult {
    let text = format!("npu-sim fake GPU {dev}\0");
    if name.is_null() || len <= 0 {
        return INVALID_VALUE;
    }
    let n = text.len().min(len as usize);
    // SAFETY: the caller provides `len` writable bytes at `name`; we write at most that,
    // and the copied text ends with a NUL when it fits.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), name, n) };
    SUCCESS
}

/// cuDeviceGetUuid(_v2): the device's 16-byte UUID (`CUuuid`), stable across processes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: i32) -> CuResult {
    let r = runtime!();
    match r.physical(dev) {
        // SAFETY: out-pointer to a CUuuid from the caller.
        Ok(p) => unsafe { put(uuid, visible::uuid_bytes(p)) },
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: i32) -> CuResult {
    // SAFETY: forwarded out-pointer.
    unsafe { cuDeviceGetUuid_v2(uuid, dev) }
}

/// cuDeviceGetPCIBusId: `domain:bus:device.function`, NUL-terminated, at most `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(out: *mut c_char, len: i32, dev: i32) -> CuResult {
    let r = runtime!();
    let p = match r.physical(dev) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let text = format!("{}\0", visible::pci_bus_id(p));
    if out.is_null() || len < text.len() as i32 {
        return INVALID_VALUE;
    }
    // SAFETY: the caller provides `len` writable bytes at `out`, which hold the text.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), out, text.len()) };
    SUCCESS
}
