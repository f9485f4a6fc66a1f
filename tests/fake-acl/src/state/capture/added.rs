//! The runtime layer's other ways into a capture (hicann/runtime @681ef76):
//!
//! - `rtStreamAddToModel(stm, captureMdl)` adds a stream to a capture under way by its
//!   model, as GE and HCCL do for their own streams: the runtime makes the stream a
//!   capture stream of its own and binds it to the model (`CaptureModel::
//!   AddStreamToCaptureModel`, `feature/aclgraph/capture_model.cc` 726-731, which calls
//!   `Context::StreamAddToCaptureModelProc`, `context_aclgraph.cc` 154-177: `StreamCreate`).
//!   So it takes one stream of the device, once per stream and model, and a failure
//!   terminates the capture. Its checks (`api_error_aclgraph.cc` 139-158,
//!   `v100/api_impl_aclgraph.cc` 151-166): NULL stream or model, or a model that is no ACL
//!   graph, RT_ERROR_INVALID_VALUE (107000); a stream whose flags do not support the graph
//!   RT_ERROR_STREAM_INVALID (507000); a stream of another context (107003) or bound to a
//!   model (107005); the default stream RT_ERROR_FEATURE_NOT_SUPPORT (207000); a capture
//!   already ended or invalidated RT_ERROR_MODEL_CAPTURE_STATUS (507000, `errcode_manage.cc`
//!   262).
//! - `rtStreamBeginCaptureToModel(stm, mode, mdl)` and AscendCL's
//!   `aclmdlRICaptureToModelRIBegin(stream, modelRI, mode)` (`src/acl/aclrt_impl/model_ri.cpp`
//!   411-423) begin a capture into a sub ACL graph: with no model it is an ordinary Begin,
//!   and a model that is not a sub graph is RT_ERROR_INVALID_VALUE (107000;
//!   `StreamBeginCaptureMdlCheck`, `api_error_aclgraph.cc` 19-35). Sub graphs are made only
//!   by conditional tasks (aclmdlRIAddCondTask), which the fake does not model, so every
//!   model given is refused so.

use super::tasks::Member;
use crate::Handle;
use crate::state::Rt;
use npud_proto::codes::acl::{
    AclError, RT_CONTEXT_NULL, RT_FEATURE_NOT_SUPPORT, RT_INTERNAL_ERROR, RT_PARAM_INVALID, RT_STREAM_CAPTURED,
    RT_STREAM_CONTEXT, RT_STREAM_MODEL,
};

impl Rt {
    /// rtStreamAddToModel(stream, model).
    pub fn capture_add_stream(&self, stream: Handle, model: Handle) -> Result<(), AclError> {
        if stream.is_null() || model.is_null() {
            return Err(RT_PARAM_INVALID);
        }
        let (stream, model) = (stream as usize, model as usize);
        let origin = {
            let c = self.captures();
            let origin = c.active.iter().find(|(_, k)| k.model == model).map(|(o, _)| *o);
            match origin {
                Some(o) => o,
                None if c.models.contains_key(&model) => return Err(RT_INTERNAL_ERROR),
                None => return Err(RT_PARAM_INVALID),
            }
        };
        self.capture_flags_ok(stream)?;
        self.stream(stream as Handle)?;
        let current = crate::state::current_context().ok_or(RT_CONTEXT_NULL)? as usize;
        if self.stream_context(stream as Handle).is_some_and(|made_in| made_in != current) {
            return Err(RT_STREAM_CONTEXT);
        }
        if self.bound_to_model(stream as Handle) {
            return Err(RT_STREAM_MODEL);
        }
        if self.is_default_stream(stream as Handle) {
            return Err(RT_FEATURE_NOT_SUPPORT);
        }
        let mut guard = self.captures();
        let c = &mut *guard;
        match c.member_of.get(&stream) {
            Some(o) if *o == origin => return Ok(()),
            Some(o) if c.active.contains_key(o) => return Err(RT_STREAM_CAPTURED),
            _ => {}
        }
        let Some(capture) = c.active.get_mut(&origin) else { return Err(RT_INTERNAL_ERROR) };
        if capture.invalidated {
            return Err(RT_INTERNAL_ERROR);
        }
        match self.take_capture_stream(capture.device) {
            Ok(id) => capture.held.push(id),
            Err(e) => {
                capture.invalidated = true;
                return Err(e);
            }
        }
        capture.members.insert(stream, Member::default());
        c.member_of.insert(stream, origin);
        Ok(())
    }

    /// rtStreamBeginCaptureToModel(stream, mode, model) and aclmdlRICaptureToModelRIBegin.
    pub fn capture_begin_to_model(&self, stream: Handle, mode: u32, model: Handle) -> Result<(), AclError> {
        if model.is_null() {
            return self.capture_begin(stream, mode);
        }
        if stream.is_null() || mode > super::modes::RELAXED {
            return Err(RT_PARAM_INVALID);
        }
        self.capture_flags_ok(stream as usize)?;
        // No model the fake makes is a sub ACL graph.
        Err(RT_PARAM_INVALID)
    }
}
