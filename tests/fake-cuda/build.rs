//! Links the fake so that its entry points reach one another inside the library
//! (`-Bsymbolic`), never through the dynamic symbol table: `cuStreamCreate` shares
//! `cuStreamCreateWithPriority`'s code, and without it a program's call to the one reached
//! an interposer's hook of the other, so a hook missing for one name looked present.
//! NVIDIA does not say how the driver's entry points are linked; the fake chooses what
//! makes each of a program's calls reach an interposer once, by the name it used, as the
//! AscendCL fake does (where the vendor's runtime is documented to be linked so).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
}
