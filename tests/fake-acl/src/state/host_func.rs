//! aclrtLaunchHostFunc (its page in the CANN runtime API): a host function issued to a
//! stream's task queue, run when the stream reaches it on a thread the runtime creates and
//! registers on the stream itself, blocking the stream's later tasks until it returns. The
//! other way to run callbacks (aclrtLaunchCallback, with a thread of the program's own
//! subscribed by aclrtSubscribeReport) must not be mixed with it on one stream.
//!
//! As the open runtime does it (`ApiImpl::LaunchHostFunc`, `ApiErrorDecorator`): NULL names
//! the current context's default stream; a NULL function is ACL_ERROR_RT_PARAM_INVALID; a
//! stream a program's thread subscribed is ACL_ERROR_RT_STREAM_SUBSCRIBE; the first call
//! starts the thread (failing to is ACL_ERROR_RT_MEMORY_ALLOCATION) and each new stream is
//! subscribed to it, so the program's aclrtSubscribeReport of that stream is then refused
//! as a second subscription. The runtime keeps one such thread per context; the fake keeps
//! one per process, which a program cannot tell apart.

use crate::state::{Rt, rt};
use crate::{AclError, Handle, with_rt};
use npud_proto::codes::acl::{
    RT_MEMORY_ALLOCATION, RT_PARAM_INVALID, RT_REPORT_TIMEOUT, RT_STREAM_NO_CB_REG, RT_STREAM_SUBSCRIBE,
    RT_THREAD_SUBSCRIBE,
};
use std::ffi::c_void;
use std::sync::OnceLock;

/// The host-function thread as the subscription tables name it: never a program's thread
/// (those are `pthread_self` values, addresses).
pub const THREAD: u64 = u64::MAX;

/// Whether the host-function thread started (tried once).
static STARTED: OnceLock<bool> = OnceLock::new();

fn start() -> Result<(), AclError> {
    let started = STARTED.get_or_init(|| {
        let Some(r) = rt() else { return false };
        r.keep_subscribed(THREAD);
        std::thread::Builder::new().name("fake-acl-hostfn".into()).spawn(move || run(r)).is_ok()
    });
    if *started { Ok(()) } else { Err(RT_MEMORY_ALLOCATION) }
}

/// Runs host functions as their streams reach them, for the life of the process.
fn run(r: &'static Rt) {
    loop {
        // Only the wait's end (a timeout) can come back: the thread counts as subscribed.
        let _ = r.process_report(THREAD, -1, RT_THREAD_SUBSCRIBE, RT_REPORT_TIMEOUT);
    }
}

pub type AclrtHostFunc = Option<unsafe extern "C" fn(args: *mut c_void)>;

#[unsafe(no_mangle)]
pub extern "C" fn aclrtLaunchHostFunc(stream: Handle, func: AclrtHostFunc, args: *mut c_void) -> AclError {
    let Some(func) = func else { return crate::failed(RT_PARAM_INVALID) };
    with_rt(|r| {
        let stream = r.resolve(stream)?;
        r.stream(stream)?;
        start()?;
        r.subscribe_host_func(stream, RT_STREAM_SUBSCRIBE)?;
        r.launch_callback(func, args as usize, true, stream, RT_STREAM_NO_CB_REG)
    })
}
