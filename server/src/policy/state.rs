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

/// Replaces `path` with `bytes` so that a crash at any point leaves the old file or the
/// new one, never a torn one: temp file, fsync, rename, fsync of the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir).and_then(|d| d.sync_all())
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
}
