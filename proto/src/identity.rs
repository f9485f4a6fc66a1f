//! How the vendors name a device globally, in one spelling for every crate: npud's backends
//! read it from the driver, the interposer from the process's own driver, and the two are
//! compared as text.

/// A CUDA UUID (the 16 bytes of `CUuuid`) as `nvidia-smi -L` and `CUDA_VISIBLE_DEVICES`
/// write it: `GPU-` then 8-4-4-4-12 lower-case hex digits.
pub fn gpu_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("GPU-{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// The 16 bytes of a `GPU-…` UUID, or of a MIG device's `MIG-…` one (R470 drivers and
/// later; the bytes are what cuDeviceGetUuid gives a process that sees the MIG device);
/// None when `text` is neither.
pub fn parse_gpu_uuid(text: &str) -> Option<[u8; 16]> {
    let rest = text.strip_prefix("GPU-").or_else(|| text.strip_prefix("MIG-"))?;
    let hex: String = rest.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Whether two UUID texts name one device: the same 16 bytes, whichever prefix each
/// carries (a MIG device is `MIG-…` to NVML and `GPU-…` as CUDA's bytes are printed), or
/// the same text where either is no UUID.
pub fn same_uuid(a: &str, b: &str) -> bool {
    match (parse_gpu_uuid(a), parse_gpu_uuid(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a.eq_ignore_ascii_case(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_reads_back_as_written() {
        let bytes: [u8; 16] = core::array::from_fn(|i| (i as u8) * 17);
        let text = gpu_uuid(&bytes);
        assert_eq!(text, "GPU-00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(parse_gpu_uuid(&text), Some(bytes));
        assert_eq!(parse_gpu_uuid("GPU-0011"), None);
        // A MIG device's UUID is 16 bytes too, and one spelling of a device matches the other.
        assert_eq!(parse_gpu_uuid("MIG-00112233-4455-6677-8899-aabbccddeeff"), Some(bytes));
        assert!(same_uuid("MIG-00112233-4455-6677-8899-aabbccddeeff", &text));
        assert!(!same_uuid("GPU-00112233-4455-6677-8899-aabbccddeef0", &text));
        assert_eq!(parse_gpu_uuid("NPU-00112233-4455-6677-8899-aabbccddeeff"), None);
    }
}
