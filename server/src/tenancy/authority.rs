//! Normalises the `:authority` of HTTP/2 requests that arrive on the Unix socket.
//!
//! grpc-core clients (Python, C++, Ruby, C#, PHP), grpc-java and Bazel send a Unix
//! target's socket path as `:authority` (`/run/npud/npud.sock`), which is not a URI
//! authority, and the HTTP/2 server under tonic answers every such request with
//! RST_STREAM(PROTOCOL_ERROR) (hyperium/h2#487). The authority of a request on a local
//! socket carries no meaning, so this filter sits on the client-to-server byte stream of
//! Unix connections: it passes every frame through untouched except header blocks, which it
//! decodes with the client's HPACK state and re-encodes toward the server with an invalid
//! `:authority` replaced by `localhost`. Only HEADERS/CONTINUATION payloads are buffered;
//! DATA and control frames are copied as they come. TCP connections never pass through here.
//!
//! Every request's header block is decoded (the client's HPACK table must be followed to
//! read later blocks), so decoding is on the hot path of every call: see
//! [`crate::tenancy::hpack`] for why it is npud's own.

use crate::tenancy::hpack::{Decoder, encode_literal, recycle};

/// The client connection preface (RFC 9113 §3.4), passed through as it is.
const CLIENT_PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const PING: u8 = 0x6;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The server's SETTINGS_MAX_FRAME_SIZE (the protocol default; tonic keeps it): re-encoded
/// blocks are split into frames no larger than this.
const MAX_FRAME: usize = 16_384;
/// The server's SETTINGS_HEADER_TABLE_SIZE (the protocol default), which bounds the
/// client's dynamic table.
const TABLE_SIZE: usize = 4_096;
/// A header block, compressed or decoded, larger than this closes the connection: the
/// server refuses header lists past 16 KiB anyway, and decoding is bounded so a small
/// block of repeated table references cannot make the daemon allocate without limit.
pub const MAX_BLOCK: usize = 1 << 20;
/// What a request on the socket is given when its own authority is not one.
const LOCAL_AUTHORITY: &[u8] = b"localhost";
/// The HTTP/2 server refuses header lists over 16 KiB (hyper's SETTINGS_MAX_HEADER_LIST_SIZE)
/// with a bare HTTP 431 that gRPC clients read as UNKNOWN. A list above this, a little
/// under that limit, reaches the server trimmed to its pseudo-headers and gRPC framing plus
/// [`OVERSIZED_METADATA`], so npud answers with a gRPC error that says what was wrong.
pub const MAX_HEADER_LIST: usize = 15 * 1024;
/// Marks a request whose metadata was dropped for size; its value is the original size.
pub const OVERSIZED_METADATA: &str = "npud-oversized-metadata";

/// A header block may span at most this many frames (HEADERS and CONTINUATIONs): h2
/// bounds CONTINUATION floods itself, but it never sees the client's frames, only the
/// rewriter's.
pub const MAX_BLOCK_FRAMES: usize = MAX_BLOCK / MAX_FRAME;

/// Empty CONTINUATIONs that trip h2's flood guard (it allows a handful per header list).
const FLOOD_FRAMES: usize = 100;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthorityError {
    #[error("HTTP/2 header block is not valid HPACK: {0}")]
    Hpack(String),
    #[error("HTTP/2 header block exceeds {MAX_BLOCK} bytes")]
    TooLarge,
    #[error("HTTP/2 header block interrupted by a frame of type {0:#x}")]
    Interrupted(u8),
    #[error("HTTP/2 header frame of {0} bytes, over the {MAX_FRAME} the server advertises")]
    FrameTooLarge(usize),
    #[error("HTTP/2 header block in more than {MAX_BLOCK_FRAMES} frames")]
    TooManyFrames,
}

impl AuthorityError {
    /// What the HTTP/2 server must see so that it ends the connection itself, with the
    /// GOAWAY (error code, last stream id) it sends for the same fault on TCP: the
    /// rewriter never forwards the offending frames, so it hands on ones h2 rejects alike.
    fn poison(&self, stream: u32) -> Vec<u8> {
        let stream = stream.max(1);
        match self {
            // FRAME_SIZE_ERROR: h2 reads the length first and stops there.
            AuthorityError::FrameTooLarge(_) => frame_header(MAX_FRAME + 1, HEADERS, 0, stream).to_vec(),
            // What h2 answers a block it cannot decode: one whose only field is index 0,
            // which HPACK forbids.
            AuthorityError::Hpack(_) => {
                let mut f = frame_header(1, HEADERS, END_HEADERS, stream).to_vec();
                f.push(0x80);
                f
            }
            // PROTOCOL_ERROR: an open header block interrupted by another frame (a PING).
            AuthorityError::Interrupted(_) => {
                let mut f = frame_header(0, HEADERS, 0, stream).to_vec();
                f.extend_from_slice(&frame_header(8, PING, 0, 0));
                f.extend_from_slice(&[0; 8]);
                f
            }
            // ENHANCE_YOUR_CALM: a block in more CONTINUATIONs than h2's own flood guard takes
            // (a decoded block past the limit is what such a flood carries on TCP).
            AuthorityError::TooLarge | AuthorityError::TooManyFrames => {
                let mut f = frame_header(0, HEADERS, 0, stream).to_vec();
                for _ in 0..FLOOD_FRAMES {
                    f.extend_from_slice(&frame_header(0, CONTINUATION, 0, stream));
                }
                f
            }
        }
    }
}

/// A frame's 9-byte header (RFC 9113 §4.1): length, type, flags, stream.
fn frame_header(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; FRAME_HEADER_LEN] {
    let s = stream.to_be_bytes();
    [(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags, s[0], s[1], s[2], s[3]]
}

enum State {
    /// Passing the client preface through; how many bytes of it are left.
    Preface(usize),
    /// Waiting for a whole 9-byte frame header.
    FrameHeader,
    /// Copying this many bytes of a frame's payload through.
    Passthrough(usize),
    /// Collecting the payload of a HEADERS or CONTINUATION frame.
    HeaderPayload { kind: u8, flags: u8, stream: u32, len: usize },
    /// A protocol error was found and handed on for the server to end the connection:
    /// what the client sends after it is dropped.
    Dead,
}

/// One connection's client-to-server rewriter: feed it bytes as they are read, take the
/// bytes the server should see.
pub struct AuthorityRewriter {
    state: State,
    input: Vec<u8>,
    output: Vec<u8>,
    decoder: Decoder,
    /// The fields of the block being read, in a buffer reused from block to block.
    fields: Fields,
    /// The last `:authority` found valid: a client sends the same one on every request, so
    /// it is parsed (and copied here) once.
    good_authority: Vec<u8>,
    /// A header block whose END_HEADERS has not arrived: stream, HEADERS flags, priority
    /// bytes and the fragments so far.
    block: Option<(u32, u8, Vec<u8>, Vec<u8>)>,
    /// Frames the open block has spanned so far.
    block_frames: usize,
    /// The stream of the last frame header read (for the GOAWAY's trigger).
    last_stream: u32,
    /// Header blocks are forwarded as the client encoded them until one needs a change;
    /// from then on every block is re-encoded as literals (the client's later blocks may
    /// refer to table entries the server never saw).
    reencoding: bool,
}

/// Decoded fields as `(start, name end, value end, never indexed)` spans of one byte buffer.
#[derive(Default)]
struct Fields {
    bytes: Vec<u8>,
    spans: Vec<(usize, usize, usize, bool)>,
}

impl Fields {
    fn clear(&mut self) {
        recycle(&mut self.bytes);
        recycle(&mut self.spans);
    }
    fn push(&mut self, name: &[u8], value: &[u8], never_indexed: bool) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name);
        self.bytes.extend_from_slice(value);
        self.spans.push((start, start + name.len(), self.bytes.len(), never_indexed));
    }
    fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8], bool)> {
        self.spans.iter().map(|&(a, b, c, n)| (&self.bytes[a..b], &self.bytes[b..c], n))
    }
}

impl Default for AuthorityRewriter {
    fn default() -> Self {
        AuthorityRewriter {
            state: State::Preface(CLIENT_PREFACE_LEN),
            input: Vec::new(),
            output: Vec::new(),
            decoder: Decoder::new(TABLE_SIZE),
            fields: Fields::default(),
            good_authority: Vec::new(),
            block: None,
            block_frames: 0,
            last_stream: 0,
            reencoding: false,
        }
    }
}

impl AuthorityRewriter {
    /// Takes bytes read from the client; what the server should see accumulates in
    /// [`AuthorityRewriter::output`]. On a protocol error the output ends with frames the
    /// server answers with the GOAWAY h2 sends for that error, and everything after is
    /// dropped; the error is returned for the caller to log.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), AuthorityError> {
        if matches!(self.state, State::Dead) {
            return Ok(());
        }
        self.input.extend_from_slice(bytes);
        let mut at = 0;
        let result = loop {
            match self.step(at) {
                Ok(Some(used)) => at += used,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.input.drain(..at);
        if self.input.is_empty() {
            recycle(&mut self.input);
        }
        if let Err(e) = &result {
            let stream = self.block.as_ref().map_or(self.last_stream, |b| b.0);
            self.output.extend(e.poison(stream));
            self.state = State::Dead;
            self.input = Vec::new();
            self.block = None;
        }
        result
    }

    /// The bytes ready for the server; the caller drains what it hands on.
    pub fn output(&mut self) -> &mut Vec<u8> {
        &mut self.output
    }

    /// Advances over `self.input[at..]`; `None` when more input is needed.
    fn step(&mut self, at: usize) -> Result<Option<usize>, AuthorityError> {
        let avail = &self.input[at..];
        match self.state {
            State::Dead => Ok(None),
            State::Preface(left) | State::Passthrough(left) => {
                let n = left.min(avail.len());
                if n == 0 && left > 0 {
                    return Ok(None);
                }
                self.output.extend_from_slice(&avail[..n]);
                let rest = left - n;
                self.state = match (&self.state, rest) {
                    (_, 0) => State::FrameHeader,
                    (State::Preface(_), r) => State::Preface(r),
                    (_, r) => State::Passthrough(r),
                };
                Ok(Some(n))
            }
            State::FrameHeader => {
                let Some(h) = avail.get(..FRAME_HEADER_LEN) else { return Ok(None) };
                let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                let (kind, flags) = (h[3], h[4]);
                let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                self.last_stream = stream;
                if kind == HEADERS || kind == CONTINUATION {
                    // Refused before a byte of it is buffered, as h2 refuses it on TCP.
                    if len > MAX_FRAME {
                        return Err(AuthorityError::FrameTooLarge(len));
                    }
                    self.state = State::HeaderPayload { kind, flags, stream, len };
                } else {
                    if self.block.is_some() {
                        return Err(AuthorityError::Interrupted(kind));
                    }
                    self.output.extend_from_slice(h);
                    self.state = if len == 0 { State::FrameHeader } else { State::Passthrough(len) };
                }
                Ok(Some(FRAME_HEADER_LEN))
            }
            State::HeaderPayload { kind, flags, stream, len } => {
                if avail.len() < len {
                    return Ok(None);
                }
                self.state = State::FrameHeader;
                // The payload is read in place: the input buffer is lent out for the call.
                let input = std::mem::take(&mut self.input);
                let result = self.header_frame(kind, flags, stream, &input[at..at + len]);
                self.input = input;
                result.map(|()| Some(len))
            }
        }
    }

    fn header_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Result<(), AuthorityError> {
        let malformed = || AuthorityError::Hpack("frame shorter than its padding or priority".into());
        let fragment = if kind == HEADERS {
            if self.block.is_some() {
                return Err(AuthorityError::Interrupted(kind));
            }
            let mut body = payload;
            if flags & PADDED != 0 {
                let (&pad, rest) = body.split_first().ok_or_else(malformed)?;
                body = rest
                    .get(..rest.len().checked_sub(usize::from(pad)).ok_or_else(malformed)?)
                    .ok_or_else(malformed)?;
            }
            let mut priority: &[u8] = &[];
            if flags & PRIORITY != 0 {
                priority = body.get(..5).ok_or_else(malformed)?;
                body = &body[5..];
            }
            let whole = flags & END_HEADERS != 0;
            let flags = flags & !(PADDED | END_HEADERS);
            if whole {
                // The whole block is in this frame (the usual case): read it in place.
                return self.finish_block(stream, flags, priority, body);
            }
            self.block = Some((stream, flags, priority.to_vec(), Vec::new()));
            self.block_frames = 1;
            body
        } else {
            match &self.block {
                Some((s, ..)) if *s == stream => {
                    self.block_frames += 1;
                    if self.block_frames > MAX_BLOCK_FRAMES {
                        return Err(AuthorityError::TooManyFrames);
                    }
                    payload
                }
                _ => return Err(AuthorityError::Interrupted(kind)),
            }
        };
        let Some((_, _, _, fragments)) = self.block.as_mut() else { return Err(AuthorityError::Interrupted(kind)) };
        if fragments.len() + fragment.len() > MAX_BLOCK {
            return Err(AuthorityError::TooLarge);
        }
        fragments.extend_from_slice(fragment);
        if flags & END_HEADERS != 0 {
            let (stream, flags, priority, block) = self.block.take().ok_or(AuthorityError::Interrupted(kind))?;
            return self.finish_block(stream, flags, &priority, &block);
        }
        Ok(())
    }

    /// Sends a whole header block on: as it came, or re-encoded.
    fn finish_block(&mut self, stream: u32, flags: u8, priority: &[u8], block: &[u8]) -> Result<(), AuthorityError> {
        match self.reencode(block)? {
            Some(encoded) => self.emit(stream, flags, priority, &encoded),
            None => self.emit(stream, flags, priority, block),
        }
        Ok(())
    }

    /// Decodes one whole block with the client's table. `None`: forward it as it came (no
    /// header needs a change and none has so far, so the server's table is the client's);
    /// else the block re-encoded as literals. A well-behaved client (a valid `:authority`,
    /// metadata within bounds) is never re-encoded: re-encoding every request was measured
    /// at about 40 µs of an empty call's latency.
    fn reencode(&mut self, block: &[u8]) -> Result<Option<Vec<u8>>, AuthorityError> {
        let (mut size, mut changed) = (0usize, false);
        let (fields, good) = (&mut self.fields, &mut self.good_authority);
        let decoded = self.decoder.decode(block, |name, value, never_indexed| {
            // RFC 7541 §4.1's accounting: each entry costs 32 bytes over its strings.
            size = size.saturating_add(name.len() + value.len() + 32);
            if size > MAX_BLOCK {
                // Past the limit nothing more is decoded.
                return false;
            }
            if name == OVERSIZED_METADATA.as_bytes() {
                // npud's own marker: a client's copy never reaches the server.
                changed = true;
                return true;
            }
            // The last good authority is remembered (never empty), so an empty one is
            // judged like any other, on a connection's first request too.
            let bad = name == b":authority" && (value.is_empty() || value != &good[..]) && {
                let valid = is_authority(value);
                if valid {
                    good.clear();
                    good.extend_from_slice(value);
                }
                !valid
            };
            changed |= bad;
            fields.push(name, if bad { LOCAL_AUTHORITY } else { value }, never_indexed);
            true
        });
        let result = match decoded {
            Err(crate::tenancy::hpack::HpackError::Stopped) => Err(AuthorityError::TooLarge),
            Err(e) => Err(AuthorityError::Hpack(e.to_string())),
            Ok(()) => self.rewritten(size, changed),
        };
        // The fields live only for this block; a large one's buffer is let go here.
        self.fields.clear();
        result
    }

    /// The decision on a decoded block (its fields in `self.fields`): `None` to forward it,
    /// else its fields as literals, trimmed and marked when the list is oversized.
    fn rewritten(&mut self, size: usize, changed: bool) -> Result<Option<Vec<u8>>, AuthorityError> {
        if size > MAX_BLOCK {
            return Err(AuthorityError::TooLarge);
        }
        let oversized = size > MAX_HEADER_LIST;
        if !changed && !oversized && !self.reencoding {
            return Ok(None);
        }
        self.reencoding = true;
        let mut out = Vec::with_capacity(self.fields.bytes.len() + 4 * self.fields.spans.len());
        for (name, value, never_indexed) in self.fields.iter() {
            if !oversized || name.starts_with(b":") || name == b"content-type" || name == b"te" {
                encode_literal(&mut out, name, value, never_indexed);
            }
        }
        if oversized {
            encode_literal(&mut out, OVERSIZED_METADATA.as_bytes(), size.to_string().as_bytes(), false);
        }
        Ok(Some(out))
    }

    /// Writes a header block as one HEADERS frame and as many CONTINUATION frames as the
    /// server's frame size needs.
    fn emit(&mut self, stream: u32, flags: u8, priority: &[u8], block: &[u8]) {
        let first = block.len().min(MAX_FRAME - priority.len());
        let (mut body, mut rest) = block.split_at(first);
        let (mut kind, mut frame_flags, mut prefix) = (HEADERS, flags, priority);
        loop {
            if rest.is_empty() {
                frame_flags |= END_HEADERS;
            }
            let len = prefix.len() + body.len();
            self.output.extend_from_slice(&frame_header(len, kind, frame_flags, stream));
            self.output.extend_from_slice(prefix);
            self.output.extend_from_slice(body);
            if rest.is_empty() {
                return;
            }
            (body, rest) = rest.split_at(rest.len().min(MAX_FRAME));
            (kind, frame_flags, prefix) = (CONTINUATION, 0, &[]);
        }
    }
}

fn is_authority(value: &[u8]) -> bool {
    !value.is_empty() && tonic::codegen::http::uri::Authority::try_from(value).is_ok()
}

#[cfg(test)]
mod tests;
