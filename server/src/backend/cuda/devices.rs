//! What npud's CUDA devices are, from the driver's ordinals and, where it loads, NVML's
//! list of the host's GPUs. A device is either a GPU whose context npud may open for its
//! gRPC clients' streams, or one it keeps books for only, for the processes that use it:
//! - a GPU in EXCLUSIVE_PROCESS compute mode (as NVIDIA's MPS control daemon sets it, and
//!   as operators set a GPU one process is to own): a context of npud's there would be the
//!   only one, keeping every workload off it (or MPS's clients off its server);
//! - a GPU in PROHIBITED mode: no context may be made there;
//! - a MIG device (a GPU in MIG mode is its MIG devices, each with its own `MIG-…` UUID,
//!   budgeted apart): a process reaches one only through its `CUDA_VISIBLE_DEVICES`;
//! - a GPU NVML lists that npud's own CUDA view does not (its `CUDA_VISIBLE_DEVICES`).

use super::nvml::Gpu;

/// One CUDA ordinal of npud's own process.
#[derive(Debug, Clone)]
pub struct Ordinal {
    pub ordinal: i32,
    /// `CUdevice`, for cuDevicePrimaryCtxRetain.
    pub handle: i32,
    pub name: String,
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    pub compute_mode: u32,
}

/// One of npud's devices.
#[derive(Debug, Clone)]
pub struct Device {
    pub name: String,
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    /// The CUDA device whose primary context npud may open; None for books only.
    pub handle: Option<i32>,
    /// Why npud keeps books only there, as a gRPC stream call is told.
    pub books_only: Option<String>,
    /// How many processes may hold a context there at once, where the mode limits it.
    pub client_slots: Option<Slots>,
    /// The GPU it is or is part of (its UUID), whose XID events are its own.
    pub gpu: Option<String>,
}

/// Who limits a GPU's processes with a context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slots {
    /// EXCLUSIVE_PROCESS without MPS: one process.
    One,
    /// EXCLUSIVE_PROCESS with NVIDIA's MPS control daemon running: its server's client
    /// limit (48 client contexts per device on Volta and later through CUDA 13.0, 16 before
    /// Volta: NVIDIA's MPS documentation, "Client-Server Connection Limits"), configured as
    /// `[budget] mps_clients`.
    Mps,
}

impl Slots {
    pub fn slots(self, mps_clients: u32) -> u32 {
        match self {
            Slots::One => 1,
            Slots::Mps => mps_clients,
        }
    }
}

/// Whether NVIDIA's MPS control daemon runs: its pipe in `CUDA_MPS_PIPE_DIRECTORY`, else
/// the default `/tmp/nvidia-mps` (the MPS documentation's "CUDA_MPS_PIPE_DIRECTORY").
pub fn mps_running() -> bool {
    let dir = std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").filter(|d| !d.is_empty());
    let dir = dir.map_or_else(|| std::path::PathBuf::from("/tmp/nvidia-mps"), std::path::PathBuf::from);
    dir.join("control").exists()
}

/// The slots a GPU in compute mode `mode` has.
fn slots_of(mode: u32, mps: bool) -> Option<Slots> {
    (mode == EXCLUSIVE_PROCESS).then_some(if mps { Slots::Mps } else { Slots::One })
}

/// `CUcomputemode` / `nvmlComputeMode_t` values (they agree).
const PROHIBITED: u32 = 2;
const EXCLUSIVE_PROCESS: u32 = 3;

/// Why a GPU in compute mode `mode` gets books only, if it does.
fn mode_says(mode: u32, name: &str) -> Option<String> {
    match mode {
        EXCLUSIVE_PROCESS => Some(format!(
            "{name} is in compute mode EXCLUSIVE_PROCESS (MPS, or a GPU one process owns): npud keeps books for the \
             processes that use it and opens no context there, so it makes no streams there itself"
        )),
        PROHIBITED => Some(format!(
            "{name} is in compute mode PROHIBITED: no process may make a context there, npud included; npud keeps books only"
        )),
        _ => None,
    }
}

/// npud's devices: with NVML, every GPU of the host in NVML's order (a GPU in MIG mode as
/// its MIG devices); without it, the driver's ordinals.
pub fn assemble(ordinals: &[Ordinal], gpus: Option<&[Gpu]>, mps: bool) -> Vec<Device> {
    let Some(gpus) = gpus.filter(|g| !g.is_empty()) else {
        return ordinals
            .iter()
            .map(|o| {
                let books_only = mode_says(o.compute_mode, &format!("GPU {} ({})", o.ordinal, o.name));
                Device {
                    name: o.name.clone(),
                    uuid: o.uuid.clone(),
                    pci_bus_id: o.pci_bus_id.clone(),
                    handle: books_only.is_none().then_some(o.handle),
                    books_only,
                    client_slots: slots_of(o.compute_mode, mps),
                    gpu: o.uuid.clone(),
                }
            })
            .collect();
    };
    let mut out = Vec::new();
    for gpu in gpus {
        if !gpu.migs.is_empty() {
            for (uuid, name) in &gpu.migs {
                out.push(Device {
                    name: name.clone(),
                    uuid: Some(uuid.clone()),
                    pci_bus_id: None,
                    handle: None,
                    books_only: Some(format!(
                        "{uuid} is a MIG device of {}: npud keeps its books apart from its GPU's other MIG devices \
                         and makes no streams there itself",
                        gpu.uuid
                    )),
                    client_slots: None,
                    gpu: Some(gpu.uuid.clone()),
                });
            }
            continue;
        }
        let seen = ordinals.iter().find(|o| o.uuid.as_deref() == Some(gpu.uuid.as_str()));
        let books_only = mode_says(gpu.compute_mode, &format!("{} ({})", gpu.uuid, gpu.name)).or_else(|| {
            seen.is_none().then(|| {
                format!("{} is not among the GPUs npud's own CUDA_VISIBLE_DEVICES shows it: books only", gpu.uuid)
            })
        });
        out.push(Device {
            name: gpu.name.clone(),
            uuid: Some(gpu.uuid.clone()),
            pci_bus_id: seen.and_then(|o| o.pci_bus_id.clone()),
            handle: seen.filter(|_| books_only.is_none()).map(|o| o.handle),
            books_only,
            client_slots: slots_of(gpu.compute_mode, mps),
            gpu: Some(gpu.uuid.clone()),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ordinal(i: i32, mode: u32) -> Ordinal {
        Ordinal {
            ordinal: i,
            handle: i,
            name: "H100".into(),
            uuid: Some(format!("GPU-{i}")),
            pci_bus_id: None,
            compute_mode: mode,
        }
    }

    fn gpu(i: u32, mode: u32, migs: usize) -> Gpu {
        Gpu {
            uuid: format!("GPU-{i}"),
            name: "H100".into(),
            minor: Some(i),
            compute_mode: mode,
            migs: (0..migs).map(|k| (format!("MIG-{i}-{k}"), "H100 MIG 1g.10gb".into())).collect(),
        }
    }

    #[test]
    fn exclusive_and_prohibited_gpus_are_books_only_and_mig_gpus_are_their_instances() {
        let without = assemble(&[ordinal(0, 0), ordinal(1, 3)], None, false);
        assert_eq!((without[0].client_slots, without[1].client_slots), (None, Some(Slots::One)));
        assert_eq!(assemble(&[ordinal(1, 3)], None, true)[0].client_slots, Some(Slots::Mps));
        assert_eq!((without[0].handle, without[1].handle), (Some(0), None));
        assert!(without[1].books_only.as_ref().is_some_and(|w| w.contains("EXCLUSIVE_PROCESS")));

        let with = assemble(&[ordinal(0, 0), ordinal(1, 0)], Some(&[gpu(0, 0, 0), gpu(1, 0, 3), gpu(2, 2, 0)]), false);
        let uuids: Vec<_> = with.iter().map(|d| d.uuid.clone().unwrap()).collect();
        assert_eq!(uuids, ["GPU-0", "MIG-1-0", "MIG-1-1", "MIG-1-2", "GPU-2"]);
        assert_eq!(with[0].handle, Some(0));
        assert!(with[1..].iter().all(|d| d.handle.is_none() && d.books_only.is_some()));
        assert!(with[4].books_only.as_ref().is_some_and(|w| w.contains("PROHIBITED")));
    }
}
