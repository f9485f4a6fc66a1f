//! aclrtRegStreamStateCallback: callbacks the runtime calls when a stream is made or is
//! about to go. The vendor's page: "when a stream's state changes (aclrtCreateStream,
//! aclrtDestroyStream, ...), the runtime calls the callback; the streams include explicitly
//! created streams and default streams". The open runtime (`StreamStateCallbackManager`)
//! keeps the callbacks by name, calls them in the order of their names, outside its lock,
//! with ACL_RT_STREAM_STATE_CREATE_POST once a stream is made and
//! ACL_RT_STREAM_STATE_DESTROY_PRE before one is freed, including the streams a context's
//! teardown frees (a device reset, aclrtDestroyContext) and the context's default stream.
//!
//! Registration: a NULL name is ACL_ERROR_INVALID_PARAM (the ACL layer checks it), a NULL
//! callback removes the name's registration (none is no error), and a name registered
//! already is ACL_ERROR_RT_PARAM_INVALID ("The callback name has already been
//! registered"). The fake calls the callbacks with its own locks released, though a
//! context's are still held (as its creation or teardown is under way): a callback that
//! sets or resets a device waits for ever, as one that calls back into a context's
//! creation would on the device.

use crate::Handle;
use npud_proto::codes::acl::{AclError, INVALID_PARAM, RT_PARAM_INVALID, SUCCESS};
use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_void};
use std::sync::Mutex;

/// aclrtStreamState.
pub const CREATE_POST: u32 = 1;
pub const DESTROY_PRE: u32 = 2;

/// aclrtStreamStateCallback.
pub type StreamStateCallback = unsafe extern "C" fn(Handle, u32, *mut c_void);

/// The registered callbacks by name, with their user data (kept as an address).
static CALLBACKS: Mutex<BTreeMap<Vec<u8>, (StreamStateCallback, usize)>> = Mutex::new(BTreeMap::new());

/// Calls every registered callback for `stream` entering `state`.
pub fn notify(stream: usize, state: u32) {
    let callbacks: Vec<(StreamStateCallback, usize)> = {
        let map = CALLBACKS.lock().unwrap_or_else(|e| e.into_inner());
        if map.is_empty() {
            return;
        }
        map.values().copied().collect()
    };
    for (callback, args) in callbacks {
        // SAFETY: a function the program registered for exactly this call, with the user
        // data it gave.
        unsafe { callback(stream as Handle, state, args as *mut c_void) };
    }
}

/// aclrtRegStreamStateCallback(regName, callback, args).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtRegStreamStateCallback(
    name: *const c_char,
    callback: Option<StreamStateCallback>,
    args: *mut c_void,
) -> AclError {
    if name.is_null() {
        return crate::failed(INVALID_PARAM);
    }
    // SAFETY: a NUL-terminated string from the caller (the page requires it), non-null.
    let name = unsafe { CStr::from_ptr(name) }.to_bytes().to_vec();
    let mut map = CALLBACKS.lock().unwrap_or_else(|e| e.into_inner());
    match callback {
        None => {
            map.remove(&name);
            SUCCESS
        }
        Some(_) if map.contains_key(&name) => crate::failed(RT_PARAM_INVALID),
        Some(callback) => {
            map.insert(name, (callback, args as usize));
            SUCCESS
        }
    }
}
