//! Reading the files npud is handed (its config, TLS material) or keeps (its state): each
//! read is bounded. A path can name something that never ends (`--config /dev/zero` read
//! for ever), and a file that grew without bound must not take the daemon's memory; a
//! pipe (`--config <(generate)`) still reads to its end.

use std::io::Read;
use std::path::Path;

/// The whole of `path`, refused once it passes `limit` bytes (nothing past that is read).
///
/// Read into a page-sized buffer from the start: `/proc` files say they are empty, so
/// `fs::read` would stat the file and then grow its buffer from 32 bytes, five reads for a
/// cgroup file where this takes two. The cgroup read runs on every connection, between the
/// accept and the first answer.
pub fn read_bounded(path: &Path, limit: usize) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::with_capacity(limit.min(4096));
    file.take(limit as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > limit {
        return Err(std::io::Error::new(std::io::ErrorKind::FileTooLarge, format!("it is larger than {limit} bytes")));
    }
    Ok(bytes)
}

/// [`read_bounded`], as UTF-8 text.
pub fn read_text_bounded(path: &Path, limit: usize) -> std::io::Result<String> {
    String::from_utf8(read_bounded(path, limit)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_never_ends_is_refused_after_the_limit() {
        let e = read_bounded(Path::new("/dev/zero"), 4096).expect_err("/dev/zero never ends");
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
    }

    #[test]
    fn a_file_at_the_limit_is_read_whole_and_text_must_be_utf8() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, "x".repeat(100)).expect("write");
        assert_eq!(read_text_bounded(&path, 100).expect("100 bytes").len(), 100);
        assert_eq!(read_bounded(&path, 99).expect_err("over").kind(), std::io::ErrorKind::FileTooLarge);
        std::fs::write(&path, b"\xff\xfe").expect("write");
        assert_eq!(read_text_bounded(&path, 100).expect_err("not text").kind(), std::io::ErrorKind::InvalidData);
    }
}
