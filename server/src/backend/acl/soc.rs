//! What a device holds in all, by SoC (shared/reference/acl.md, "Per-product limits").
//! `aclrtGetStreamAvailableNum` answers what is free *now*, device-wide: streams other
//! processes hold are missing from it, so npud sizes its ledger from the product's total
//! when it knows the SoC, and counts others' streams when they declare them.

/// Streams and events a device of this SoC holds, default and internal-sync streams
/// included; None for a SoC npud does not know.
pub fn limits(soc: &str) -> Option<(u32, u32)> {
    // Most specific prefixes first: "Ascend910B…" and "Ascend910_93…" are A2/A3 parts.
    const TABLE: &[(&str, u32, u32)] = &[
        ("Ascend910B", 1984, 65536),
        ("Ascend910_93", 1984, 65536),
        ("Ascend910", 2048, 65535),
        ("Ascend310P", 1024, 1023),
        ("Ascend310B", 512, 65536),
        ("Ascend310", 1024, 1023),
    ];
    TABLE.iter().find(|(prefix, _, _)| soc.starts_with(prefix)).map(|&(_, streams, events)| (streams, events))
}

#[cfg(test)]
mod tests {
    use super::limits;

    #[test]
    fn each_product_family_has_its_documented_limits() {
        assert_eq!(limits("Ascend910A"), Some((2048, 65535)));
        assert_eq!(limits("Ascend910ProB"), Some((2048, 65535)));
        assert_eq!(limits("Ascend910B3"), Some((1984, 65536)));
        assert_eq!(limits("Ascend910_9391"), Some((1984, 65536)));
        assert_eq!(limits("Ascend310P3"), Some((1024, 1023)));
        assert_eq!(limits("Ascend310"), Some((1024, 1023)));
        assert_eq!(limits("Ascend310B1"), Some((512, 65536)));
        assert_eq!(limits("Ascend950"), None);
        assert_eq!(limits(""), None);
    }
}
