//! The Unix socket's file, by the socket rule: create the directory if needed, refuse a
//! symlink or a non-socket at the path, refuse to steal the socket of a live daemon,
//! remove a stale socket left by a crashed one, bind, then chmod; and remove it when
//! serving ends (unless a successor took it over).

use super::ServeError;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::net::UnixListener;

/// Our effective uid: the owner of /proc/self (no libc call needed).
fn my_uid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0)
}

fn socket_error(path: &Path, message: impl Into<String>) -> ServeError {
    ServeError::Socket { path: path.to_path_buf(), message: message.into() }
}

/// Binds the Unix socket following the socket rule.
pub async fn bind_socket(
    path: &Path,
    mode: u32,
    dir_mode: u32,
    group: Option<u32>,
) -> Result<UnixListener, ServeError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::create_dir_all(dir).map_err(|e| socket_error(path, format!("cannot create directory: {e}")))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dir_mode))
            .map_err(|e| socket_error(path, format!("cannot set directory mode: {e}")))?;
    }
    own_socket_dir(path, dir_mode, group)?;
    check_socket_dir(path)?;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(socket_error(path, "is a symlink; refusing to follow it"));
        }
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(socket_error(path, "exists and is not a socket"));
        }
        Ok(meta) if meta.uid() != my_uid() => {
            return Err(socket_error(
                path,
                format!("is owned by uid {}, not by this daemon; refusing to replace it", meta.uid()),
            ));
        }
        Ok(_) => {
            if tokio::net::UnixStream::connect(path).await.is_ok() {
                return Err(socket_error(path, "another npud is serving on it"));
            }
            tracing::info!(path = %path.display(), "removing stale socket left by an earlier daemon");
            std::fs::remove_file(path).map_err(|e| socket_error(path, format!("cannot remove stale socket: {e}")))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(socket_error(path, e.to_string())),
    }
    let listener = UnixListener::bind(path).map_err(|e| socket_error(path, format!("cannot bind: {e}")))?;
    if let Some(gid) = group {
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(|e| socket_error(path, format!("cannot give the socket to group {gid}: {e}")))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| socket_error(path, format!("cannot set mode: {e}")))?;
    Ok(listener)
}

/// A socket directory of npud's own (owned by its uid and named `npud…`, as
/// `/run/npud` and `/tmp/npud-UID` are; never a shared one like `/run` or `/tmp`) gets the
/// configured mode and `socket_group` every start: a connecting process needs search
/// permission on the directory as well as write permission on the socket, so a group
/// member of a 0750 root:root directory, or a pod's uid under an earlier npud's 0750,
/// would get EACCES however the socket's own mode reads.
fn own_socket_dir(path: &Path, dir_mode: u32, group: Option<u32>) -> Result<(), ServeError> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else { return Ok(()) };
    let ours = dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with("npud"))
        && std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == my_uid());
    if !ours {
        return Ok(());
    }
    if let Some(gid) = group {
        std::os::unix::fs::chown(dir, None, Some(gid))
            .map_err(|e| socket_error(path, format!("cannot give its directory to group {gid}: {e}")))?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dir_mode))
        .map_err(|e| socket_error(path, format!("cannot set its directory's mode: {e}")))
}

/// The socket's directory must be one that no other uid can rename or unlink entries in:
/// owned by this daemon's uid or by root, and not writable by group or others unless it is
/// sticky (like /tmp). Otherwise another uid could replace the socket with its own and
/// root's npuctl would talk to an impostor; it also makes the chmod after bind, which goes
/// through the path, safe.
fn check_socket_dir(path: &Path) -> Result<(), ServeError> {
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("."),
    };
    let meta = std::fs::metadata(&dir).map_err(|e| socket_error(path, format!("cannot inspect its directory: {e}")))?;
    if meta.uid() != my_uid() && meta.uid() != 0 {
        return Err(socket_error(
            path,
            format!(
                "its directory {} is owned by uid {}; another uid could replace the socket",
                dir.display(),
                meta.uid()
            ),
        ));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(socket_error(
            path,
            format!(
                "its directory {} is writable by other users (mode {:o}) and not sticky; another uid could replace the socket",
                dir.display(),
                mode & 0o7777
            ),
        ));
    }
    Ok(())
}

/// Removes the socket file when serving ends, however it ends (a TCP listener that cannot
/// bind must not leave a dead socket behind).
pub(super) struct SocketFile(pub(super) PathBuf, pub(super) bool);

impl Drop for SocketFile {
    fn drop(&mut self) {
        // Handed over: the successor serves on this very file.
        if self.1 {
            return;
        }
        match std::fs::remove_file(&self.0) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(error = %e, "could not remove the socket"),
        }
    }
}
