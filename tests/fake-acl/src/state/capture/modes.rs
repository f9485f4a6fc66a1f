//! Capture modes: which thread may call the "unsafe" functions while a capture is under
//! way. The pages (aclmdlRICaptureBegin, aclmdlRICaptureThreadExchangeMode) name them
//! (aclrtMemset, aclrtMemcpy, aclrtMemcpy2d, and async copies through host memory that is
//! not page-locked) and give the rules; the open runtime (`Context::IsCaptureModeSupport`,
//! checked by `ApiImpl::MemCopySync`, `MemSetSync` and the others) decides from three
//! modes, 0 GLOBAL (strictest) to 2 RELAXED:
//!
//! - the context's: the strictest of the captures under way in it (none: any call goes);
//! - the calling thread's exchange mode (aclmdlRICaptureThreadExchangeMode; GLOBAL until
//!   it is set): RELAXED lets every call go;
//! - the calling thread's own: the strictest of the captures it began.
//!
//! A thread in GLOBAL exchange mode may not call one while the context has a GLOBAL
//! capture or the thread a THREAD_LOCAL one; in THREAD_LOCAL exchange mode, while the
//! thread has a GLOBAL or THREAD_LOCAL capture of its own. Refused:
//! ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT. The fake checks aclrtMemcpy and aclrtMemset, the
//! unsafe functions it has.

use super::Captures;
use crate::state::{Rt, current_context};
use npud_proto::codes::acl::{AclError, RT_CAPTURE_MODE_NOT_SUPPORT, RT_CONTEXT_NULL, RT_PARAM_INVALID};
use std::cell::Cell;

pub const GLOBAL: u32 = 0;
pub const THREAD_LOCAL: u32 = 1;
pub const RELAXED: u32 = 2;
/// No capture: the runtime's RT_STREAM_CAPTURE_MODE_MAX.
const NONE: u32 = 3;

/// Captures under way by mode.
type Counts = [u32; 3];

thread_local! {
    /// The calling thread's exchange mode; a thread starts in GLOBAL, the strictest.
    static EXCHANGE: Cell<u32> = const { Cell::new(GLOBAL) };
    /// The captures the calling thread began and has not ended, by mode.
    static OWN: Cell<Counts> = const { Cell::new([0; 3]) };
}

/// aclmdlRICaptureThreadExchangeMode: sets the calling thread's mode to `mode` and returns
/// the one it had. A mode past RELAXED is RT_ERROR_INVALID_VALUE (107000), checked first
/// (`ApiErrorDecorator::ThreadExchangeCaptureMode`, hicann/runtime
/// `feature/aclgraph/api_error_aclgraph.cc` 161-171); then a thread with no current context
/// is ACL_ERROR_RT_CONTEXT_NULL (`ApiImpl::ThreadExchangeCaptureMode`,
/// `feature/aclgraph/v100/api_impl_aclgraph.cc` 169-175).
pub fn exchange_thread_mode(mode: u32) -> Result<u32, AclError> {
    if mode > RELAXED {
        return Err(RT_PARAM_INVALID);
    }
    if current_context().is_none() {
        return Err(RT_CONTEXT_NULL);
    }
    Ok(EXCHANGE.with(|m| m.replace(mode)))
}

fn strictest(counts: Counts) -> u32 {
    counts.iter().position(|n| *n > 0).map_or(NONE, |m| m as u32)
}

impl Captures {
    /// A capture in `mode` began in context `ctx` on the calling thread.
    pub(super) fn mode_entered(&mut self, ctx: usize, mode: u32) {
        self.modes.entry(ctx).or_default()[mode as usize] += 1;
        OWN.with(|own| {
            let mut counts = own.get();
            counts[mode as usize] += 1;
            own.set(counts);
        });
    }

    /// A capture in `mode` of context `ctx` ended; `caller`: on the calling thread's
    /// account (the runtime takes it off the thread that ends it).
    pub(super) fn mode_exited(&mut self, ctx: usize, mode: u32, caller: bool) {
        if let Some(counts) = self.modes.get_mut(&ctx) {
            counts[mode as usize] = counts[mode as usize].saturating_sub(1);
            if strictest(*counts) == NONE {
                self.modes.remove(&ctx);
            }
        }
        if caller {
            OWN.with(|own| {
                let mut counts = own.get();
                counts[mode as usize] = counts[mode as usize].saturating_sub(1);
                own.set(counts);
            });
        }
    }
}

impl Rt {
    /// Whether the calling thread may call an unsafe function now (module docs).
    pub fn unsafe_call_allowed(&self) -> Result<(), AclError> {
        let Some(ctx) = current_context() else { return Ok(()) };
        let context = self.captures().modes.get(&(ctx as usize)).copied().map_or(NONE, strictest);
        if context == NONE {
            return Ok(());
        }
        let own = OWN.with(|own| strictest(own.get()));
        let refused = match EXCHANGE.with(Cell::get) {
            GLOBAL => context == GLOBAL || own == THREAD_LOCAL,
            THREAD_LOCAL => own == GLOBAL || own == THREAD_LOCAL,
            _ => false,
        };
        if refused { Err(RT_CAPTURE_MODE_NOT_SUPPORT) } else { Ok(()) }
    }
}
