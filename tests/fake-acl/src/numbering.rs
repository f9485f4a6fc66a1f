//! The three device numberings of the CANN runtime (vendor pages of
//! `aclrtGetPhyDevIdByLogicDevId` and its neighbours, summarised in
//! shared/reference/acl.md "Device numbering"):
//!
//! - the *physical* id is the host's (the N of `/dev/davinciN`);
//! - the *logical* id is the device as this container sees it: a container sees only its
//!   devices, numbered from 0; outside a container logical = physical. The fake reads a
//!   container's view from `NPU_SIM_CONTAINER_DEVICES=<physical ids>`: logical i is the i-th
//!   listed physical device;
//! - the *user* id is what the program passes to `aclrtSetDevice`: with
//!   `ASCEND_RT_VISIBLE_DEVICES=a,b,...` user i is the i-th listed logical id; unset, user =
//!   logical.
//!
//! The vendor's example: visible devices 1,2; the program sets device 0, which is logical 1,
//! which in that container is physical 6.
//!
//! Entries that name no device (not a number, out of range, repeated) are skipped: a
//! device the process cannot reach is simply not in its view.

/// One process's view of the host's devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numbering {
    /// Logical id → physical id.
    physical: Vec<u32>,
    /// User id → logical id.
    logical: Vec<u32>,
}

/// The ids of a comma-separated list that are below `bound`, each once, in order.
fn ids(list: &str, bound: u32) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for id in list.split(',').filter_map(|w| w.trim().parse::<u32>().ok()) {
        if id < bound && !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

impl Numbering {
    /// The view of a process on a host of `physical_count` devices, given the container's
    /// devices and `ASCEND_RT_VISIBLE_DEVICES` (None: the variable is unset).
    pub fn new(physical_count: u32, container: Option<&str>, visible: Option<&str>) -> Numbering {
        let physical = match container {
            Some(list) if !list.trim().is_empty() => ids(list, physical_count),
            _ => (0..physical_count).collect(),
        };
        let logical = match visible {
            Some(list) => ids(list, physical.len() as u32),
            None => (0..physical.len() as u32).collect(),
        };
        Numbering { physical, logical }
    }

    /// The view this process's environment describes.
    pub fn from_env(physical_count: u32) -> Numbering {
        let var = |name| std::env::var(name).ok();
        Numbering::new(
            physical_count,
            var("NPU_SIM_CONTAINER_DEVICES").as_deref(),
            var("ASCEND_RT_VISIBLE_DEVICES").as_deref(),
        )
    }

    /// The physical ids of the devices the container shows the process.
    pub fn physical_ids(&self) -> &[u32] {
        &self.physical
    }

    /// Devices the program can set (aclrtGetDeviceCount).
    pub fn count(&self) -> u32 {
        self.logical.len() as u32
    }

    pub fn logical_of_user(&self, user: i32) -> Option<u32> {
        usize::try_from(user).ok().and_then(|u| self.logical.get(u)).copied()
    }

    pub fn physical_of_logical(&self, logical: i32) -> Option<u32> {
        usize::try_from(logical).ok().and_then(|l| self.physical.get(l)).copied()
    }

    pub fn physical_of_user(&self, user: i32) -> Option<u32> {
        self.logical_of_user(user).and_then(|l| self.physical_of_logical(l as i32))
    }

    pub fn logical_of_physical(&self, physical: i32) -> Option<u32> {
        let physical = u32::try_from(physical).ok()?;
        self.physical.iter().position(|&p| p == physical).map(|l| l as u32)
    }

    pub fn user_of_logical(&self, logical: i32) -> Option<u32> {
        let logical = u32::try_from(logical).ok()?;
        self.logical.iter().position(|&l| l == logical).map(|u| u as u32)
    }

    /// The user id of a physical device, when the program can reach it.
    pub fn user_of_physical(&self, physical: u32) -> Option<u32> {
        self.logical_of_physical(physical as i32).and_then(|l| self.user_of_logical(l as i32))
    }
}

#[cfg(test)]
mod tests {
    use super::Numbering;

    #[test]
    fn the_vendors_example_maps_user_0_to_physical_6() {
        // A container of physical 4..8 (logical 0..4), visible devices 1,2.
        let n = Numbering::new(8, Some("4,6,5,7"), Some("1,2"));
        assert_eq!(n.count(), 2);
        assert_eq!(n.logical_of_user(0), Some(1));
        assert_eq!(n.physical_of_user(0), Some(6));
        assert_eq!(n.physical_of_user(1), Some(5));
        assert_eq!(n.physical_of_user(2), None);
        assert_eq!(n.logical_of_physical(6), Some(1));
        assert_eq!(n.user_of_physical(6), Some(0));
        assert_eq!(n.user_of_physical(4), None, "physical 4 is in the container but not visible");
        assert_eq!(n.user_of_physical(0), None, "physical 0 is not in the container");
    }

    #[test]
    fn without_variables_every_numbering_is_the_same() {
        let n = Numbering::new(3, None, None);
        assert_eq!(n.count(), 3);
        for id in 0..3 {
            assert_eq!(n.physical_of_user(id), Some(id as u32));
            assert_eq!(n.user_of_physical(id as u32), Some(id as u32));
        }
        assert_eq!(n.physical_of_user(-1), None);
        assert_eq!(n.physical_of_user(3), None);
    }

    #[test]
    fn entries_naming_no_device_are_skipped() {
        let n = Numbering::new(2, Some("1, 9, x, 1"), Some("0,0,5"));
        assert_eq!(n.count(), 1);
        assert_eq!(n.physical_of_user(0), Some(1));
        let none = Numbering::new(2, None, Some(""));
        assert_eq!(none.count(), 0, "an empty ASCEND_RT_VISIBLE_DEVICES hides every device");
    }
}
