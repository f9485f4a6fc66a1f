//! Admin state that must survive restarts and crashes: quotas set at run time and the
//! last boot epoch. Written atomically (temp file, fsync, rename, fsync of the directory),
//! so a SIGKILL at any point leaves either the old or the new file, never a torn one.

use crate::types::Quota;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The most `state.json` may hold: quotas set at run time, a few hundred bytes each.
const MAX_STATE_FILE: usize = 16 << 20;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PersistedState {
    pub epoch: Option<u16>,
    #[serde(default)]
    pub quotas: BTreeMap<String, Quota>,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read state file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("state file {path} is corrupt: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
    #[error("cannot write state file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

#[derive(Debug, Clone)]
pub struct StateStore {
    path: Option<PathBuf>,
}

impl StateStore {
    pub fn new(dir: Option<&Path>) -> Self {
        Self { path: dir.map(|d| d.join("state.json")) }
    }

    pub fn load(&self) -> Result<PersistedState, StateError> {
        let Some(path) = &self.path else {
            return Ok(PersistedState::default());
        };
        match crate::files::read_bounded(path, MAX_STATE_FILE) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|source| StateError::Parse { path: path.clone(), source })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(PersistedState::default()),
            Err(source) => Err(StateError::Read { path: path.clone(), source }),
        }
    }

    pub fn save(&self, state: &PersistedState) -> Result<(), StateError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let err = |source| StateError::Write { path: path.clone(), source };
        let bytes = serde_json::to_vec_pretty(state).map_err(|e| err(std::io::Error::other(e)))?;
        write_atomically(path, &bytes).map_err(err)
    }
}

/// Makes `dir` npud's own state directory: created 0700, and made 0700 where it was
/// there already (a DaemonSet's hostPath is made 0755). Files npud keeps there are 0600.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Replaces `path` with `bytes` so that a crash at any point, the machine's included,
/// leaves the old file or the new one, never a torn one: temp file, fsync, rename, fsync
/// of the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = replace(path, bytes, true)?;
    std::fs::File::open(dir).and_then(|d| d.sync_all())
}

/// Replaces `path` with `bytes` so that npud dying at any point leaves the old file or the
/// new one (the rename is atomic to every reader), without waiting for the disk. For
/// files whose contents die with the machine anyway: the native holders' books name
/// running processes, and after a reboot none of them runs. Two fsyncs per change cost a
/// process's admission more than its whole handshake on a virtual disk.
pub fn write_replacing(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(path, bytes, false).map(drop)
}

/// Writes `bytes` to a temp file beside `path` (synced when `sync`) and renames it over
/// `path`; the directory it is in. The file is npud's alone (0600), in a directory made
/// npud's alone (0700) where it makes one: state names tenants and what they hold.
fn replace<'a>(path: &'a Path, bytes: &[u8], sync: bool) -> std::io::Result<&'a Path> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    file.write_all(bytes)?;
    if sync {
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_tolerates_absence() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(Some(dir.path()));
        assert!(store.load().unwrap().quotas.is_empty());
        let mut s = PersistedState { epoch: Some(9), ..Default::default() };
        s.quotas.insert("team".into(), Quota { max_streams: 5, ..Quota::default() });
        store.save(&s).unwrap();
        let back = store.load().unwrap();
        assert_eq!(back.epoch, Some(9));
        assert_eq!(back.quotas["team"].max_streams, 5);
        std::fs::write(dir.path().join("state.json"), b"{not json").unwrap();
        assert!(matches!(store.load(), Err(StateError::Parse { .. })));
    }

    #[test]
    fn a_replacing_write_leaves_the_new_file_whole_and_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deeper").join("natives.json");
        write_replacing(&path, b"{\"holders\": [1, 2, 3]}").unwrap();
        write_replacing(&path, b"{}").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        let names: Vec<_> =
            std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["natives.json"], "the temp file was renamed over the old one");
    }
}
