//! Hardware profiles: the stream and event limits of the Ascend product families.

/// What one simulated device can hold and how it behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: &'static str,
    /// Streams the hardware holds in all, default and internal-sync streams included.
    pub stream_limit: u32,
    pub event_limit: u32,
    /// Streams the runtime keeps for internal synchronisation on every device.
    pub internal_sync_streams: u32,
    /// Lowest (least urgent) priority; 0 is the most urgent.
    pub priority_lowest: u32,
}

const fn profile(name: &'static str, stream_limit: u32, event_limit: u32) -> Profile {
    Profile { name, stream_limit, event_limit, internal_sync_streams: 1, priority_lowest: 7 }
}

/// Every named profile; the first is the default.
pub const PROFILES: &[Profile] = &[
    profile("atlas-training", 2048, 65535),
    profile("atlas-a2", 1984, 65536),
    profile("atlas-a3", 1984, 65536),
    profile("atlas-inference", 1024, 1023),
    profile("atlas-200i-a2", 512, 65536),
];

impl Profile {
    /// Looks a profile up by name; the error lists the valid names.
    pub fn by_name(name: &str) -> Result<Profile, String> {
        PROFILES.iter().find(|p| p.name == name).cloned().ok_or_else(|| {
            let names: Vec<_> = PROFILES.iter().map(|p| p.name).collect();
            format!("unknown sim profile {name:?}; expected one of {}", names.join(", "))
        })
    }
}

impl Default for Profile {
    fn default() -> Self {
        PROFILES[0].clone()
    }
}
