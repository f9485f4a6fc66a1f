//! The install directory and its files, trusted only as far as who could have written
//! them. What npud installs there is mounted into every allocated container and preloaded
//! into every process in it, so a directory another uid can write, a file another uid
//! planted, or a link npud would follow, would hand that uid every pod on the node.
//!
//! The rules, as for the socket's directory (`serve::check_socket_dir`), and stricter:
//! - the directory and every directory above it are owned by root (or by npud's own uid,
//!   for an npud that runs as a user) and writable by no one else; a sticky directory
//!   above it (`/tmp`) is allowed, since no one else may rename or remove what is in it;
//! - a file is created with `O_CREAT | O_EXCL | O_NOFOLLOW`, filled, and its mode set on
//!   the descriptor, never by name;
//! - an existing file is trusted only if it is a regular file owned as above, writable by
//!   no one else, with the content npud would write; one that is not a regular file or is
//!   someone else's is refused, naming it;
//! - every open is `O_NONBLOCK | O_NOFOLLOW`, so a FIFO or a link at a name npud reads
//!   never holds up start-up or leads elsewhere.

use std::io::{Error, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The most an installed file may weigh (a release interposer is a few MiB).
pub const MAX_FILE: u64 = 256 << 20;

/// Whose files npud trusts: root's, and its own.
fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

/// Makes `dir` if it is missing (0755) and checks it and every directory above it.
pub fn check_dir(dir: &Path) -> Result<(), Error> {
    if !dir.is_absolute() {
        return Err(Error::other(format!("{} is not an absolute path", dir.display())));
    }
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir)?;
    }
    let real = std::fs::canonicalize(dir)?;
    let meta = std::fs::metadata(&real)?;
    if !meta.is_dir() {
        return Err(Error::other(format!("{} is not a directory", dir.display())));
    }
    check_one(&real, &meta, false)?;
    // Above it, as written and as resolved: a link on the way lives in a directory that
    // must be as safe as the rest.
    let mut above: Vec<PathBuf> = real.ancestors().skip(1).map(Path::to_path_buf).collect();
    above.extend(dir.ancestors().skip(1).map(Path::to_path_buf));
    above.sort();
    above.dedup();
    for d in above {
        let meta = std::fs::metadata(&d)?;
        check_one(&d, &meta, true)?;
    }
    Ok(())
}

fn check_one(dir: &Path, meta: &std::fs::Metadata, sticky_allowed: bool) -> Result<(), Error> {
    if !trusted_owner(meta.uid()) {
        return Err(Error::other(format!(
            "{} is owned by uid {}, not root: that uid could replace what npud installs",
            dir.display(),
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode();
    let sticky = mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !(sticky_allowed && sticky) {
        return Err(Error::other(format!(
            "{} is writable by its group or by everyone (mode {:o}): another uid could plant what pods preload",
            dir.display(),
            mode & 0o7777
        )));
    }
    Ok(())
}

/// What stands at a name npud installs to.
#[derive(Debug, PartialEq, Eq)]
pub enum Existing {
    /// Nothing: npud writes it.
    Absent,
    /// npud's own file with the content it would write: kept as it is.
    Same,
    /// A file npud may have written, with other content (an install cut short): replaced.
    Differs,
}

/// Judges `path` against `want` without following a link or blocking on it; refuses what
/// no one should have put there.
pub fn existing(path: &Path, want: &[u8]) -> Result<Existing, Error> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Absent),
        Err(e) => return Err(e),
    };
    trusted_file(path, &meta)?;
    let mut f = open_no_follow(path)?;
    // Judged again on the descriptor: the name may have changed since the look above.
    trusted_file(path, &f.metadata()?)?;
    let mut have = Vec::new();
    Read::by_ref(&mut f).take(MAX_FILE + 1).read_to_end(&mut have)?;
    Ok(if have == want { Existing::Same } else { Existing::Differs })
}

fn trusted_file(path: &Path, meta: &std::fs::Metadata) -> Result<(), Error> {
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_symlink() {
            "a symbolic link"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "not a regular file (a FIFO, a socket or a device)"
        };
        return Err(Error::other(format!("{} is {what}; npud installs only its own regular files", path.display())));
    }
    if !trusted_owner(meta.uid()) {
        return Err(Error::other(format!(
            "{} is owned by uid {}, not root: someone else put it there",
            path.display(),
            meta.uid()
        )));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(Error::other(format!(
            "{} is writable by its group or by everyone (mode {:o})",
            path.display(),
            meta.permissions().mode() & 0o7777
        )));
    }
    Ok(())
}

/// Reads a file that is never a link and never blocks to be opened (a FIFO, a device).
pub fn open_no_follow(path: &Path) -> Result<std::fs::File, Error> {
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)
}

/// Writes `bytes` to a new file at `tmp` (which must not exist: a file, a link or a FIFO
/// there is refused), flushed, mode `mode` set on the descriptor, and renames it over
/// `path`. A stale temporary file of npud's own (an install cut short, an npud that had
/// the same pid) is removed first.
pub fn write_then_rename(path: &Path, tmp: &Path, bytes: &[u8], mode: u32) -> Result<(), Error> {
    if let Ok(meta) = std::fs::symlink_metadata(tmp) {
        trusted_file(tmp, &meta)?;
        std::fs::remove_file(tmp)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(tmp)
        .map_err(|e| Error::new(e.kind(), format!("cannot create {}: {e}", tmp.display())))?;
    let written = (|| {
        f.write_all(bytes)?;
        f.sync_all()?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    written
}
