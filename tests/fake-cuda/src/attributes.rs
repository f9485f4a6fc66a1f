//! cuDeviceGetAttribute, as shared/reference/cuda.md and `cuda.h` give it:
//! `(int *value, CUdevice_attribute attrib, CUdevice dev)`. Programs ask it for the compute
//! capability (75/76), the multiprocessor count (16) and whether stream priorities work
//! (78) before they size launches or pick kernels, as cudart's cudaGetDeviceProperties
//! does at start-up. The figures are an 80 GiB A100's (what `cuMemGetInfo` reports here);
//! the PCI ids are the device's own, the same as `cuDeviceGetPCIBusId` spells them.
//! Attributes of the enumeration that are not modelled answer 0 (the feature is absent); a
//! number past the enumeration is CUDA_ERROR_INVALID_VALUE, as a driver older than the
//! attribute answers.

use crate::{CuResult, INVALID_VALUE, put, visible};

/// The last attribute number this fake driver knows: CUDA 12.9's enumeration ends at 143
/// (HOST_NUMA_MULTINODE_IPC_SUPPORTED), which cuda-bindings 12.9 may ask a 12.8 driver for.
const LAST_ATTRIBUTE: i32 = 143;

/// An A100's SMs: its multiprocessor count, and what a green context's resource holds.
pub(crate) const MULTIPROCESSORS: u32 = 108;

/// CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, _PCI_DEVICE_ID and _PCI_DOMAIN_ID.
const PCI_BUS_ID: i32 = 33;
const PCI_DEVICE_ID: i32 = 34;
const PCI_DOMAIN_ID: i32 = 50;

/// The device's compute mode (CU_COMPUTEMODE_*), as an admin set it with `nvidia-smi -c`:
/// `NPU_SIM_CUDA_COMPUTE_MODE` (0 DEFAULT, 2 PROHIBITED, 3 EXCLUSIVE_PROCESS), else 0.
pub(crate) fn compute_mode() -> i32 {
    std::env::var("NPU_SIM_CUDA_COMPUTE_MODE").ok().and_then(|m| m.parse().ok()).unwrap_or(0)
}

/// The value of `attribute` on physical device `physical`; None past the enumeration.
pub fn value(attribute: i32, physical: u32) -> Option<i32> {
    if !(1..=LAST_ATTRIBUTE).contains(&attribute) {
        return None;
    }
    let (domain, bus, device) = pci_parts(&visible::pci_bus_id(physical));
    Some(match attribute {
        1 => 1024,                    // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,                // MAX_BLOCK_DIM_X, _Y
        4 => 64,                      // MAX_BLOCK_DIM_Z
        5 => i32::MAX,                // MAX_GRID_DIM_X
        6 | 7 => 65535,               // MAX_GRID_DIM_Y, _Z
        8 => 48 * 1024,               // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 64 * 1024,               // TOTAL_CONSTANT_MEMORY
        10 => 32,                     // WARP_SIZE
        11 => i32::MAX,               // MAX_PITCH
        12 => 65536,                  // MAX_REGISTERS_PER_BLOCK
        13 => 1_410_000,              // CLOCK_RATE (kHz)
        14 => 512,                    // TEXTURE_ALIGNMENT
        15 => 1,                      // GPU_OVERLAP
        16 => MULTIPROCESSORS as i32, // MULTIPROCESSOR_COUNT
        19 => 1,                      // CAN_MAP_HOST_MEMORY
        20 => compute_mode(),         // COMPUTE_MODE
        30 => 512,                    // SURFACE_ALIGNMENT
        31 => 1,                      // CONCURRENT_KERNELS
        32 => 1,                      // ECC_ENABLED
        PCI_BUS_ID => bus,
        PCI_DEVICE_ID => device,
        36 => 1_593_000,        // MEMORY_CLOCK_RATE (kHz)
        37 => 5120,             // GLOBAL_MEMORY_BUS_WIDTH
        38 => 40 * 1024 * 1024, // L2_CACHE_SIZE
        39 => 2048,             // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 3,                // ASYNC_ENGINE_COUNT
        41 => 1,                // UNIFIED_ADDRESSING
        PCI_DOMAIN_ID => domain,
        75 => 8,            // COMPUTE_CAPABILITY_MAJOR
        76 => 0,            // COMPUTE_CAPABILITY_MINOR
        78 => 1,            // STREAM_PRIORITIES_SUPPORTED
        79 | 80 => 1,       // GLOBAL_L1_CACHE_SUPPORTED, LOCAL_L1_CACHE_SUPPORTED
        81 => 164 * 1024,   // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65536,        // MAX_REGISTERS_PER_MULTIPROCESSOR
        83 => 1,            // MANAGED_MEMORY
        85 => 0,            // MULTI_GPU_BOARD_GROUP_ID
        89 => 1,            // CONCURRENT_MANAGED_ACCESS
        95 => 1,            // COOPERATIVE_LAUNCH
        97 => 163 * 1024,   // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        106 => 32,          // MAX_BLOCKS_PER_MULTIPROCESSOR
        139 => 0x20b2_10de, // GPU_PCI_DEVICE_ID: device 0x20b2 of vendor 0x10de
        140 => 0x1463_10de, // GPU_PCI_SUBSYSTEM_ID
        _ => 0,
    })
}

/// `domain:bus:device.function` (hex) as numbers; zeros where the text does not parse.
fn pci_parts(id: &str) -> (i32, i32, i32) {
    let mut parts = id.split([':', '.']).map(|p| i32::from_str_radix(p, 16).unwrap_or(0));
    let domain = parts.next().unwrap_or(0);
    let bus = parts.next().unwrap_or(0);
    let device = parts.next().unwrap_or(0);
    (domain, bus, device)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(out: *mut i32, attribute: i32, dev: i32) -> CuResult {
    let r = runtime!();
    let physical = match r.physical(dev) {
        Ok(p) => p,
        Err(e) => return e,
    };
    match value(attribute, physical) {
        // SAFETY: out-pointer from the caller (checked non-null by put).
        Some(v) => unsafe { put(out, v) },
        None => INVALID_VALUE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_attributes_have_a_real_device_s_values() {
        assert_eq!(value(16, 0), Some(108), "multiprocessors");
        assert_eq!((value(75, 0), value(76, 0)), (Some(8), Some(0)), "compute capability 8.0");
        assert_eq!(value(78, 0), Some(1), "stream priorities supported");
        assert_eq!(value(10, 3), Some(32), "warp size");
        assert_eq!(value(139, 0), Some(0x20b2_10de), "PCI device and vendor ids, as an A100's");
    }

    #[test]
    fn pci_ids_are_the_ones_the_bus_id_text_names() {
        // visible::pci_bus_id(1) is 0000:28:00.0.
        assert_eq!(
            (value(PCI_DOMAIN_ID, 1), value(PCI_BUS_ID, 1), value(PCI_DEVICE_ID, 1)),
            (Some(0), Some(0x28), Some(0))
        );
        assert_ne!(value(PCI_BUS_ID, 0), value(PCI_BUS_ID, 1));
    }

    #[test]
    fn numbers_outside_the_enumeration_are_refused() {
        assert_eq!(value(0, 0), None);
        assert_eq!(value(-1, 0), None);
        assert_eq!(value(LAST_ATTRIBUTE + 1, 0), None);
        assert_eq!(value(LAST_ATTRIBUTE, 0), Some(0), "a known attribute this device lacks");
    }
}
