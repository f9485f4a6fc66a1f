//! A prepared claim's CDI spec (container-device-interface, SPEC.md): one file per claim
//! in the runtimes' CDI directory, one device named by the claim's uid, whose container
//! edits are what every booked container gets (`kubernetes::edits`). The kubelet passes
//! the CDI id npud returns (`npud.io/streams=<uid>`) to the runtime, which applies the
//! edits: containerd 1.7 with `enable_cdi`, 2.x by default, CRI-O, podman.

use super::super::edits::Edits;
use std::path::{Path, PathBuf};

/// The CDI kind (`vendor/class`) of npud's devices.
pub const KIND: &str = "npud.io/streams";
/// The spec version written: 0.5.0 has everything npud uses (env and mounts), and the
/// runtimes of the last several years read it.
pub const VERSION: &str = "0.5.0";

/// The fully qualified CDI device name of claim `uid`.
pub fn device_id(uid: &str) -> String {
    format!("{KIND}={uid}")
}

/// Where claim `uid`'s spec is.
pub fn spec_path(dir: &Path, uid: &str) -> PathBuf {
    dir.join(format!("npud.io-streams_{uid}.json"))
}

/// Whether `uid` may name a CDI device and a file: a Kubernetes uid is letters, digits
/// and `-`; anything else is refused before it reaches a path.
pub fn valid_uid(uid: &str) -> bool {
    !uid.is_empty() && uid.len() <= 64 && uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// The spec of claim `uid`.
pub fn spec(uid: &str, edits: &Edits) -> serde_json::Value {
    let env: Vec<String> = edits.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mounts: Vec<serde_json::Value> = edits
        .mounts
        .iter()
        .map(|m| {
            let mut options = vec!["rbind", "nosuid", "nodev"];
            if m.read_only {
                options.insert(0, "ro");
            }
            serde_json::json!({"hostPath": m.host_path, "containerPath": m.container_path, "options": options})
        })
        .collect();
    serde_json::json!({
        "cdiVersion": VERSION,
        "kind": KIND,
        "devices": [{"name": uid, "containerEdits": {"env": env, "mounts": mounts}}],
    })
}

/// Writes claim `uid`'s spec atomically (a runtime never reads half a file): a hidden
/// temporary beside it, renamed over it. The directory is made 0755 where missing.
pub fn write(dir: &Path, uid: &str, edits: &Edits) -> std::io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir)?;
    let path = spec_path(dir, uid);
    let temporary = dir.join(format!(".npud.io-streams_{uid}.tmp"));
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(&temporary)?;
    f.write_all(serde_json::to_string_pretty(&spec(uid, edits))?.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&temporary, &path)?;
    Ok(path)
}

/// Removes claim `uid`'s spec (none there is no error).
pub fn remove(dir: &Path, uid: &str) {
    match std::fs::remove_file(spec_path(dir, uid)) {
        Ok(()) => tracing::debug!(claim = uid, "the claim's CDI spec is removed"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(claim = uid, error = %e, "cannot remove the claim's CDI spec"),
    }
}

/// The claims npud's specs in `dir` are for (at most 65536 looked at).
pub fn written(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .take(65_536)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let uid = name.strip_prefix("npud.io-streams_")?.strip_suffix(".json")?;
            valid_uid(uid).then(|| uid.to_string())
        })
        .collect()
}
