//! HPACK (RFC 7541) as the `:authority` rewriter needs it: a decoder that follows a client's
//! dynamic table and hands each field to a callback without allocating per field, and an
//! encoder that writes literals only.
//!
//! Why not a crate: the rewriter decodes every request header block on the Unix socket, so
//! decoding is on the hot path of every call. `loona-hpack` (the maintained fork of the
//! `hpack` crate) builds a fresh Huffman table, two levels of `HashMap`, for every
//! Huffman-coded string: a profile of npud's empty call put a fifth of the daemon's CPU
//! there. `httlib-hpack` panics on a literal cut short and drains its input one field at a
//! time (quadratic in a hostile 1 MiB block). h2's decoder is private. The RFC is small;
//! `tests.rs` checks this one against `loona-hpack` and the RFC's own examples.

mod huffman;
mod table;

pub use huffman::HuffmanError;
use std::collections::VecDeque;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HpackError {
    #[error("a header block ends inside a field")]
    Truncated,
    #[error("an integer of more than {MAX_INTEGER} in a header block")]
    Integer,
    #[error("table index {0} is neither in the static nor the dynamic table")]
    Index(usize),
    #[error("dynamic table size update to {0}, above the {1} bytes the server allows")]
    TableSize(usize, usize),
    #[error("a dynamic table size update after the first field of a block")]
    LateSizeUpdate,
    #[error("Huffman: {0}")]
    Huffman(#[from] HuffmanError),
    #[error("decoding stopped by the reader")]
    Stopped,
}

/// The largest integer a block may carry: every length and index in a block the rewriter
/// accepts is below 1 MiB, and this keeps the arithmetic far from overflow.
const MAX_INTEGER: usize = 1 << 24;
/// RFC 7541 §4.1: an entry's size is its name and value plus 32 bytes of overhead.
const ENTRY_OVERHEAD: usize = 32;

/// One entry of the dynamic table: name and value in one allocation.
struct Entry {
    bytes: Box<[u8]>,
    split: usize,
}

impl Entry {
    fn name(&self) -> &[u8] {
        &self.bytes[..self.split]
    }
    fn value(&self) -> &[u8] {
        &self.bytes[self.split..]
    }
    fn size(&self) -> usize {
        self.bytes.len() + ENTRY_OVERHEAD
    }
}

/// A connection's decoding context: the dynamic table as the client's encoder built it.
pub struct Decoder {
    /// Newest first: dynamic index 62 is `table[0]`.
    table: VecDeque<Entry>,
    size: usize,
    max_size: usize,
    /// The SETTINGS_HEADER_TABLE_SIZE the server advertised: no size update may exceed it.
    limit: usize,
    /// Reused for literal names and values, so a steady stream of requests allocates nothing.
    name: Vec<u8>,
    value: Vec<u8>,
}

impl Decoder {
    pub fn new(limit: usize) -> Decoder {
        Decoder { table: VecDeque::new(), size: 0, max_size: limit, limit, name: Vec::new(), value: Vec::new() }
    }

    /// Decodes one whole header block, calling `field(name, value, never_indexed)` for each
    /// field in order (`never_indexed`: the client sent it as a never-indexed literal,
    /// §6.2.3, which whoever forwards it must keep). `field` returns whether to go on: a
    /// reader past its own limit stops the decoding there (`Stopped`).
    /// An error leaves the table in an unknown state: the connection cannot go on.
    pub fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8], bool) -> bool,
    ) -> Result<(), HpackError> {
        let mut input = Input { bytes: block, at: 0 };
        let mut first = true;
        while let Some(&octet) = input.bytes.get(input.at) {
            if octet & 0x80 != 0 {
                // §6.1 indexed field.
                let index = input.integer(7)?;
                let (name, value) = lookup(&self.table, index)?;
                if !field(name, value, false) {
                    return Err(HpackError::Stopped);
                }
            } else if octet & 0xe0 == 0x20 {
                // §6.3 dynamic table size update.
                if !first {
                    return Err(HpackError::LateSizeUpdate);
                }
                let size = input.integer(5)?;
                if size > self.limit {
                    return Err(HpackError::TableSize(size, self.limit));
                }
                self.max_size = size;
                self.evict_to(size);
                continue;
            } else {
                // §6.2: with incremental indexing (01), without (0000) or never indexed (0001).
                let indexing = octet & 0x40 != 0;
                let never_indexed = !indexing && octet & 0xf0 == 0x10;
                let index = input.integer(if indexing { 6 } else { 4 })?;
                recycle(&mut self.name);
                if index == 0 {
                    input.string(&mut self.name)?;
                } else {
                    let (name, _) = lookup(&self.table, index)?;
                    self.name.extend_from_slice(name);
                }
                recycle(&mut self.value);
                input.string(&mut self.value)?;
                if !field(&self.name, &self.value, never_indexed) {
                    return Err(HpackError::Stopped);
                }
                if indexing {
                    self.insert();
                }
            }
            first = false;
        }
        recycle(&mut self.name);
        recycle(&mut self.value);
        Ok(())
    }

    /// §4.4: adds the field just decoded, evicting the oldest entries to make room; an entry
    /// larger than the whole table empties it and is not added.
    fn insert(&mut self) {
        let size = self.name.len() + self.value.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max_size - size);
        let bytes: Box<[u8]> = [&self.name[..], &self.value[..]].concat().into();
        self.table.push_front(Entry { bytes, split: self.name.len() });
        self.size += size;
    }

    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            match self.table.pop_back() {
                Some(e) => self.size -= e.size(),
                None => self.size = 0,
            }
        }
    }
}

/// What a reused buffer may keep between blocks: a hostile 1 MiB block must not leave each
/// connection holding a megabyte for the rest of its life.
const KEEP: usize = 64 * 1024;

/// Empties `buf` for reuse, letting go of its memory when a large block grew it.
pub fn recycle<T>(buf: &mut Vec<T>) {
    if buf.capacity() * std::mem::size_of::<T>() > KEEP {
        *buf = Vec::new();
    } else {
        buf.clear();
    }
}

/// Field `index` (1-based) of the static table followed by `dynamic` (§2.3.3).
fn lookup(dynamic: &VecDeque<Entry>, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
    if let Some(&(name, value)) = index.checked_sub(1).and_then(|i| table::STATIC.get(i)) {
        return Ok((name.as_bytes(), value.as_bytes()));
    }
    let entry = index.checked_sub(table::STATIC.len() + 1).and_then(|i| dynamic.get(i));
    entry.map(|e| (e.name(), e.value())).ok_or(HpackError::Index(index))
}

/// A header block being read.
struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn byte(&mut self) -> Result<u8, HpackError> {
        let b = *self.bytes.get(self.at).ok_or(HpackError::Truncated)?;
        self.at += 1;
        Ok(b)
    }

    /// §5.1: an integer with an `n`-bit prefix.
    fn integer(&mut self, n: u32) -> Result<usize, HpackError> {
        let mask = (1usize << n) - 1;
        let mut value = usize::from(self.byte()?) & mask;
        if value < mask {
            return Ok(value);
        }
        let mut shift = 0;
        loop {
            let b = self.byte()?;
            value += usize::from(b & 0x7f) << shift;
            if value > MAX_INTEGER {
                return Err(HpackError::Integer);
            }
            if b & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
            // Continuation bytes that add nothing would otherwise shift past the word.
            if shift > 28 {
                return Err(HpackError::Integer);
            }
        }
    }

    /// §5.2: a string literal, Huffman-coded or not, appended to `out`.
    fn string(&mut self, out: &mut Vec<u8>) -> Result<(), HpackError> {
        let huffman = self.bytes.get(self.at).ok_or(HpackError::Truncated)? & 0x80 != 0;
        let len = self.integer(7)?;
        let end = self.at.checked_add(len).filter(|&e| e <= self.bytes.len()).ok_or(HpackError::Truncated)?;
        let raw = &self.bytes[self.at..end];
        self.at = end;
        if huffman {
            huffman::decode(raw, out)?;
        } else {
            out.extend_from_slice(raw);
        }
        Ok(())
    }
}

/// Appends `name: value` as a literal field without indexing, with a literal name (§6.2.2),
/// or never indexed (§6.2.3) when the client sent it so: the server's dynamic table is
/// neither used nor changed, so blocks written this way decode whatever the client's
/// earlier blocks left in it.
pub fn encode_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8], never_indexed: bool) {
    out.push(if never_indexed { 0x10 } else { 0 });
    for s in [name, value] {
        integer(out, s.len(), 7, 0);
        out.extend_from_slice(s);
    }
}

/// §5.1: writes `value` with an `n`-bit prefix under the high bits `flags`.
fn integer(out: &mut Vec<u8>, mut value: usize, n: u32, flags: u8) {
    let mask = (1usize << n) - 1;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    value -= mask;
    while value >= 0x80 {
        out.push(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests;
