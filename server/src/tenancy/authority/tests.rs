use super::*;
// The client's encoder and the server's decoder are another implementation's (loona-hpack),
// so the rewriter is checked against HPACK as someone else reads it.
use loona_hpack::{Decoder, Encoder};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A whole header block as a client frames it: HEADERS, then CONTINUATIONs, none larger
/// than the server's 16,384 bytes.
fn block_frames(stream: u32, block: &[u8]) -> Vec<u8> {
    let pieces: Vec<&[u8]> = block.chunks(MAX_FRAME).collect();
    let mut out = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        let kind = if i == 0 { HEADERS } else { CONTINUATION };
        out.extend(frame(kind, if i + 1 == pieces.len() { END_HEADERS } else { 0 }, stream, piece));
    }
    out
}

/// Splits the rewriter's output into frames: (type, flags, stream, payload).
fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
        out.push((bytes[3], bytes[4], stream, bytes[9..9 + len].to_vec()));
        bytes = &bytes[9 + len..];
    }
    out
}

fn request(authority: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/grpc.health.v1.Health/Check"),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    .iter()
    .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
    .collect()
}

fn encode(enc: &mut Encoder<'static>, headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    enc.encode(headers.iter().map(|(n, v)| (&n[..], &v[..])))
}

/// Runs `input` through a rewriter `chunk` bytes at a time; returns the server's view.
fn rewrite(input: &[u8], chunk: usize) -> Result<Vec<u8>, AuthorityError> {
    let mut r = AuthorityRewriter::default();
    let mut seen = Vec::new();
    for piece in input.chunks(chunk) {
        r.feed(piece)?;
        seen.append(r.output());
    }
    Ok(seen)
}

/// The header blocks the server would decode, one list per HEADERS..END_HEADERS run.
fn server_view(bytes: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut dec = Decoder::new();
    let (mut lists, mut block) = (Vec::new(), Vec::new());
    for (kind, flags, _, payload) in frames(&bytes[PREFACE.len()..]) {
        if kind == HEADERS || kind == CONTINUATION {
            block.extend_from_slice(&payload[if flags & PRIORITY != 0 { 5 } else { 0 }..]);
            if flags & END_HEADERS != 0 {
                lists.push(dec.decode(&block).expect("the server can decode what it is sent"));
                block.clear();
            }
        }
    }
    lists
}

fn authority(list: &[(Vec<u8>, Vec<u8>)]) -> String {
    let (_, v) = list.iter().find(|(n, _)| n == b":authority").expect(":authority");
    String::from_utf8(v.clone()).expect("utf-8")
}

#[test]
fn a_socket_path_authority_becomes_localhost_and_everything_else_is_kept() {
    let mut client = Encoder::new();
    let mut input = PREFACE.to_vec();
    input.extend(frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100])); // SETTINGS
    input.extend(frame(HEADERS, END_HEADERS, 1, &encode(&mut client, &request("/run/npud/npud.sock"))));
    input.extend(frame(0x0, 0x1, 1, b"\0\0\0\0\0")); // DATA, END_STREAM
    // The second request leans on the client's dynamic table.
    input.extend(frame(HEADERS, END_HEADERS, 3, &encode(&mut client, &request("/run/npud/npud.sock"))));
    for chunk in [1, 7, 4096] {
        let out = rewrite(&input, chunk).expect("a well-formed stream passes");
        assert_eq!(&out[..PREFACE.len()], PREFACE);
        let lists = server_view(&out);
        assert_eq!(lists.len(), 2);
        for list in &lists {
            assert_eq!(authority(list), "localhost");
            let others: Vec<_> = list.iter().filter(|(n, _)| n != b":authority").cloned().collect();
            let want: Vec<_> = request("x").into_iter().filter(|(n, _)| n != b":authority").collect();
            assert_eq!(others, want);
        }
        let kinds: Vec<_> = frames(&out[PREFACE.len()..]).iter().map(|f| (f.0, f.2)).collect();
        assert_eq!(kinds, [(0x4, 0), (HEADERS, 1), (0x0, 1), (HEADERS, 3)]);
        let data = frames(&out[PREFACE.len()..]).remove(2);
        assert_eq!((data.1, data.3), (0x1, b"\0\0\0\0\0".to_vec()));
    }
}

#[test]
fn a_valid_authority_is_left_as_the_client_sent_it() {
    let mut client = Encoder::new();
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS | 0x1, 1, &encode(&mut client, &request("npud.local:50051"))));
    let out = rewrite(&input, 64).expect("passes");
    assert_eq!(authority(&server_view(&out)[0]), "npud.local:50051");
    assert_eq!(frames(&out[PREFACE.len()..])[0].1, END_HEADERS | 0x1, "END_STREAM survives");
}

#[test]
fn padding_priority_and_continuations_are_understood() {
    let mut client = Encoder::new();
    let block = encode(&mut client, &request("/tmp/npud.sock"));
    let (a, b) = block.split_at(block.len() / 2);
    let mut payload = vec![3u8]; // pad length
    payload.extend_from_slice(&[0x80, 0, 0, 1, 15]); // priority: exclusive on stream 1, weight 15
    payload.extend_from_slice(a);
    payload.extend_from_slice(&[0, 0, 0]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, PADDED | PRIORITY, 3, &payload));
    input.extend(frame(CONTINUATION, END_HEADERS, 3, b));
    let out = rewrite(&input, 5).expect("passes");
    let f = frames(&out[PREFACE.len()..]);
    assert_eq!(f.len(), 1, "the block is re-sent as one frame");
    assert_eq!(f[0].1, PRIORITY | END_HEADERS, "padding is dropped, priority kept");
    assert_eq!(&f[0].3[..5], &[0x80, 0, 0, 1, 15]);
    assert_eq!(authority(&server_view(&out)[0]), "localhost");

    // The same block whole in one padded frame with a priority, read in place.
    let mut payload = vec![2u8, 0x80, 0, 0, 1, 15];
    payload.extend_from_slice(&block);
    payload.extend_from_slice(&[0, 0]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, PADDED | PRIORITY | END_HEADERS, 3, &payload));
    let out = rewrite(&input, 3).expect("passes");
    let f = frames(&out[PREFACE.len()..]);
    assert_eq!((f.len(), f[0].1), (1, PRIORITY | END_HEADERS));
    assert_eq!(authority(&server_view(&out)[0]), "localhost");
}

#[test]
fn a_block_larger_than_one_frame_is_split_into_continuations() {
    // Lists that large are trimmed first (see the oversized test), so drive the framing
    // directly: 36 KB of block with a priority prefix.
    let mut r = AuthorityRewriter::default();
    let block: Vec<u8> = (0..36_000u32).map(|i| i as u8).collect();
    r.emit(1, PRIORITY | 0x1, &[0, 0, 0, 3, 7], &block);
    let out = r.output().clone();
    let f = frames(&out);
    assert!(f.len() >= 3, "36 KB need three frames, got {}", f.len());
    assert!(f.iter().all(|(_, _, s, p)| *s == 1 && p.len() <= MAX_FRAME));
    assert_eq!((f[0].0, f[0].1), (HEADERS, PRIORITY | 0x1), "END_STREAM and PRIORITY on the first frame");
    assert!(f[1..].iter().all(|x| x.0 == CONTINUATION));
    assert!(f[..f.len() - 1].iter().all(|x| x.1 & END_HEADERS == 0));
    assert_eq!(f[f.len() - 1].1, END_HEADERS);
    let mut joined = f[0].3[5..].to_vec();
    for x in &f[1..] {
        joined.extend_from_slice(&x.3);
    }
    assert_eq!(joined, block, "the block arrives whole and in order");
}

#[test]
fn hostile_blocks_close_the_connection_instead_of_growing_memory() {
    // One 4 KB table entry referenced 300,000 times: 1.2 GB if decoded naively.
    let mut block = vec![0x40, 1, b'x', 0x7f];
    block.extend(loona_hpack::encoder::encode_integer(4000, 7).iter().skip(1));
    block.extend(vec![b'a'; 4000]);
    block.extend(std::iter::repeat_n(0x80 | 62, 300_000));
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, 0, 1, &block[..16_000]));
    let mut at = 16_000;
    while at < block.len() {
        let end = (at + 16_000).min(block.len());
        input.extend(frame(CONTINUATION, if end == block.len() { END_HEADERS } else { 0 }, 1, &block[at..end]));
        at = end;
    }
    assert_eq!(rewrite(&input, 65_536), Err(AuthorityError::TooLarge));

    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, 0, 1, &[0x82]));
    input.extend(frame(0x0, 0, 1, b"x"));
    assert_eq!(rewrite(&input, 64), Err(AuthorityError::Interrupted(0)));

    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS, 1, &[0xff, 0xff, 0xff, 0x0f]));
    assert!(matches!(rewrite(&input, 64), Err(AuthorityError::Hpack(_))));

    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS | PADDED, 1, &[9, 0x82]));
    assert!(matches!(rewrite(&input, 64), Err(AuthorityError::Hpack(_))), "padding longer than the frame");
}

#[test]
fn an_oversized_header_list_is_trimmed_and_marked_instead_of_refused_by_http2() {
    let mut client = Encoder::new();
    let mut headers = request("/tmp/npud.sock");
    headers.push((b"npud-session".to_vec(), b"42".to_vec()));
    headers.push((b"x-huge".to_vec(), vec![b'v'; 20_000]));
    let mut input = PREFACE.to_vec();
    input.extend(block_frames(1, &encode(&mut client, &headers)));
    let out = rewrite(&input, 4096).expect("passes");
    let list = &server_view(&out)[0];
    let names: Vec<&[u8]> = list.iter().map(|(n, _)| &n[..]).collect();
    assert!(names.contains(&&b":path"[..]) && names.contains(&&b"content-type"[..]));
    assert!(!names.contains(&&b"x-huge"[..]) && !names.contains(&&b"npud-session"[..]), "metadata dropped");
    let marker = list.iter().find(|(n, _)| n == OVERSIZED_METADATA.as_bytes()).expect("marked");
    let size: usize = String::from_utf8_lossy(&marker.1).parse().expect("a size");
    assert!(size > 20_000);
    assert!(list.iter().map(|(n, v)| n.len() + v.len() + 32).sum::<usize>() < MAX_HEADER_LIST);
}

/// A client that needs no change is forwarded byte for byte (its HPACK table is the
/// server's); when a later block needs one, every block from then on is re-encoded as
/// literals, so blocks that lean on the client's table still decode on the server.
#[test]
fn blocks_go_through_verbatim_until_one_needs_a_change() {
    let mut client = Encoder::new();
    let (first, second) = (encode(&mut client, &request("localhost")), encode(&mut client, &request("localhost")));
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS, 1, &first));
    input.extend(frame(HEADERS, END_HEADERS, 3, &second));
    let mut huge = request("localhost");
    huge.push((b"x-huge".to_vec(), vec![b'v'; 20_000]));
    input.extend(block_frames(5, &encode(&mut client, &huge)));
    // After the switch the client's blocks still index its own table.
    input.extend(frame(HEADERS, END_HEADERS, 7, &encode(&mut client, &request("/run/npud/npud.sock"))));
    input.extend(frame(HEADERS, END_HEADERS, 9, &encode(&mut client, &request("localhost"))));
    for chunk in [1, 13, 65_536] {
        let out = rewrite(&input, chunk).expect("passes");
        let blocks = frames(&out[PREFACE.len()..]);
        assert_eq!(blocks[0].3, first, "forwarded as the client encoded it");
        assert_eq!(blocks[1].3, second);
        let lists = server_view(&out);
        assert_eq!(lists.len(), 5);
        assert_eq!(lists[0], request("localhost"));
        assert_eq!(lists[1], request("localhost"));
        assert!(lists[2].iter().any(|(n, _)| n == OVERSIZED_METADATA.as_bytes()), "trimmed and marked");
        assert!(!lists[2].iter().any(|(n, _)| n == b"x-huge"));
        assert_eq!(authority(&lists[3]), "localhost", "rewritten");
        assert_eq!(lists[4], request("localhost"));
    }
}

/// A hostile block near the 1 MiB bound is decoded once; the connection does not keep the
/// memory it took for the rest of its life.
#[test]
fn a_large_block_does_not_stay_allocated() {
    let mut client = Encoder::new();
    let mut headers = request("/tmp/npud.sock");
    headers.push((b"x-huge".to_vec(), vec![b'v'; 600_000]));
    let mut input = PREFACE.to_vec();
    let block = encode(&mut client, &headers);
    input.extend(frame(HEADERS, 0, 1, &block[..16_000]));
    for (i, piece) in block[16_000..].chunks(16_000).enumerate() {
        let last = 16_000 + (i + 1) * 16_000 >= block.len();
        input.extend(frame(CONTINUATION, if last { END_HEADERS } else { 0 }, 1, piece));
    }
    let mut r = AuthorityRewriter::default();
    r.feed(&input).expect("a large but bounded block passes, trimmed");
    assert!(server_view(&std::mem::take(r.output()))[0].iter().any(|(n, _)| n == OVERSIZED_METADATA.as_bytes()));
    let kept = r.input.capacity() + r.fields.bytes.capacity() + r.fields.spans.capacity() * 24;
    assert!(kept <= 128 * 1024, "{kept} bytes kept after the block");
}

/// Issue 31: the faults h2 refuses on TCP are refused here too, ending in frames that make
/// the server send the GOAWAY it sends there, and nothing after them is forwarded.
#[test]
fn protocol_errors_are_handed_on_for_the_servers_goaway_and_end_the_stream() {
    let tail = |input: &[u8]| {
        let mut r = AuthorityRewriter::default();
        let e = r.feed(input).expect_err("refused");
        assert!(r.feed(&frame(0x6, 0, 0, &[0; 8])).is_ok(), "what follows is dropped");
        let out = r.output().clone();
        (e, frames(&out[PREFACE.len()..]))
    };
    // A header frame over the 16,384 bytes the server advertises, refused before buffering.
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, 0, 1, &[0x82; 16_385]));
    let mut r = AuthorityRewriter::default();
    assert_eq!(r.feed(&input[..PREFACE.len() + 9]), Err(AuthorityError::FrameTooLarge(16_385)));
    let out = r.output().clone();
    assert_eq!(&out[PREFACE.len()..PREFACE.len() + 4], &[0, 0x40, 0x01, HEADERS], "a frame h2 finds too large");
    assert_eq!(out.len(), PREFACE.len() + 9, "only its header");
    // Bad HPACK: a block h2 cannot decode either (COMPRESSION_ERROR).
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS, 3, &[0xff, 0xff, 0xff, 0x0f]));
    let (e, f) = tail(&input);
    assert!(matches!(e, AuthorityError::Hpack(_)));
    assert_eq!(f, vec![(HEADERS, END_HEADERS, 3, vec![0x80])]);
    // An interrupted block (PROTOCOL_ERROR): an open block, then another frame.
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, 0, 5, &[0x82]));
    input.extend(frame(0x0, 0, 5, b"x"));
    let (e, f) = tail(&input);
    assert_eq!(e, AuthorityError::Interrupted(0));
    assert_eq!(f, vec![(HEADERS, 0, 5, vec![]), (0x6, 0, 0, vec![0; 8])]);
    // A CONTINUATION flood: empty frames cost no bytes, so their number is bounded.
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, 0, 7, &[0x82]));
    for _ in 0..MAX_BLOCK_FRAMES {
        input.extend(frame(CONTINUATION, 0, 7, &[]));
    }
    assert_eq!(tail(&input).0, AuthorityError::TooManyFrames);
}

#[test]
fn an_empty_authority_is_rewritten_on_a_connections_first_request_too() {
    for authority in ["", "/run/npud.sock"] {
        let mut client = Encoder::new();
        let mut input = PREFACE.to_vec();
        input.extend(frame(HEADERS, END_HEADERS, 1, &encode(&mut client, &request(authority))));
        input.extend(frame(HEADERS, END_HEADERS, 3, &encode(&mut client, &request(authority))));
        let out = rewrite(&input, 7).expect("passes");
        let lists = server_view(&out);
        assert_eq!((authority_of(&lists[0]), authority_of(&lists[1])), ("localhost".into(), "localhost".into()));
    }
}

fn authority_of(list: &[(Vec<u8>, Vec<u8>)]) -> String {
    authority(list)
}

#[test]
fn never_indexed_fields_stay_never_indexed_and_npuds_own_marker_is_stripped() {
    // A re-encoded block (its authority needs the change) with a never-indexed secret and
    // the client's own copy of npud's internal marker.
    let mut block = Vec::new();
    for (name, value) in request("/tmp/npud.sock") {
        encode_literal(&mut block, &name, &value, false);
    }
    encode_literal(&mut block, b"authorization", b"Bearer s3cret", true);
    encode_literal(&mut block, OVERSIZED_METADATA.as_bytes(), b"1", false);
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS, 1, &block));
    let out = rewrite(&input, 64).expect("passes");
    let (_, _, _, payload) = frames(&out[PREFACE.len()..]).remove(0);
    let mut seen = Vec::new();
    crate::tenancy::hpack::Decoder::new(4096)
        .decode(&payload, |n, v, never| {
            seen.push((n.to_vec(), v.to_vec(), never));
            true
        })
        .expect("decodes");
    let secret = seen.iter().find(|(n, ..)| n == b"authorization").expect("kept");
    assert_eq!((&secret.1[..], secret.2), (&b"Bearer s3cret"[..], true), "still never indexed");
    assert!(seen.iter().all(|(n, ..)| n != OVERSIZED_METADATA.as_bytes()), "the client's marker is gone");
    assert!(seen.iter().filter(|(n, ..)| n != b"authorization").all(|(.., never)| !never));
}
