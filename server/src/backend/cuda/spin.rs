//! The spin kernel delay work runs on: a PTX kernel that spins one thread until
//! `%globaltimer` has advanced, loaded into a device's context when npud opens it.

use super::ffi::{Cuda, Lib};
use super::result::check;

/// Spins one thread until %globaltimer has advanced by `ns` nanoseconds.
const SPIN_PTX: &str = ".version 6.0
.target sm_50
.address_size 64
.visible .entry npud_spin(.param .u64 ns)
{
    .reg .pred p;
    .reg .u64 start, now, target, d;
    ld.param.u64 d, [ns];
    mov.u64 start, %globaltimer;
    add.u64 target, start, d;
spin:
    mov.u64 now, %globaltimer;
    setp.lt.u64 p, now, target;
    @p bra spin;
    ret;
}
";

/// Loads the spin kernel into the current context. Done as the context is opened, before
/// any host function of npud's runs in it, never on first use of delay work: on real
/// hardware cuModuleLoadData waits for the context's running host functions, so loading it
/// behind a BLOCK callback would wait for an acknowledgement that cannot come while the
/// caller is stuck here (seen on an H100, docs/hardware.md).
pub(super) fn load(lib: &Lib) -> Result<usize, String> {
    let ptx = std::ffi::CString::new(SPIN_PTX).map_err(|e| e.to_string())?;
    let (mut module, mut function) = (0usize, 0usize);
    check(lib.module_load_data(&mut module, &ptx)).map_err(|e| format!("cuModuleLoadData: {}", e.message))?;
    check(lib.module_get_function(&mut function, module, c"npud_spin")).map_err(|e| e.message)?;
    Ok(function)
}
