//! What one AscendCL context holds, by SoC: npud sizes its own contexts with it, the
//! interposer books programs' contexts with it, and the fake runtime makes them so.
//!
//! The vendor's aclrtSetDevice and aclrtCreateContext pages: on the inference parts (Atlas
//! 200/300/500 inference, Ascend310; the Atlas inference series, Ascend310P, in its
//! standard form; Atlas 200I/500 A2, Ascend310B) a context holds two streams, its default
//! stream and one for internal synchronisation; on the training parts (Ascend910, and the
//! A2/A3 Ascend910B and Ascend910_93) it holds its default stream only. A context's
//! default stream is the device's own for the default context (see the fake's `state`).

/// Streams for internal synchronisation that each context holds on a device of `soc`
/// beside its default stream (0 for a SoC npud does not know).
pub fn context_sync_streams(soc: &str) -> u32 {
    u32::from(soc.starts_with("Ascend310"))
}

#[cfg(test)]
mod tests {
    use super::context_sync_streams;

    #[test]
    fn inference_parts_hold_a_sync_stream_per_context_and_training_parts_none() {
        for soc in ["Ascend310", "Ascend310P3", "Ascend310B1"] {
            assert_eq!(context_sync_streams(soc), 1, "{soc}");
        }
        for soc in ["Ascend910A", "Ascend910B3", "Ascend910_9391", "Ascend950", ""] {
            assert_eq!(context_sync_streams(soc), 0, "{soc}");
        }
    }
}
