//! CUDA's device numbering, as the driver documents it (shared/reference/cuda.md and
//! acl.md "Device numbering"): every GPU has a UUID and a PCI bus id that name it globally;
//! a process's ordinals are the devices `CUDA_VISIBLE_DEVICES` lists, in its order, each
//! by index or by UUID (`GPU-…`, a unique prefix is enough). Parsing stops at the first
//! entry that names no device or repeats one, as the driver's does: the devices listed
//! before it stay visible. Unset: every device, in index order; empty: none.

/// The UUID of physical device `index`: stable across processes and runs, as a GPU's is.
pub fn uuid_bytes(index: u32) -> [u8; 16] {
    // The leading group differs per device, so a short prefix names one, as on real GPUs.
    let h = 0x5eed_0000u32.wrapping_add(index.wrapping_mul(0x1111)).to_be_bytes();
    let i = index.to_be_bytes();
    [h[0], h[1], h[2], h[3], 0x5f, 0x66, 0x41, 0x4b, 0x85, 0x47, 0x50, 0x55, i[0], i[1], i[2], i[3]]
}

/// The UUID's text, `GPU-5eed…`.
pub fn uuid_text(index: u32) -> String {
    npud_proto::identity::gpu_uuid(&uuid_bytes(index))
}

/// The PCI bus id of physical device `index` (`domain:bus:device.function`).
pub fn pci_bus_id(index: u32) -> String {
    format!("0000:{:02x}:00.0", 0x18 + index * 0x10)
}

/// The physical devices a process sees, ordinal by ordinal, on a host of `count` GPUs.
pub fn visible(count: u32, variable: Option<&str>) -> Vec<u32> {
    let Some(list) = variable else { return (0..count).collect() };
    let mut out: Vec<u32> = Vec::new();
    for entry in list.split(',').map(str::trim) {
        let found = if entry.starts_with("GPU-") {
            let mut matches = (0..count).filter(|&i| uuid_text(i).starts_with(entry));
            match (matches.next(), matches.next()) {
                (Some(i), None) => Some(i),
                _ => None, // no device, or a prefix that names more than one
            }
        } else {
            entry.parse::<u32>().ok().filter(|&i| i < count)
        };
        match found {
            Some(i) if !out.contains(&i) => out.push(i),
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_uuids_and_prefixes_select_devices_in_the_listed_order() {
        assert_eq!(visible(3, None), vec![0, 1, 2]);
        assert_eq!(visible(3, Some("2,0")), vec![2, 0]);
        assert_eq!(visible(3, Some(&uuid_text(1))), vec![1]);
        let prefix = &uuid_text(2)[..12];
        assert_eq!(visible(3, Some(&format!("{prefix},0"))), vec![2, 0]);
        assert_eq!(visible(3, Some("")), Vec::<u32>::new());
    }

    #[test]
    fn parsing_stops_at_the_first_entry_that_names_no_device() {
        assert_eq!(visible(3, Some("1,7,0")), vec![1]);
        assert_eq!(visible(3, Some("1,1,0")), vec![1]);
        assert_eq!(visible(3, Some("GPU-5eed,2")), Vec::<u32>::new(), "a prefix of every UUID names none");
    }

    #[test]
    fn every_device_has_its_own_stable_name() {
        assert_ne!(uuid_text(0), uuid_text(1));
        assert_eq!(uuid_text(1), uuid_text(1));
        assert_eq!(pci_bus_id(1), "0000:28:00.0");
    }
}
