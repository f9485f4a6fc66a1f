//! Links the fake as the vendor links its runtime.
//!
//! - The soname the vendor's library has, so programs link against it as they would against
//!   the real one and `dlopen(..., RTLD_NOLOAD)` finds it by that name.
//! - `-Bsymbolic`: in the open runtime the exported `aclrt*` functions reach their
//!   implementations inside libruntime.so, which is linked `-Wl,-Bsymbolic`
//!   (shared/reference/interposition.md §1.2), so one entry point never calls another
//!   through the dynamic symbol table. Without it the fake's `aclrtCreateStream`, which
//!   shares `aclrtCreateStreamWithConfig`'s code, reached an interposer's hook of the
//!   latter, and a program's call that an interposer missed still looked admitted.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libascendcl.so");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
}
