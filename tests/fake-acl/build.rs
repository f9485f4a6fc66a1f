//! Gives the fake the soname the vendor's library has, so programs link against it as they
//! would against the real one and `dlopen(..., RTLD_NOLOAD)` finds it by that name.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libascendcl.so");
}
