//! The interposer on the host, for Allocate to mount into workload containers.
//!
//! A process that has the library mapped must never see the file change under it: a file
//! rewritten in place (`cp` over it) keeps its inode, so the process's pages change too,
//! and it dies with SIGSEGV, or SIGBUS where the file got shorter. So npud installs the
//! library it ships under a name that carries its content hash, written to a temporary
//! name and renamed into place (a new inode; nothing mapped ever changes), and Allocate
//! mounts that exact file, with an `ld.so.preload` file naming it beside it. A restart or
//! an upgrade installs a new name and leaves the old one for the containers that mapped
//! it (and for the kubelet, which reuses a container's checkpointed Allocate answer when
//! it restarts): an old file goes only once no allocation that mounted it is left.

pub mod elf;
mod trusted;

use sha2::Digest;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use trusted::Existing;

/// Where the interposer appears inside a container: its hashed file name, under this.
pub const CONTAINER_DIR: &str = "/usr/local/lib/npud";
/// The file glibc's loader reads every process's preloads from (ld.so(8)).
pub const LD_SO_PRELOAD: &str = "/etc/ld.so.preload";
/// The installed libraries' and preload files' names begin with these.
const LIBRARY_PREFIX: &str = "libnpud_preload-";
const PRELOAD_PREFIX: &str = "ld.so.preload-";

/// The installed interposer: the host files Allocate mounts, and where in the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The library on the host, `libnpud_preload-<hash>.so`.
    pub library: PathBuf,
    /// A one-line file naming the library's container path, mounted at /etc/ld.so.preload.
    pub preload_file: PathBuf,
    /// The library's path in the container.
    pub container_path: String,
}

impl Installed {
    /// The file name the installation is known by (what an allocation records).
    pub fn name(&self) -> String {
        self.library.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }
}

/// Installs `source` into `dir` under its content hash (see the module), unless npud's
/// own file of that name is there already; returns what Allocate mounts. A directory or a
/// file anyone but root could have written is refused, naming it (`trusted`).
pub fn install(source: &Path, dir: &Path, glibc: Option<&[u32]>) -> std::io::Result<Installed> {
    let bytes = read_source(source)?;
    if let Some(floor) = glibc {
        let newer = elf::newer_than(&bytes, floor).map_err(std::io::Error::other)?;
        if !newer.is_empty() {
            let floor: Vec<String> = floor.iter().map(u32::to_string).collect();
            return Err(std::io::Error::other(format!(
                "{} needs a glibc newer than {} ([kubernetes] interposer_glibc), the oldest the images may have:                  {}; preloaded into an older image it stops every process there. Install the build for glibc 2.17                  (scripts/old-glibc.sh, the shipped image's), or raise interposer_glibc if every image is newer",
                source.display(),
                floor.join("."),
                newer.join(", ")
            )));
        }
    }
    let hash: String = sha2::Sha256::digest(&bytes).iter().take(8).map(|b| format!("{b:02x}")).collect();
    let name = format!("{LIBRARY_PREFIX}{hash}.so");
    trusted::check_dir(dir)?;
    let library = dir.join(&name);
    put(&library, &bytes, 0o555)?;
    let container_path = format!("{CONTAINER_DIR}/{name}");
    let preload_file = dir.join(format!("{PRELOAD_PREFIX}{hash}"));
    put(&preload_file, format!("{container_path}\n").as_bytes(), 0o444)?;
    Ok(Installed { library, preload_file, container_path })
}

/// The library npud ships: a regular file of at most [`trusted::MAX_FILE`] bytes, read
/// without blocking on whatever is at its name.
fn read_source(source: &Path) -> std::io::Result<Vec<u8>> {
    let not_a_library = || {
        std::io::Error::other(format!(
            "{} is not a library file of at most {} bytes",
            source.display(),
            trusted::MAX_FILE
        ))
    };
    let meta = std::fs::metadata(source)?;
    if !meta.is_file() || meta.len() > trusted::MAX_FILE {
        return Err(not_a_library());
    }
    let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(source)?;
    if !f.metadata()?.is_file() {
        return Err(not_a_library());
    }
    let mut bytes = Vec::new();
    f.by_ref().take(trusted::MAX_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > trusted::MAX_FILE {
        return Err(not_a_library());
    }
    Ok(bytes)
}

/// `path` holds `bytes` afterwards: kept where npud's own file already does, written
/// (to a temporary name, then renamed) otherwise.
fn put(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    if trusted::existing(path, bytes)? == Existing::Same {
        return Ok(());
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    trusted::write_then_rename(path, &tmp, bytes, mode)
}

/// Removes the installed libraries (and their preload files) in `dir` that are neither
/// `current` nor named in `in_use` (what live allocations mounted). Returns how many went.
pub fn remove_unused(dir: &Path, current: &str, in_use: &[String]) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let hash = match (file.strip_prefix(LIBRARY_PREFIX), file.strip_prefix(PRELOAD_PREFIX)) {
            (Some(rest), _) => rest.strip_suffix(".so").unwrap_or(""),
            (None, Some(rest)) => rest,
            (None, None) => continue,
        };
        let library = format!("{LIBRARY_PREFIX}{hash}.so");
        if hash.is_empty() || library == current || in_use.contains(&library) {
            continue;
        }
        if std::fs::remove_file(e.path()).is_ok() {
            tracing::info!(file, "an interposer no allocation uses any more was removed");
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn an_upgrade_installs_a_new_file_and_never_touches_a_mapped_one() {
        let dir = tempfile::tempdir().unwrap();
        let (src, lib) = (dir.path().join("src.so"), dir.path().join("lib"));
        std::fs::write(&src, b"release one").unwrap();
        let one = install(&src, &lib, None).unwrap();
        assert!(one.name().starts_with("libnpud_preload-") && one.name().ends_with(".so"));
        assert_eq!(std::fs::read_to_string(&one.preload_file).unwrap(), format!("{}\n", one.container_path));
        let inode = std::fs::metadata(&one.library).unwrap().ino();
        assert_eq!(install(&src, &lib, None).unwrap(), one, "the same content, the same file");
        assert_eq!(std::fs::metadata(&one.library).unwrap().ino(), inode, "not rewritten");
        std::fs::write(&src, b"release two").unwrap();
        let two = install(&src, &lib, None).unwrap();
        assert_ne!(two.library, one.library);
        assert_eq!(std::fs::read(&one.library).unwrap(), b"release one", "the old file is as it was");
        assert_eq!(std::fs::metadata(&one.library).unwrap().ino(), inode);
        // The old one stays while an allocation uses it, and goes after.
        assert_eq!(remove_unused(&lib, &two.name(), std::slice::from_ref(&one.name())), 0);
        assert_eq!(remove_unused(&lib, &two.name(), &[]), 2, "the library and its preload file");
        assert!(!one.library.exists() && two.library.exists() && two.preload_file.exists());
        assert!(install(&dir.path().join("missing"), &lib, None).is_err());
    }
}
