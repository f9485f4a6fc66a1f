//! `libnpud_preload.so`: loaded with `LD_PRELOAD` into an unmodified program, it makes
//! npud the admission authority for the streams the program creates natively. Before the
//! vendor creates a stream or a context (each context holds a default stream) the hook asks
//! npud for budget; destruction, device reset and process death give it back. Kernels,
//! event records and waits, and synchronisation never touch npud: the data path stays
//! native.
//!
//! It interposes AscendCL (`aclInit`, `aclrt*`, the `aclmdlRI*` capture calls) and the
//! CUDA driver (`cuInit`, `cuStreamCreate*`, `cuStreamDestroy*`, `cuCtxDestroy_v2`, the
//! primary-context calls, `cuGetProcAddress(_v2)`).
//!
//! Layers: [`ffi`] (unsafe code: exported hooks per vendor, `dlsym`, finding the real
//! vendor functions; the only other unsafe line is [`sys`]'s non-blocking receive) →
//! [`process`] (per-process state, fork-aware) → [`books`] (what the process holds, pure;
//! [`events`] likewise) and [`wire`] (a blocking client of npud's budget wire; no async
//! runtime in a foreign process). Nothing runs in a library constructor: the first
//! hooked call connects.

pub mod books;
pub mod capture;
pub mod devices;
pub mod events;
#[allow(unsafe_code)]
mod ffi;
pub mod process;
pub mod settings;
#[allow(unsafe_code)]
mod sys;
pub mod wire;
