//! The budget wire's frames (see `budget.proto`): a 4-byte big-endian length, then the
//! protobuf message. npud and the interposer frame and unframe with these same functions,
//! so the two ends cannot disagree on the format or on its bound.

use crate::BUDGET_MAX_FRAME;
use std::collections::VecDeque;

/// Appends `message` to `out` as one frame.
pub fn put(out: &mut Vec<u8>, message: &impl prost::Message) {
    let len = message.encoded_len();
    out.reserve(4 + len);
    // Never above u32::MAX: every message either end sends is far below BUDGET_MAX_FRAME.
    out.extend_from_slice(&(len as u32).to_be_bytes());
    // Cannot fail: `out` grows as needed.
    let _ = message.encode(out);
}

/// A frame's announced length over [`BUDGET_MAX_FRAME`]: the peer is not speaking the
/// protocol, and the connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong(pub usize);

/// Whether `input` begins with a whole frame.
pub fn whole(input: &VecDeque<u8>) -> Result<bool, TooLong> {
    Ok(body_len(input)?.is_some_and(|len| input.len() >= 4 + len))
}

/// Takes the first frame's message bytes off `input`; None while the frame is not all there.
pub fn take(input: &mut VecDeque<u8>) -> Result<Option<Vec<u8>>, TooLong> {
    match body_len(input)? {
        Some(len) if input.len() >= 4 + len => Ok(Some(input.drain(..4 + len).skip(4).collect())),
        _ => Ok(None),
    }
}

/// The length the first frame announces, once its 4 bytes are in.
fn body_len(input: &VecDeque<u8>) -> Result<Option<usize>, TooLong> {
    let mut len = [0u8; 4];
    if input.len() < len.len() {
        return Ok(None);
    }
    for (to, from) in len.iter_mut().zip(input) {
        *to = *from;
    }
    match u32::from_be_bytes(len) as usize {
        len if len > BUDGET_MAX_FRAME => Err(TooLong(len)),
        len => Ok(Some(len)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1 as pb;
    use prost::Message;

    #[test]
    fn frames_come_off_whole_and_in_order_however_the_bytes_arrive() {
        let first = pb::BudgetCall { call: Some(pb::budget_call::Call::Hello(pb::BudgetHello::default())) };
        let second = pb::BudgetCall {
            call: Some(pb::budget_call::Call::Acquire(pb::AcquireBudgetRequest {
                device: 3,
                count: 70,
                ..Default::default()
            })),
        };
        let mut bytes = Vec::new();
        put(&mut bytes, &first);
        put(&mut bytes, &second);
        let mut input = VecDeque::new();
        let mut taken = Vec::new();
        // One byte at a time: nothing comes off before its frame is whole.
        for b in bytes {
            input.push_back(b);
            while let Some(body) = take(&mut input).expect("within the bound") {
                taken.push(pb::BudgetCall::decode(body.as_slice()).expect("a call"));
            }
        }
        assert_eq!(taken, vec![first, second]);
        assert!(input.is_empty());
    }

    #[test]
    fn a_length_over_the_bound_is_refused_before_any_body_arrives() {
        let mut input: VecDeque<u8> = u32::MAX.to_be_bytes().into_iter().collect();
        assert_eq!(whole(&input), Err(TooLong(u32::MAX as usize)));
        assert_eq!(take(&mut input), Err(TooLong(u32::MAX as usize)));
        let mut at_bound: VecDeque<u8> = (BUDGET_MAX_FRAME as u32).to_be_bytes().into_iter().collect();
        assert_eq!(whole(&at_bound), Ok(false), "the bound itself is allowed");
        assert_eq!(take(&mut at_bound), Ok(None));
    }
}
