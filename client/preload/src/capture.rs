//! Graph captures a process makes (aclmdlRICaptureBegin/End) and the models that hold their
//! streams until aclmdlRIDestroy, a device reset or exit. Pure bookkeeping, like `books`.
//!
//! A capture's size is known only at its end, so Begin is admitted for the size of the
//! device's last capture (at least one stream: the capture's own), and End settles the
//! difference: a smaller capture leaves unused grant, a larger one needs the rest booked
//! (npud books it even over quota, as the tenant's debt).

use crate::Map;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Active {
    pub device: u32,
    /// The context current at Begin (0: unknown): the capture's stream is one of its, and
    /// its model goes when it does.
    pub context: usize,
    /// Streams admitted for it at Begin.
    pub admitted: u32,
    /// The vendor's free count at Begin, for libraries without aclmdlRIGetStreams.
    pub free_before: Option<u32>,
}

/// A model that holds streams: its device, its context, how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Model {
    device: u32,
    context: usize,
    held: u32,
}

#[derive(Debug, Default)]
pub struct Captures {
    /// Captures under way, by the stream they began on.
    active: Map<usize, Active>,
    /// Models by handle.
    models: Map<usize, Model>,
    /// Per device, the streams its last capture took.
    last: Map<u32, u32>,
}

impl Captures {
    /// What the next capture on `device` is admitted for.
    pub fn expected(&self, device: u32) -> u32 {
        self.last.get(&device).copied().unwrap_or(1).max(1)
    }

    pub fn begun(&mut self, stream: usize, capture: Active) {
        self.active.insert(stream, capture);
    }

    pub fn active(&self, stream: usize) -> Option<Active> {
        self.active.get(&stream).copied()
    }

    /// The capture on `stream` ended as `model` holding `held` streams.
    pub fn ended(&mut self, stream: usize, model: usize, held: u32) -> Option<Active> {
        let capture = self.active.remove(&stream)?;
        self.models.insert(model, Model { device: capture.device, context: capture.context, held });
        self.last.insert(capture.device, held.max(1));
        Some(capture)
    }

    /// The capture on `stream` failed to end: what it was admitted for.
    pub fn abandoned(&mut self, stream: usize) -> Option<Active> {
        self.active.remove(&stream)
    }

    /// A destroyed model: (device, streams it held).
    pub fn destroyed(&mut self, model: usize) -> Option<(u32, u32)> {
        self.models.remove(&model).map(|m| (m.device, m.held))
    }

    /// A context's teardown frees its models and abandons its captures (the runtime's
    /// `TearDownModelsOnContextTearDown`): the streams they held and the streams admitted
    /// for captures under way. The device's default context goes at its last reset; a
    /// capture whose context was not known then is taken to be the default context's.
    pub fn drop_context(&mut self, device: u32, context: usize, default: bool) -> u32 {
        let ours = |d: u32, c: usize| d == device && (c == context || (default && c == 0));
        let mut freed = 0u32;
        self.models.retain(|_, m| {
            let keep = !ours(m.device, m.context);
            if !keep {
                freed = freed.saturating_add(m.held);
            }
            keep
        });
        self.active.retain(|_, a| {
            let keep = !ours(a.device, a.context);
            if !keep {
                freed = freed.saturating_add(a.admitted);
            }
            keep
        });
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_is_admitted_for_the_size_of_the_last_one() {
        let mut c = Captures::default();
        assert_eq!(c.expected(0), 1, "the first capture: its own stream");
        c.begun(10, Active { device: 0, context: 5, admitted: 1, free_before: None });
        assert_eq!(c.ended(10, 100, 4).map(|a| a.admitted), Some(1));
        assert_eq!(c.expected(0), 4);
        assert_eq!(c.expected(1), 1, "per device");
        c.begun(10, Active { device: 0, context: 5, admitted: 4, free_before: None });
        assert_eq!(c.ended(10, 101, 2).map(|a| a.admitted), Some(4));
        assert_eq!(c.expected(0), 2);
        assert_eq!(c.destroyed(100), Some((0, 4)));
        assert_eq!(c.destroyed(100), None, "once");
    }

    #[test]
    fn a_context_takes_its_models_and_captures_with_it() {
        let mut c = Captures::default();
        c.begun(1, Active { device: 0, context: 5, admitted: 2, free_before: None });
        c.ended(1, 100, 2);
        c.begun(2, Active { device: 1, context: 6, admitted: 1, free_before: None });
        c.ended(2, 200, 3);
        c.begun(3, Active { device: 0, context: 7, admitted: 1, free_before: None });
        c.ended(3, 300, 1);
        c.begun(4, Active { device: 0, context: 0, admitted: 1, free_before: None });
        c.begun(1, Active { device: 0, context: 5, admitted: 2, free_before: None });
        assert_eq!(c.drop_context(0, 5, true), 5, "the default context's model and captures, and the unknown one");
        assert_eq!((c.active(1), c.active(4)), (None, None));
        assert_eq!(c.destroyed(200), Some((1, 3)), "another device's model stays");
        assert_eq!(c.drop_context(0, 7, false), 1, "a context made with aclrtCreateContext");
        assert_eq!(c.destroyed(300), None);
    }
}
