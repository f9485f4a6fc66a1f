//! Graph capture's entry points (the aclmdlRI pages): a capture begun and ended, what
//! it says of itself, the thread modes, a model's streams, its executions and its end;
//! the runtime's side is `state/capture/`.

use crate::*;

#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRICaptureBegin(stream: Handle, mode: u32) -> AclError {
    via(|d| d.begin_capture(stream, mode), || with_rt(|r| r.capture_begin(stream, mode)))
}

/// aclmdlRICaptureToModelRIBegin(stream, modelRI, mode): a capture into a sub ACL graph
/// (`src/acl/aclrt_impl/model_ri.cpp` 411-423: `rtStreamBeginCaptureToModel`); see
/// `state::capture::added`.
#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRICaptureToModelRIBegin(stream: Handle, model: Handle, mode: u32) -> AclError {
    if stream.is_null() {
        return INVALID_PARAM;
    }
    via(
        |d| d.begin_capture_to_model(stream, mode, model),
        || with_rt(|r| r.capture_begin_to_model(stream, mode, model)),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureEnd(stream: Handle, model: *mut Handle) -> AclError {
    // AscendCL checks the stream (ACL_REQUIRES_NOT_NULL: 100000); a NULL out-pointer goes
    // down to the runtime, which refuses it as RT_ERROR_INVALID_VALUE (107000) and leaves
    // the capture going (hicann/runtime `src/acl/aclrt_impl/model_ri.cpp` 93-104).
    if stream.is_null() {
        return INVALID_PARAM;
    }
    let Some(r) = rt() else { return UNINITIALIZE };
    if model.is_null() {
        return match runtime::down() {
            Some(down) => down.end_capture(stream, model),
            None => failed(r.capture_end_checks(stream).err().unwrap_or(RT_PARAM_INVALID)),
        };
    }
    if let Some(down) = runtime::down() {
        return down.end_capture(stream, model);
    }
    // The runtime clears the out-pointer before anything else (`Context::StreamEndCapture`,
    // hicann/runtime `feature/aclgraph/context_aclgraph.cc` 510): a failed End leaves NULL.
    // SAFETY: checked non-null out-pointer from the caller.
    unsafe { model.write(std::ptr::null_mut()) };
    match r.capture_end(stream) {
        // SAFETY: checked non-null out-pointer from the caller.
        Ok(m) => unsafe { put(model, m) },
        Err(e) => failed(e),
    }
}

/// aclmdlRICaptureGetInfo: the stream's capture status (NONE 0, ACTIVE 1, INVALIDATED 2)
/// and, while it captures, the model it captures into (NULL otherwise, which the vendor
/// calls invalid). Either out-pointer may be NULL, not both (`aclmdlRICaptureGetInfoImpl`,
/// hicann/runtime `src/acl/aclrt_impl/model_ri.cpp` 62-91).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureGetInfo(stream: Handle, status: *mut u32, model: *mut Handle) -> AclError {
    if stream.is_null() || (status.is_null() && model.is_null()) {
        return INVALID_PARAM;
    }
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.capture_info(stream) {
        // SAFETY: the caller's out-pointers, each written when non-null.
        Ok((s, m)) => unsafe {
            if !status.is_null() {
                status.write(s);
            }
            if !model.is_null() {
                model.write(m);
            }
            ACL_SUCCESS
        },
        Err(e) => failed(e),
    }
}

/// aclmdlRICaptureThreadExchangeMode(mode): `*mode` in, the thread's previous mode out.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRICaptureThreadExchangeMode(mode: *mut u32) -> AclError {
    if mode.is_null() {
        return INVALID_PARAM;
    }
    if let Some(down) = runtime::down() {
        return down.exchange_capture_mode(mode);
    }
    // SAFETY: checked non-null in/out pointer from the caller.
    match state::capture::exchange_thread_mode(unsafe { *mode }) {
        // SAFETY: as above.
        Ok(previous) => unsafe { put(mode, previous) },
        Err(e) => failed(e),
    }
}

/// aclmdlRIGetStreams: with `streams` NULL, the number of the model's streams in `*num`;
/// else the model's streams written to `streams` (its unused entries set to NULL) and
/// `*num` set to how many. An array smaller than the model's streams is
/// ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY (107039), with `*num` the number that fit and
/// nothing written (`Model::ModelGetStreams`, hicann/runtime `feature/model/model.cc`
/// 2273-2306; `rtModelGetStreams` copies out only on success, `api/api_c_standard_soc.cc`
/// 1843-1880).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIGetStreams(model: Handle, streams: *mut Handle, num: *mut u32) -> AclError {
    if num.is_null() {
        return failed(RT_PARAM_INVALID);
    }
    let Some(r) = rt() else { return UNINITIALIZE };
    let handles = match r.model_streams(model) {
        Ok(h) => h,
        Err(e) => return e,
    };
    if streams.is_null() {
        // SAFETY: checked non-null out-pointer.
        return unsafe { put(num, handles.len() as u32) };
    }
    // SAFETY: the caller's count (checked non-null above).
    let room = unsafe { *num } as usize;
    if room < handles.len() {
        // SAFETY: as above.
        unsafe { num.write(room as u32) };
        return failed(npud_proto::codes::acl::RT_INSUFFICIENT_INPUT_ARRAY);
    }
    for i in 0..room {
        let h = handles.get(i).map_or(std::ptr::null_mut(), |h| *h as Handle);
        // SAFETY: i < room, inside the caller's array of `*num` entries.
        unsafe { streams.add(i).write(h) };
    }
    // SAFETY: as above.
    unsafe { put(num, handles.len() as u32) }
}

#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRIDestroy(model: Handle) -> AclError {
    with_rt(|r| r.model_destroy(model))
}

/// aclmdlRIExecuteAsync: the model's captured copies and memsets are made on `stream`, in
/// order (at once, like the fake's other memory tasks; see `capture`).
#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRIExecuteAsync(model: Handle, stream: Handle) -> AclError {
    with_rt(|r| {
        let tasks = r.model_tasks(model)?;
        r.stream(r.not_capturing(stream)?)?;
        state::memory::replay(&tasks);
        r.replay_external_records(model);
        Ok(())
    })
}

/// aclmdlRIExecute(modelRI, timeout): the same, returning once done. The timeout is -1
/// (wait for ever) or milliseconds above zero.
#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRIExecute(model: Handle, timeout_ms: i32) -> AclError {
    if timeout_ms == 0 || timeout_ms < -1 {
        return INVALID_PARAM;
    }
    with_rt(|r| {
        state::memory::replay(&r.model_tasks(model)?);
        r.replay_external_records(model);
        Ok(())
    })
}
