//! Links the fake as the vendor links its runtime library: the soname `libruntime.so`, and
//! `-Bsymbolic`, with which libruntime.so is linked in the open runtime
//! (hicann/runtime `src/runtime/cmake/runtime.cmake`): its own entry points calling one
//! another (`rtStreamCreate` is `rtStreamCreateWithFlags`; `api_c_stream.cc`) never go
//! through the dynamic symbol table, so an interposer sees each call once, by the name the
//! caller used.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libruntime.so");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
}
