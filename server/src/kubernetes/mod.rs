//! npud as the kubelet's device plugin for streams (issue 15): streams become the
//! extended resource `npud.io/streams` in units of `stream_unit`, and a container's
//! allocation becomes its tenant's quota.
//!
//! Allocate carries no pod identity (shared/reference/kubelet.md §6, §10), so the binding
//! goes the other way: Allocate mints a random token, writes it to a file npud owns and
//! mounts that file read-only into the container (`$NPUD_ALLOCATION`). The first tenant
//! that presents the token (session open's `npud-allocation` metadata, the budget wire's
//! hello) is bound to it and gets the allocation as its quota: `max_streams` and a
//! reservation of units × stream_unit. Another tenant presenting the same token is
//! refused, so a token copied out of one container does not buy another its streams.

pub mod cri;
pub mod dra;
pub mod edits;
pub mod interposer;
pub mod plugin;
pub mod pods;
pub mod register;

/// Installs the interposer npud ships (`preload_library`) on the host under its content
/// hash (`preload_dir`, else `<state_dir>/lib`) and removes the ones no allocation uses
/// any more. None, logged, when npud ships none: allocated containers then get no
/// interposer. An install directory or file anyone but root could have written is an
/// error npud does not start with: what is installed there runs in every pod.
pub fn install_interposer(
    k8s: &crate::config::kubernetes::KubernetesConfig,
    state_dir: Option<&std::path::Path>,
    allocations: &crate::policy::allocations::Allocations,
) -> Result<Option<interposer::Installed>, String> {
    if !k8s.preload_library.is_file() {
        tracing::warn!(library = %k8s.preload_library.display(), "no interposer to install: allocated containers get none, and unmodified programs are not admitted");
        return Ok(None);
    }
    let dir = k8s
        .preload_dir
        .clone()
        .unwrap_or_else(|| state_dir.unwrap_or(std::path::Path::new("/var/lib/npud")).join("lib"));
    let installed = interposer::install(&k8s.preload_library, &dir, Some(&k8s.interposer_glibc))
        .map_err(|e| format!("cannot install the interposer in {} ([kubernetes] preload_dir): {e}", dir.display()))?;
    interposer::remove_unused(&dir, &installed.name(), &allocations.libraries());
    tracing::info!(library = %installed.library.display(), "the interposer is installed for allocated containers");
    Ok(Some(installed))
}
