//! `libnpud_preload.so`: loaded with `LD_PRELOAD` into an unmodified program, it makes
//! npud the admission authority for the streams the program creates natively. Before the
//! vendor creates a stream or a context (each context holds a default stream) the hook asks
//! npud for budget; destruction, device reset and process death give it back. Kernels,
//! event records and waits, and synchronisation never touch npud: the data path stays
//! native.
//!
//! It interposes AscendCL (`aclInit`, `aclrt*`, the `aclmdlRI*` capture calls; and the
//! thread's last error and `aclGetRecentErrMsg`, which also tell of npud's refusals) and the
//! CUDA driver (`cuInit`, `cuStreamCreate*`, `cuStreamDestroy*`, `cuCtxDestroy_v2`, the
//! primary-context calls, `cuGetProcAddress(_v2)`).
//!
//! Layers: `ffi` (unsafe code: exported hooks per vendor, `dlsym`, finding the real
//! vendor functions; the only other unsafe code is `sys`: a non-blocking receive and a
//! coarse clock) → [`process`] (per-process state, fork-aware) → [`books`] (what the
//! process holds, pure; [`events`] likewise) and [`wire`] (a blocking client of npud's
//! budget wire; no async runtime in a foreign process). Nothing runs in a library
//! constructor: the first hooked call connects.

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

/// The interposer's maps: keyed by the process's own handles and device numbers, hashed
/// with foldhash instead of SipHash, which was a fifth of the hooks' cost around each
/// stream creation. Nothing outside the process chooses these keys, so SipHash's
/// resistance to chosen keys buys nothing here.
pub type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;
/// A set hashed as [`Map`] is.
pub type Set<T> = std::collections::HashSet<T, foldhash::fast::FixedState>;
