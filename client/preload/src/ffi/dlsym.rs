//! Our `dlsym`: a program that looks one of our AscendCL or CUDA driver names up gets our
//! hook (torch_npu ≤ 26.0 and MindSpore find the runtime with `dlopen` + `dlsym(handle)`,
//! a static cudart finds `cuGetProcAddress` that way); every other lookup is glibc's own.
//!
//! glibc's `dlsym` depends on who calls it: `RTLD_NEXT` means "the next definition after
//! the object the call comes from", which glibc reads off the return address. So a
//! lookup we do not answer must reach glibc's `dlsym` by a jump, not a call: called from
//! here, another preload's `dlsym(RTLD_NEXT, "f")` would be answered as if it came from
//! this library. A wrapper loaded after us then got its own `f` back and recursed until
//! the stack ran out (`npuctl run` puts this library before the user's `LD_PRELOAD`), and
//! a wrapper loaded before us skipped our hooks and created streams npud never admitted.
//! The entry point is therefore a few instructions of assembly (x86_64, aarch64) that ask
//! [`decide`] and then either return its answer or jump to glibc's `dlsym` with the
//! caller's registers and return address untouched. Elsewhere a plain function calls it,
//! and `RTLD_NEXT` lookups answer as if made from here.
//!
//! The pass-through path takes no lock and allocates nothing: Rust's std and the dynamic
//! loader call `dlsym` too.

use super::vendor::{ACL, CUDA, REAL_DLSYM, RUNTIME, Vendor, find, real_dlsym};
use super::{Handle, acl, capture, cuda, errors, launch, rt};
use std::ffi::{CStr, c_char, c_void};
use std::ptr::null_mut;
use std::sync::atomic::Ordering;

/// [`decide`]'s "not ours: glibc answers". No function or object lives at address 1.
const PASS: usize = 1;

/// Which vendor library `name` belongs to, and our hook for it, if we interpose it.
fn ours(name: &[u8]) -> Option<(&'static Vendor, *mut c_void)> {
    if name.starts_with(b"aclrt")
        || name.starts_with(b"aclmdl")
        || name.starts_with(b"aclGet")
        || name.starts_with(b"aclop")
        || name == b"aclInit"
    {
        let hook = acl::ours(name).or_else(|| capture::ours(name)).or_else(|| errors::ours(name));
        Some((&ACL, hook.or_else(|| launch::ours_acl(name))?))
    } else if name.starts_with(b"rt") {
        Some((&RUNTIME, rt::ours(name).or_else(|| launch::ours_rt(name))?))
    } else if name.starts_with(b"cu") {
        Some((&CUDA, cuda::ours(name)?))
    } else {
        None
    }
}

/// What our `dlsym` answers for (`handle`, `name`): [`PASS`] for glibc's answer, else
/// the answer itself (our hook, or null).
///
/// For one of our names:
/// - where glibc finds the vendor's definition in the handle the program gave: our hook;
/// - where `RTLD_DEFAULT` finds a definition other than ours: the program defines the name
///   itself (only it comes before the preloads), so that one;
/// - where it finds our own export (`RTLD_DEFAULT`, or a handle whose scope holds the
///   preloads): our hook only if a loaded vendor library defines the name. Without us
///   that lookup would find nothing, and a program probing for a function (torch_npu takes
///   `aclrtCreateEventExWithFlag` where it exists and falls back where it does not) must
///   not be told that one exists when it does not.
extern "C" fn decide(handle: Handle, name: *const c_char) -> *mut c_void {
    let Some(real) = real_dlsym() else { return null_mut() };
    if name.is_null() || handle == libc::RTLD_NEXT {
        return PASS as *mut c_void;
    }
    // SAFETY: dlsym's contract: name is a NUL-terminated string.
    let cname = unsafe { CStr::from_ptr(name) };
    let Some((library, hook)) = ours(cname.to_bytes()) else { return PASS as *mut c_void };
    // SAFETY: forwarded as called. The caller's address differs, which glibc uses for
    // RTLD_NEXT (answered above) and for RTLD_DEFAULT's scope, the global one for us.
    let sym = unsafe { real(handle, name) };
    if sym.is_null() {
        return null_mut();
    }
    if sym != hook {
        if handle == libc::RTLD_DEFAULT {
            // Defined before the preloads in the search order: by the program itself.
            return sym;
        }
        library.handle.store(handle, Ordering::Release);
        return hook;
    }
    if find(library, cname, hook).is_null() { null_mut() } else { hook }
}

#[cfg(target_arch = "x86_64")]
mod entry {
    use super::{Handle, PASS, REAL_DLSYM, decide};
    use std::ffi::c_char;

    /// `dlsym(3)`: [`decide`]'s answer, or a jump to glibc's. On entry `rsp` is 8 past a
    /// 16-byte boundary; two pushes and 8 bytes more align the call as the ABI requires.
    ///
    /// # Safety
    /// The same contract as dlsym(3).
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn dlsym(handle: Handle, name: *const c_char) -> Handle {
        core::arch::naked_asm!(
            "push rdi",
            "push rsi",
            "sub rsp, 8",
            "call {decide}",
            "add rsp, 8",
            "pop rsi",
            "pop rdi",
            "cmp rax, {pass}",
            "jne 2f",
            "jmp qword ptr [rip + {real}]",
            "2:",
            "ret",
            decide = sym decide,
            real = sym REAL_DLSYM,
            pass = const PASS,
        )
    }
}

#[cfg(target_arch = "aarch64")]
mod entry {
    use super::{Handle, PASS, REAL_DLSYM, decide};
    use std::ffi::c_char;

    /// `dlsym(3)`: [`decide`]'s answer, or a branch to glibc's with the caller's link
    /// register restored (x16, the intra-procedure-call register, carries the target; a
    /// `br x16` may land on glibc's `bti c`).
    ///
    /// # Safety
    /// The same contract as dlsym(3).
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn dlsym(handle: Handle, name: *const c_char) -> Handle {
        core::arch::naked_asm!(
            "stp x29, x30, [sp, #-32]!",
            "mov x29, sp",
            "stp x0, x1, [sp, #16]",
            "bl {decide}",
            "mov x16, x0",
            "ldp x0, x1, [sp, #16]",
            "ldp x29, x30, [sp], #32",
            "cmp x16, #{pass}",
            "b.ne 2f",
            "adrp x16, {real}",
            "ldr x16, [x16, :lo12:{real}]",
            "br x16",
            "2:",
            "mov x0, x16",
            "ret",
            decide = sym decide,
            real = sym REAL_DLSYM,
            pass = const PASS,
        )
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod entry {
    use super::{Handle, PASS, decide, real_dlsym};
    use std::ffi::c_char;

    /// `dlsym(3)` where no jump is written: glibc's answer is asked from here, so an
    /// `RTLD_NEXT` lookup answers as if this library made it.
    ///
    /// # Safety
    /// The same contract as dlsym(3).
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn dlsym(handle: Handle, name: *const c_char) -> Handle {
        let answer = decide(handle, name);
        match (answer as usize == PASS, real_dlsym()) {
            // SAFETY: forwarded as called.
            (true, Some(real)) => unsafe { real(handle, name) },
            (true, None) => std::ptr::null_mut(),
            (false, _) => answer,
        }
    }
}
