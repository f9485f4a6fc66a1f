//! A hand-made HTTP/2 client for hostile tests (RFC 9113 framing, RFC 7541 literal header
//! fields): it sets its streams' receive window to 0 (SETTINGS_INITIAL_WINDOW_SIZE), so no
//! reply's data can ever reach it, yet it reads every frame, acknowledges SETTINGS and
//! PINGs, and so looks alive to keepalives. What a client that never reads its replies
//! looks like to a server that only watches its socket.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A literal header field without indexing, new name (RFC 7541 6.2.2); names and values
/// here are short enough for one-byte lengths.
fn literal(block: &mut Vec<u8>, name: &str, value: &str) {
    block.push(0x00);
    block.push(name.len() as u8);
    block.extend_from_slice(name.as_bytes());
    block.push(value.len() as u8);
    block.extend_from_slice(value.as_bytes());
}

/// One connection that never lets a reply's data through.
pub struct Stalled {
    writer: Arc<Mutex<UnixStream>>,
    next_stream: u32,
    /// Reply HEADERS frames seen (a refused call's trailers-only reply is one of them).
    pub headers_seen: Arc<AtomicU64>,
    /// The server closed the connection (or sent GOAWAY).
    pub closed: Arc<AtomicBool>,
}

impl Stalled {
    pub fn connect(socket: &std::path::Path) -> std::io::Result<Stalled> {
        let mut s = UnixStream::connect(socket)?;
        // SETTINGS_ENABLE_PUSH = 0, SETTINGS_INITIAL_WINDOW_SIZE = 0.
        let settings = [[0u8, 2, 0, 0, 0, 0], [0, 4, 0, 0, 0, 0]].concat();
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &settings));
        s.write_all(&hello)?;
        let reader = s.try_clone()?;
        let writer = Arc::new(Mutex::new(s));
        let (headers_seen, closed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (w, seen, shut) = (Arc::clone(&writer), Arc::clone(&headers_seen), Arc::clone(&closed));
        std::thread::spawn(move || read_frames(reader, &w, &seen, &shut));
        Ok(Stalled { writer, next_stream: 1, headers_seen, closed })
    }

    /// Sends `n` unary calls of `path` with an empty request message.
    pub fn call(&mut self, path: &str, n: u32) -> std::io::Result<()> {
        let mut out = Vec::new();
        for _ in 0..n {
            let mut block = Vec::new();
            for (name, value) in [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", "localhost"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ] {
                literal(&mut block, name, value);
            }
            out.extend(frame(HEADERS, END_HEADERS, self.next_stream, &block));
            out.extend(frame(DATA, END_STREAM, self.next_stream, &[0, 0, 0, 0, 0]));
            self.next_stream += 2;
        }
        self.writer.lock().unwrap().write_all(&out)
    }
}

impl Drop for Stalled {
    /// The client goes: its connection closes (its reader, blocked on it, with it).
    fn drop(&mut self) {
        let _ = self.writer.lock().unwrap().shutdown(std::net::Shutdown::Both);
    }
}

/// Reads every frame; answers SETTINGS and PING; never opens a window.
fn read_frames(mut r: UnixStream, w: &Mutex<UnixStream>, seen: &AtomicU64, closed: &AtomicBool) {
    let mut head = [0u8; 9];
    loop {
        if r.read_exact(&mut head).is_err() {
            break;
        }
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let mut payload = vec![0u8; len];
        if r.read_exact(&mut payload).is_err() {
            break;
        }
        let answer = match kind {
            SETTINGS if flags & ACK == 0 => Some(frame(SETTINGS, ACK, 0, &[])),
            PING if flags & ACK == 0 => Some(frame(PING, ACK, 0, &payload)),
            HEADERS => {
                seen.fetch_add(1, Ordering::Relaxed);
                None
            }
            GOAWAY => break,
            _ => None,
        };
        if let Some(a) = answer
            && w.lock().unwrap().write_all(&a).is_err()
        {
            break;
        }
    }
    closed.store(true, Ordering::Relaxed);
}
