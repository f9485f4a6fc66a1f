//! Models built by hand, the other way to make an `aclmdlRI` besides capture. From the
//! vendor's pages: aclrtCreateStreamWithConfig's ACL_STREAM_PERSISTENT (shared/seeds/001:
//! work issued to such a stream does not run when issued and is not freed once run, only
//! when the stream is destroyed; such streams are for binding to a model), and
//! aclmdlRIBuildBegin, aclmdlRIBindStream, aclmdlRIEndTask, aclmdlRIBuildEnd and
//! aclmdlRIUnbindStream (CANN runtime API, "model running instance"):
//!
//! - BuildBegin(&model, 0) makes a model on the current context's device;
//! - BindStream(model, stream, HEAD | DEFAULT) binds a persistent stream (not NULL, not one
//!   bound already) to it; HEAD streams run from the start of each execution, DEFAULT ones
//!   only when a branch or loop activates them, which the fake has no operator for;
//! - work is issued to the bound streams, EndTask(model, stream) marks the end of it, and
//!   BuildEnd(model, NULL) ends the build; aclmdlRIExecute(Async) then runs the work;
//! - work issued to a bound stream after BuildEnd makes the model's next executions fail
//!   (the page: "an exception occurs during subsequent model execution");
//! - UnbindStream(model, stream) and aclmdlRIDestroy let the streams go.
//!
//! Like a capture (`capture`), the fake keeps a persistent stream's memory tasks (its copies
//! and memsets, the tasks whose effect a program can see); event records and callbacks
//! issued there still run when issued.
//!
//! A built model holds no stream of its own: its streams are the program's persistent
//! streams, created (and counted) like any other. So npud's books and the driver's count
//! are what they were; what this module adds is that programs which build models by hand
//! link and run on the fake. Error codes are the open runtime's (`rtsModelCreate`,
//! `rtsModelBindStream`, `Model::UnbindStream`, `Context::ModelAddEndGraph`,
//! `Model::LoadCompleteByStreamPrep`, mapped by `errcode_manage.cc`).

use crate::state::Rt;
use crate::state::capture::Task;
use crate::{Handle, put, with_rt};
use npud_proto::codes::acl::{
    AclError, INVALID_PARAM, RT_INTERNAL_ERROR, RT_MODEL_EXECUTE, RT_PARAM_INVALID, RT_STREAM_CONTEXT, RT_STREAM_MODEL,
    UNINITIALIZE,
};
use npud_proto::flags::STREAM_PERSISTENT;
use std::collections::HashMap;

/// aclmdlRIBindStream's flags.
pub const STREAM_FLAG_HEAD: u32 = 0;
pub const STREAM_FLAG_DEFAULT: u32 = 0x7FFF_FFFF;

struct Built {
    device: u32,
    /// Bound streams in the order they were bound, and whether each is a HEAD stream.
    streams: Vec<(usize, bool)>,
    /// aclmdlRIEndTask was called (a model takes one).
    ended: bool,
    /// aclmdlRIBuildEnd was called.
    complete: bool,
    /// Work reached a bound stream after the build ended.
    broken: bool,
}

#[derive(Default)]
pub struct Builds {
    /// Each persistent stream → the work issued to it, kept until the stream goes.
    kept: HashMap<usize, Vec<Task>>,
    /// A bound stream → its model.
    bound: HashMap<usize, usize>,
    models: HashMap<usize, Built>,
}

impl Builds {
    fn unbind_all(&mut self, model: &Built) {
        for (stream, _) in &model.streams {
            self.bound.remove(stream);
        }
    }

    /// Unbinds `stream` from whatever model it is bound to.
    fn unbind(&mut self, stream: usize) {
        if let Some(model) = self.bound.remove(&stream)
            && let Some(m) = self.models.get_mut(&model)
        {
            m.streams.retain(|(s, _)| *s != stream);
        }
    }

    fn model(&mut self, model: Handle) -> Result<&mut Built, AclError> {
        self.models.get_mut(&(model as usize)).ok_or(INVALID_PARAM)
    }

    /// Whether `stream` is bound to `model`, which must exist.
    fn bound_to(&mut self, model: Handle, stream: Handle) -> Result<bool, AclError> {
        self.model(model)?;
        Ok(self.bound.get(&(stream as usize)) == Some(&(model as usize)))
    }
}

impl Rt {
    /// A stream was made with `flags`: a persistent one keeps its work from now on.
    pub fn stream_made(&self, stream: usize, flags: u32) {
        if flags & STREAM_PERSISTENT != 0 {
            self.builds().kept.insert(stream, Vec::new());
        }
    }

    /// A stream is gone: its kept work with it, and its binding.
    pub fn stream_gone(&self, stream: usize) {
        let mut b = self.builds();
        b.kept.remove(&stream);
        b.unbind(stream);
    }

    /// Whether `stream` is bound to a model built by hand.
    pub fn bound_to_model(&self, stream: Handle) -> bool {
        self.builds().bound.contains_key(&(stream as usize))
    }

    /// Keeps `task` when `stream` is persistent; false when the task is to be made now.
    pub fn kept_task(&self, stream: Handle, task: Task) -> bool {
        let mut guard = self.builds();
        let b = &mut *guard;
        let stream = stream as usize;
        let Some(kept) = b.kept.get_mut(&stream) else { return false };
        match b.bound.get(&stream).and_then(|m| b.models.get_mut(m)) {
            Some(m) if m.complete => m.broken = true,
            _ => kept.push(task),
        }
        true
    }

    fn build_begin(&self, flag: u32) -> Result<Handle, AclError> {
        if flag != 0 {
            return Err(RT_PARAM_INVALID);
        }
        let device = self.current_device()?.id();
        let model = self.mint_handle();
        let built = Built { device, streams: Vec::new(), ended: false, complete: false, broken: false };
        self.builds().models.insert(model, built);
        Ok(model as Handle)
    }

    fn build_bind(&self, model: Handle, stream: Handle, flag: u32) -> Result<(), AclError> {
        if flag != STREAM_FLAG_HEAD && flag != STREAM_FLAG_DEFAULT {
            return Err(RT_PARAM_INVALID);
        }
        let (dev, _) = self.stream(stream)?;
        let device = dev.id();
        let mut b = self.builds();
        let m = b.model(model)?;
        if m.device != device {
            return Err(RT_STREAM_CONTEXT);
        }
        if !b.kept.contains_key(&(stream as usize)) {
            return Err(RT_PARAM_INVALID); // "Non-persistent stream cannot be bound to a model"
        }
        if b.bound.contains_key(&(stream as usize)) {
            return Err(RT_STREAM_MODEL);
        }
        b.bound.insert(stream as usize, model as usize);
        b.model(model)?.streams.push((stream as usize, flag == STREAM_FLAG_HEAD));
        Ok(())
    }

    fn build_end_task(&self, model: Handle, stream: Handle) -> Result<(), AclError> {
        self.stream(stream)?;
        let mut b = self.builds();
        if !b.bound_to(model, stream)? {
            return Err(RT_INTERNAL_ERROR); // "must be bound to the model"
        }
        let m = b.model(model)?;
        if m.ended {
            return Err(RT_INTERNAL_ERROR); // "The model must have only one end graph"
        }
        m.ended = true;
        Ok(())
    }

    fn build_end(&self, model: Handle) -> Result<(), AclError> {
        let mut b = self.builds();
        let m = b.model(model)?;
        if m.streams.is_empty() {
            return Err(RT_STREAM_MODEL);
        }
        if !m.ended {
            return Err(RT_MODEL_EXECUTE);
        }
        m.complete = true;
        Ok(())
    }

    fn build_unbind(&self, model: Handle, stream: Handle) -> Result<(), AclError> {
        self.stream(stream)?;
        let mut b = self.builds();
        if !b.bound_to(model, stream)? {
            return Err(RT_STREAM_MODEL);
        }
        b.unbind(stream as usize);
        Ok(())
    }

    /// What executing a built model does: its HEAD streams' work, stream by stream in the
    /// order they were bound. None when `model` was not built by hand.
    pub fn built_tasks(&self, model: Handle) -> Option<Result<Vec<Task>, AclError>> {
        let b = self.builds();
        let m = b.models.get(&(model as usize))?;
        if !m.complete || m.broken {
            return Some(Err(RT_MODEL_EXECUTE));
        }
        let heads = m.streams.iter().filter(|(_, head)| *head);
        Some(Ok(heads.flat_map(|(s, _)| b.kept.get(s).into_iter().flatten().copied()).collect()))
    }

    /// The streams bound to a built model (what aclmdlRIGetStreams lists).
    pub fn built_streams(&self, model: Handle) -> Option<Vec<usize>> {
        self.builds().models.get(&(model as usize)).map(|m| m.streams.iter().map(|(s, _)| *s).collect())
    }

    /// aclmdlRIDestroy of a built model: its streams are unbound. False when `model` was
    /// not built by hand.
    pub fn built_destroy(&self, model: Handle) -> bool {
        let mut b = self.builds();
        let Some(m) = b.models.remove(&(model as usize)) else { return false };
        b.unbind_all(&m);
        true
    }

    /// A reset device frees its built models (its streams go with its contexts).
    pub fn drop_builds_of(&self, device: u32) {
        let mut guard = self.builds();
        let b = &mut *guard;
        b.models.retain(|_, m| {
            let keep = m.device != device;
            if !keep {
                for (stream, _) in &m.streams {
                    b.bound.remove(stream);
                }
            }
            keep
        });
    }
}

/// aclmdlRIBuildBegin(&modelRI, flag): flag is reserved, 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclmdlRIBuildBegin(model: *mut Handle, flag: u32) -> AclError {
    if model.is_null() {
        return INVALID_PARAM;
    }
    let Some(r) = crate::state::rt() else { return UNINITIALIZE };
    match r.build_begin(flag) {
        // SAFETY: checked non-null out-pointer from the caller.
        Ok(m) => unsafe { put(model, m) },
        Err(e) => crate::failed(e),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRIBindStream(model: Handle, stream: Handle, flag: u32) -> AclError {
    if model.is_null() {
        return INVALID_PARAM;
    }
    with_rt(|r| r.build_bind(model, stream, flag))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRIEndTask(model: Handle, stream: Handle) -> AclError {
    if model.is_null() {
        return INVALID_PARAM;
    }
    with_rt(|r| r.build_end_task(model, stream))
}

/// aclmdlRIBuildEnd(modelRI, reserve): reserve is reserved, NULL.
#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRIBuildEnd(model: Handle, reserve: *mut std::ffi::c_void) -> AclError {
    if model.is_null() || !reserve.is_null() {
        return INVALID_PARAM;
    }
    with_rt(|r| r.build_end(model))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRIUnbindStream(model: Handle, stream: Handle) -> AclError {
    if model.is_null() {
        return INVALID_PARAM;
    }
    with_rt(|r| r.build_unbind(model, stream))
}
