//! The HPACK Huffman code (RFC 7541 §5.2, Appendix B), decoded canonically.
//!
//! The code is canonical: a symbol's code follows from the code lengths alone (codes of one
//! length are consecutive, in symbol order, and each length starts where the previous one
//! ended, shifted). So the tables are 257 lengths and what a `const fn` derives from them,
//! and decoding checks, length by length, whether the next bits are a code of that length.
//! Nothing is built at run time.

/// Code length in bits of each symbol, 0..=255 then EOS (256), from RFC 7541 Appendix B.
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28,
    28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12,
    10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6,
    5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22,
    22, 23, 22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20,
    22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28,
    27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28,
    27, 27, 27, 27, 27, 26, 30,
];
const EOS: u16 = 256;
const MAX_LEN: usize = 30;

/// Per code length: the first code of that length, how many codes have it, and where its
/// symbols start in `symbols` (which lists every symbol by length, then by value).
struct Canonical {
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    offset: [u16; MAX_LEN + 1],
    symbols: [u16; 257],
}

const fn canonical() -> Canonical {
    let mut t =
        Canonical { first: [0; MAX_LEN + 1], count: [0; MAX_LEN + 1], offset: [0; MAX_LEN + 1], symbols: [0; 257] };
    let mut s = 0;
    while s < 257 {
        t.count[LENGTHS[s] as usize] += 1;
        s += 1;
    }
    let (mut code, mut at, mut len) = (0u32, 0u16, 1);
    while len <= MAX_LEN {
        t.first[len] = code;
        t.offset[len] = at;
        code = (code + t.count[len]) << 1;
        at += t.count[len] as u16;
        len += 1;
    }
    let mut fill = t.offset;
    s = 0;
    while s < 257 {
        let l = LENGTHS[s] as usize;
        t.symbols[fill[l] as usize] = s as u16;
        fill[l] += 1;
        s += 1;
    }
    t
}

static CODE: Canonical = canonical();

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HuffmanError {
    #[error("the string holds the EOS symbol")]
    Eos,
    #[error("the string ends in more than 7 bits of padding, or padding that is not EOS's prefix")]
    Padding,
}

/// Decodes `input` onto the end of `out`.
///
/// Bits are kept left-aligned in a 64-bit window refilled a byte at a time, so each symbol
/// is found by comparing the window's leading 5, 6, 7… bits with the codes of that length:
/// about two comparisons for the common characters (5–8 bit codes).
pub fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let (mut window, mut bits, mut next) = (0u64, 0usize, 0usize);
    loop {
        while bits <= 56
            && let Some(&byte) = input.get(next)
        {
            window |= u64::from(byte) << (56 - bits);
            bits += 8;
            next += 1;
        }
        if bits == 0 {
            return Ok(());
        }
        let mut len = 5;
        let symbol = loop {
            if len > bits {
                // Input is exhausted and no code fits in what is left: that must be at
                // most 7 bits, all ones (the most significant bits of EOS).
                let rest = window >> (64 - bits);
                return if bits <= 7 && rest == (1 << bits) - 1 { Ok(()) } else { Err(HuffmanError::Padding) };
            }
            let index = ((window >> (64 - len)) as u32).wrapping_sub(CODE.first[len]);
            if index < CODE.count[len] {
                break CODE.symbols[usize::from(CODE.offset[len]) + index as usize];
            }
            len += 1;
            if len > MAX_LEN {
                // Every 30-bit string starts with some code, so this cannot be reached with
                // the tables above; refuse rather than read past them if it were.
                return Err(HuffmanError::Eos);
            }
        };
        if symbol == EOS {
            return Err(HuffmanError::Eos);
        }
        out.push(symbol as u8);
        window <<= len;
        bits -= len;
    }
}

/// The code of every symbol, as (code, length): what an encoder would write. Tests use it
/// to check the tables against an independent implementation.
#[cfg(test)]
pub fn codes() -> Vec<(u32, u8)> {
    (0..257)
        .map(|s: usize| {
            let len = usize::from(LENGTHS[s]);
            let rank = CODE.symbols[usize::from(CODE.offset[len])..].iter().position(|&x| usize::from(x) == s);
            (CODE.first[len] + rank.unwrap_or(0) as u32, LENGTHS[s])
        })
        .collect()
}
