//! Loading AscendCL: initialise it, open every device with a context, size each device
//! from the SoC's documented limits, and install the exception callback.

use super::ffi::{self, Acl, Lib};
use super::result::check;
use super::shared::{Books, Shared};
use super::{AclBackend, soc};
use crate::backend::DeviceDesc;
use npud_proto::codes::acl;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// Where CANN installs the library, then the loader's search path.
pub fn default_library() -> PathBuf {
    PathBuf::from("libascendcl.so")
}

/// Where AscendCL is looked for: `explicit` (`--acl-library`) alone when given; else the
/// CANN install `ASCEND_HOME_PATH` names (what the toolkit's set_env.sh exports), the
/// toolkit's, the inference runtime's (nnrt) and the training runtime's (nnae) default
/// install directories, then the loader's own search (LD_LIBRARY_PATH, ld.so.cache).
pub fn candidates(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_path_buf()];
    }
    let mut out: Vec<PathBuf> = std::env::var_os("ASCEND_HOME_PATH")
        .map(|h| PathBuf::from(h).join("lib64/libascendcl.so"))
        .into_iter()
        .collect();
    for install in ["ascend-toolkit", "nnrt", "nnae"] {
        out.push(PathBuf::from(format!("/usr/local/Ascend/{install}/latest/lib64/libascendcl.so")));
    }
    out.push(default_library());
    out
}

impl AclBackend {
    /// Loads the library, initialises AscendCL and opens every device with a context.
    pub fn open(candidates: &[PathBuf]) -> Result<AclBackend, String> {
        let lib = Lib::open_first("AscendCL (libascendcl.so)", candidates)?;
        let rc = lib.init().map_err(|e| e.to_string())?;
        if rc != acl::SUCCESS && rc != acl::REPEAT_INITIALIZE {
            return Err(format!("aclInit failed with {rc}"));
        }
        let mut count = 0u32;
        check(lib.get_device_count(&mut count)).map_err(|e| e.message)?;
        if count == 0 {
            return Err("AscendCL reports no devices".into());
        }
        let soc = lib.soc_name();
        let known = soc.as_deref().and_then(soc::limits);
        if known.is_none() {
            tracing::warn!(?soc, "unknown SoC: each device is sized from the streams free at npud's start");
        }
        let mut contexts = Vec::new();
        let mut descs = Vec::new();
        for id in 0..count {
            check(lib.set_device(id as i32)).map_err(|e| format!("aclrtSetDevice({id}): {}", e.message))?;
            let mut ctx = 0usize;
            check(lib.create_context(&mut ctx, id as i32))
                .map_err(|e| format!("aclrtCreateContext({id}): {}", e.message))?;
            check(lib.set_current_context(ctx)).map_err(|e| e.message)?;
            let mut available = 0u32;
            check(lib.get_stream_available_num(&mut available))
                .map_err(|e| format!("aclrtGetStreamAvailableNum: {}", e.message))?;
            // npud's own: the default context aclrtSetDevice made and the one made here, each
            // with its default stream and, on the inference parts, an internal-sync stream.
            let sync = soc.as_deref().map_or(0, npud_proto::soc::context_sync_streams);
            let mut held = 2 * (1 + sync);
            if lib.has("npudFakeStreamsInUse") {
                let _ = lib.fake_streams_in_use(id as i32, &mut held);
            }
            // The product's total, when known: what is free now misses other processes'
            // streams, which interposed processes declare once they reconnect.
            let (hardware_limit, event_limit) = known.unwrap_or((available + held, 65535));
            let elsewhere = hardware_limit.saturating_sub(available + held);
            if elsewhere > 0 {
                tracing::warn!(
                    device = id,
                    streams = elsewhere,
                    "other processes hold streams on the device; interposed ones declare theirs when they reconnect"
                );
            }
            let physical_id = lib.physical_id(id as i32);
            if physical_id.is_none() {
                tracing::warn!(
                    device = id,
                    "the library maps no physical id: processes are booked by their own device number"
                );
            }
            contexts.push(ctx);
            descs.push(DeviceDesc {
                id,
                identity: crate::backend::Identity { physical_id, ..Default::default() },
                name: format!("ascend{id}"),
                profile: soc.clone().unwrap_or_else(|| "ascendcl".into()),
                hardware_limit,
                runtime_streams: held,
                event_limit,
                priority_highest: 0,
                priority_lowest: 7,
                client_slots: None,
            });
        }
        let shared = Arc::new(Shared {
            lib,
            contexts,
            books: Mutex::new(Books::default()),
            sink: crate::backend::SinkSlot::default(),
            callbacks: crate::backend::CallbackGate::default(),
            creations: (0..count).map(|_| AtomicU64::new(0)).collect(),
        });
        let weak = Arc::downgrade(&shared);
        if ffi::set_exception_handler(Box::new(move |info| {
            if let Some(s) = weak.upgrade() {
                s.on_exception(info);
            }
        })) {
            check(shared.lib.set_exception_info_callback(ffi::exception_trampoline)).map_err(|e| e.message)?;
        }
        tracing::info!(library = %shared.lib.path().display(), devices = count, "AscendCL opened");
        let physical: Vec<Option<u32>> = descs.iter().map(|d| d.identity.physical_id).collect();
        let faults = super::dcmi::Faults::open(&super::dcmi::candidates(shared.lib.path()), &physical);
        Ok(AclBackend { shared, descs, faults })
    }
}
