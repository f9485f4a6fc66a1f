//! The decoder against an independent implementation (`loona-hpack`) and the RFC's examples.

use super::*;

type List = Vec<(Vec<u8>, Vec<u8>)>;

fn ours(d: &mut Decoder, block: &[u8]) -> Result<List, HpackError> {
    let mut out = Vec::new();
    d.decode(block, |n, v, _| {
        out.push((n.to_vec(), v.to_vec()));
        true
    })?;
    Ok(out)
}

fn theirs(d: &mut loona_hpack::Decoder<'static>, block: &[u8]) -> List {
    d.decode(block).expect("loona decodes it")
}

fn list(fields: &[(&str, &str)]) -> List {
    fields.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())).collect()
}

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).expect("ascii"), 16).expect("hex")).collect()
}

/// A Huffman encoder built from our code table: what a real client (h2, grpc-core) sends.
fn huffman(s: &[u8]) -> Vec<u8> {
    let codes = huffman::codes();
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u64, 0u32);
    for &b in s {
        let (code, len) = codes[usize::from(b)];
        acc = acc << len | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        out.push((acc << (8 - bits)) as u8 | (0xff >> bits));
    }
    out
}

/// A literal with a new name, both strings Huffman-coded, with incremental indexing (which
/// adds it to the dynamic table) or without.
fn huffman_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8], indexing: bool) {
    out.push(if indexing { 0x40 } else { 0 });
    for s in [name, value] {
        let coded = huffman(s);
        integer(out, coded.len(), 7, 0x80);
        out.extend(coded);
    }
}

/// A small deterministic generator: the tests see the same inputs on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = (self.next() as usize) % (max + 1);
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn the_huffman_code_is_the_one_loona_decodes() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut samples: Vec<Vec<u8>> = vec![(0..=255).collect(), b"www.example.com".to_vec(), Vec::new()];
    samples.extend((0..500).map(|_| rng.bytes(64)));
    for s in samples {
        let coded = huffman(&s);
        let theirs = loona_hpack::huffman::HuffmanDecoder::new().decode(&coded).expect("loona decodes our code");
        assert_eq!(theirs, s, "loona reads our code for {s:?} differently");
        let mut mine = Vec::new();
        huffman::decode(&coded, &mut mine).expect("we decode our code");
        assert_eq!(mine, s);
    }
}

/// Arbitrary bytes read as Huffman: accepted and refused exactly where loona accepts and
/// refuses them (padding longer than 7 bits or not all ones, EOS), with the same output.
#[test]
fn arbitrary_huffman_input_is_judged_as_loona_judges_it() {
    let mut rng = Rng(0xdead_beef);
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..12_000 {
        let mut s = rng.bytes(10);
        // Bias towards the tail of real strings: ones, which padding and long codes share.
        if rng.next().is_multiple_of(2) {
            s.extend(std::iter::repeat_n(0xff, (rng.next() % 5) as usize));
        }
        let theirs = loona_hpack::huffman::HuffmanDecoder::new().decode(&s);
        let mut mine = Vec::new();
        let ours = huffman::decode(&s, &mut mine);
        assert_eq!(ours.is_ok(), theirs.is_ok(), "{s:02x?}: ours {ours:?}, loona {theirs:?}");
        if let Ok(t) = theirs {
            assert_eq!(mine, t, "{s:02x?}");
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    assert!(accepted > 1000 && refused > 1000, "both kinds were tried: {accepted} accepted, {refused} refused");
}

#[test]
fn the_static_table_is_the_rfcs() {
    for index in 1..=61u8 {
        let block = [0x80 | index];
        assert_eq!(
            ours(&mut Decoder::new(4096), &block).expect("static index"),
            theirs(&mut loona_hpack::Decoder::new(), &block),
            "static index {index}"
        );
    }
    assert_eq!(ours(&mut Decoder::new(4096), &[0x80 | 62]), Err(HpackError::Index(62)), "empty dynamic table");
    assert_eq!(ours(&mut Decoder::new(4096), &[0x80]), Err(HpackError::Index(0)), "index 0 is no field");
}

/// RFC 7541 C.4: three requests with Huffman coding, sharing one dynamic table.
#[test]
fn the_rfcs_huffman_requests_decode_with_a_shared_table() {
    let mut d = Decoder::new(4096);
    let first = ours(&mut d, &hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff")).expect("C.4.1");
    let authority = [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")];
    assert_eq!(first, list(&authority));
    let second = ours(&mut d, &hex("8286 84be 5886 a8eb 1064 9cbf")).expect("C.4.2");
    let mut want = authority.to_vec();
    want.push(("cache-control", "no-cache"));
    assert_eq!(second, list(&want));
    let third = ours(&mut d, &hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf")).expect("C.4.3");
    let want = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ];
    assert_eq!(third, list(&want));
    assert_eq!(d.size, 164, "the table's size after C.4.3");
    assert_eq!(d.table.len(), 3);
}

/// Blocks as loona's encoder writes them (indexing into its dynamic table, which evicts as
/// it fills) and as h2 or grpc-core write them (Huffman-coded literals): we read the same
/// fields loona's decoder reads, block after block on one connection.
#[test]
fn long_conversations_decode_as_loona_decodes_them() {
    let mut rng = Rng(42);
    let (mut encoder, mut reference, mut mine) =
        (loona_hpack::Encoder::new(), loona_hpack::Decoder::new(), Decoder::new(4096));
    let names: Vec<Vec<u8>> = (0..12).map(|i| format!("x-field-{i}").into_bytes()).collect();
    for round in 0..400 {
        let fields: List = (0..rng.next() % 8)
            .map(|_| (names[(rng.next() % 12) as usize].clone(), rng.bytes(if round % 50 == 0 { 3000 } else { 40 })))
            .collect();
        let block = if round % 3 == 0 {
            let mut b = Vec::new();
            // Without indexing: loona's encoder, which never sees this block, stays in step
            // with the decoders' tables.
            for (n, v) in &fields {
                huffman_literal(&mut b, n, v, false);
            }
            b
        } else {
            encoder.encode(fields.iter().map(|(n, v)| (&n[..], &v[..])))
        };
        let want = theirs(&mut reference, &block);
        assert_eq!(want, fields, "loona's round trip, round {round}");
        assert_eq!(ours(&mut mine, &block).expect("decodes"), want, "round {round}");
        assert_eq!(mine.size, mine.table.iter().map(Entry::size).sum::<usize>());
        assert!(mine.size <= 4096);
    }
}

#[test]
fn size_updates_evict_and_are_bounded() {
    let mut d = Decoder::new(4096);
    let mut block = Vec::new();
    huffman_literal(&mut block, b"a", b"b", true);
    huffman_literal(&mut block, b"c", b"d", true);
    ours(&mut d, &block).expect("two entries");
    assert_eq!((d.table.len(), d.size), (2, 68));
    // An update to 40 keeps the newest entry only; one to 0 empties the table.
    assert_eq!(ours(&mut d, &[0x3f, 0x09, 0x80 | 62]).expect("update to 40"), list(&[("c", "d")]));
    assert_eq!(d.table.len(), 1);
    assert_eq!(ours(&mut d, &[0x20, 0x80 | 62]), Err(HpackError::Index(62)));
    let mut too_big = Vec::new();
    integer(&mut too_big, 5000, 5, 0x20);
    assert_eq!(ours(&mut Decoder::new(4096), &too_big), Err(HpackError::TableSize(5000, 4096)));
    assert_eq!(ours(&mut Decoder::new(4096), &[0x82, 0x20]), Err(HpackError::LateSizeUpdate));
    // An entry larger than the table empties it and is not added (§4.4).
    let mut d = Decoder::new(64);
    let mut block = Vec::new();
    huffman_literal(&mut block, b"a", b"b", true);
    huffman_literal(&mut block, b"name", &[b'v'; 40], true);
    assert_eq!(ours(&mut d, &block).expect("decodes").len(), 2);
    assert_eq!((d.table.len(), d.size), (0, 0));
}

#[test]
fn malformed_blocks_are_errors_not_panics() {
    let cases: Vec<(Vec<u8>, HpackError)> = vec![
        (vec![0x40], HpackError::Truncated),
        (vec![0x40, 0x03, b'a'], HpackError::Truncated),
        (vec![0x04, 0x05, b'a'], HpackError::Truncated),
        (vec![0xff, 0xff, 0xff, 0xff, 0x0f], HpackError::Integer),
        (vec![0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00], HpackError::Integer),
        (vec![0xff], HpackError::Truncated),
        // A Huffman string of a full byte of ones ends in 8 bits of padding.
        (vec![0x00, 0x81, 0xff, 0x00], HpackError::Huffman(HuffmanError::Padding)),
        // 'a' (00011) then padding of zeros.
        (vec![0x00, 0x81, 0x18, 0x00], HpackError::Huffman(HuffmanError::Padding)),
        // EOS (30 ones) spelled out.
        (vec![0x00, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00], HpackError::Huffman(HuffmanError::Eos)),
    ];
    for (block, want) in cases {
        assert_eq!(ours(&mut Decoder::new(4096), &block), Err(want), "{block:02x?}");
    }
    let mut rng = Rng(7);
    for _ in 0..20_000 {
        let block = rng.bytes(48);
        let _ = ours(&mut Decoder::new(4096), &block);
    }
}

#[test]
fn literals_we_write_read_back_without_touching_the_table() {
    let mut block = Vec::new();
    let big = vec![b'q'; 100_000];
    encode_literal(&mut block, b":authority", b"localhost", false);
    encode_literal(&mut block, b"x-big", &big, true);
    encode_literal(&mut block, b"", b"", false);
    let want =
        vec![(b":authority".to_vec(), b"localhost".to_vec()), (b"x-big".to_vec(), big), (Vec::new(), Vec::new())];
    let mut reference = loona_hpack::Decoder::new();
    assert_eq!(theirs(&mut reference, &block), want);
    let mut d = Decoder::new(4096);
    assert_eq!(ours(&mut d, &block).expect("decodes"), want);
    assert!(d.table.is_empty());
    assert!(d.value.capacity() <= KEEP, "the 20 KB value's buffer is let go");
}
