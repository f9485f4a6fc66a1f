//! fork(2) in a process whose fake runtime runs the simulator, as Python's
//! multiprocessing does with its "fork" start method once a framework is imported.
//!
//! The vendor does not support AscendCL calls in processes made with fork: they may fail
//! or hang (the AscendCL usage constraints, "关于进程": 不支持使用fork函数创建多个进程，且在
//! 进程中调用AscendCL接口的场景，否则进程运行时会报错或者卡死). fake-acl still lets a
//! child make and destroy streams, deterministically, because the interposer's fork
//! handling is tested through it; what it must not do is hang at random. (fake-cuda
//! answers a child CUDA_ERROR_NOT_INITIALIZED, as an H100's driver was seen to.)
//!
//! The child has only the forking thread: a lock that one of the simulator's own threads
//! (a device's timer, the report thread) held at that moment stays locked in the child for
//! ever, and the child's first device call blocks (seen: a child of `acl_fork` stuck in
//! aclrtSetDevice, once in about a thousand forks). The `pthread_atfork` way
//! (reference/interposition.md, 3.3): the forking thread takes those locks just before the
//! fork and releases them just after, in the parent and in the child. The child does not
//! get the threads back, so timed work it launches never finishes for it: the vendor's
//! "hang", kept where the vendor documents it.
#![allow(unsafe_code)]

use std::any::Any;
use std::cell::RefCell;
use std::sync::OnceLock;

/// What the fake runtime holds across a fork: its own locks and the simulator's
/// ([`crate::SimDevice::hold_for_fork`], [`crate::fleet::Reports::hold_for_fork`]),
/// taken in the order its threads nest them. None before the runtime is initialised.
pub type Hold = fn() -> Option<Box<dyn Any>>;

static HOLD: OnceLock<Hold> = OnceLock::new();

thread_local! {
    /// From the prepare handler to the parent's or the child's: all three run on the
    /// forking thread, and the child is a copy of it.
    static HELD: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

extern "C" fn prepare() {
    if let Some(held) = HOLD.get().and_then(|hold| hold()) {
        HELD.with(|h| *h.borrow_mut() = Some(held));
    }
}

extern "C" fn after() {
    HELD.with(|h| drop(h.borrow_mut().take()));
}

/// Makes forks take `hold` first. Once per process; later calls change nothing.
pub fn register(hold: Hold) {
    if HOLD.set(hold).is_ok() {
        // SAFETY: three plain functions that live as long as the library; pthread_atfork
        // only records them.
        unsafe { libc::pthread_atfork(Some(prepare), Some(after), Some(after)) };
    }
}
