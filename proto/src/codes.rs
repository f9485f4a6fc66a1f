//! The vendor return codes npud speaks, defined once for every Rust crate of the project
//! (the daemon, the interposer, the fake vendor libraries, the CLI). They travel to clients
//! in `ErrorDetail.native_code`. Python's table is `npud.errors`.

/// AscendCL's `aclError` values (shared/reference/acl.md), named as the vendor names them
/// without the `ACL_ERROR_` prefix.
pub mod acl {
    /// `aclError` is a C `int`.
    pub type AclError = i32;

    pub const SUCCESS: AclError = 0;
    pub const INVALID_PARAM: AclError = 100000;
    pub const UNINITIALIZE: AclError = 100001;
    pub const REPEAT_INITIALIZE: AclError = 100002;
    pub const STREAM_NOT_SUBSCRIBE: AclError = 100034;
    pub const WAIT_CALLBACK_TIMEOUT: AclError = 100036;
    pub const API_NOT_SUPPORT: AclError = 200001;
    pub const INVALID_DEVICE: AclError = 200002;
    pub const INVALID_RESOURCE_HANDLE: AclError = 200005;
    pub const FEATURE_UNSUPPORTED: AclError = 200006;
    pub const RT_PARAM_INVALID: AclError = 107000;
    pub const RT_INVALID_DEVICEID: AclError = 107001;
    pub const RT_CONTEXT_NULL: AclError = 107002;
    /// The stream is not in the current context.
    pub const RT_STREAM_CONTEXT: AclError = 107003;
    /// The stream and the model do not go together (bound to another model, or not to
    /// this one), or the model has no stream (the open runtime's RT_ERROR_STREAM_MODEL
    /// and RT_ERROR_MODEL_STREAM).
    pub const RT_STREAM_MODEL: AclError = 107005;
    pub const RT_STREAM_SUBSCRIBE: AclError = 107011;
    pub const RT_THREAD_SUBSCRIBE: AclError = 107012;
    pub const RT_STREAM_NO_CB_REG: AclError = 107015;
    pub const RT_INVALID_HANDLE: AclError = 107017;
    /// Graph capture (the open runtime's aclgraph checks): a stream in capture cannot be
    /// synchronized, queried, destroyed or captured again; an event recorded in a capture
    /// cannot be waited on by the host; a capture ends only on the stream that began it,
    /// with every side stream joined back (UNJOINED), from the thread that began it unless
    /// it began RELAXED (WRONG_THREAD); a stream of one capture cannot wait on an event of
    /// another (CONFLICT); a capture that could not take a stream it needed ends
    /// INVALIDATED.
    pub const RT_STREAM_UNJOINED: AclError = 107025;
    pub const RT_STREAM_CAPTURED: AclError = 107027;
    pub const RT_EVENT_CAPTURED: AclError = 107028;
    pub const RT_STREAM_NOT_CAPTURED: AclError = 107029;
    /// An "unsafe" call (aclrtMemcpy, aclrtMemset, ...) the capture modes forbid the
    /// calling thread while a capture is under way.
    pub const RT_CAPTURE_MODE_NOT_SUPPORT: AclError = 107030;
    pub const STREAM_CAPTURE_CONFLICT: AclError = 107032;
    pub const RT_STREAM_CAPTURE_UNMATCHED: AclError = 107036;
    pub const RT_STREAM_CAPTURE_WRONG_THREAD: AclError = 107038;
    /// ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY: an output array smaller than what there is to
    /// write (aclmdlRIGetStreams).
    pub const RT_INSUFFICIENT_INPUT_ARRAY: AclError = 107039;
    pub const RT_FEATURE_NOT_SUPPORT: AclError = 207000;
    pub const RT_MEMORY_ALLOCATION: AclError = 207001;
    /// Stream exhaustion on some driver paths ("Too many streams are created").
    pub const RT_RESOURCE_ALLOC_FAIL: AclError = 207005;
    pub const RT_NO_EVENT_RESOURCE: AclError = 207007;
    pub const RT_NO_STREAM_RESOURCE: AclError = 207008;
    pub const RT_INTERNAL_ERROR: AclError = 507000;
    pub const RT_STREAM_CAPTURE_INVALIDATED: AclError = 507903;
    pub const RT_EVENT_NOT_COMPLETE: AclError = 507006;
    /// A model that cannot run: its build has not ended (the open runtime's
    /// RT_ERROR_MODEL_NOT_END) or its execution failed.
    pub const RT_MODEL_EXECUTE: AclError = 507011;
    /// A reset of a device whose default context is gone (never set, or already reset).
    pub const RT_CONTEXT_RELEASE_ERROR: AclError = 507007;
    pub const RT_AICORE_EXCEPTION: AclError = 507015;
    pub const RT_REPORT_TIMEOUT: AclError = 507012;
    pub const RT_STREAM_SYNC_TIMEOUT: AclError = 507046;
    pub const RT_EVENT_SYNC_TIMEOUT: AclError = 507047;
}

/// The CUDA driver's `CUresult` values (shared/reference/cuda.md), named without the
/// `CUDA_ERROR_` prefix.
pub mod cuda {
    /// `CUresult` is a C enum, passed as an unsigned int.
    pub type CuResult = u32;

    pub const SUCCESS: CuResult = 0;
    pub const INVALID_VALUE: CuResult = 1;
    pub const OUT_OF_MEMORY: CuResult = 2;
    pub const NOT_INITIALIZED: CuResult = 3;
    pub const STUB_LIBRARY: CuResult = 34;
    pub const INVALID_DEVICE: CuResult = 101;
    pub const INVALID_IMAGE: CuResult = 200;
    /// cuModuleLoad of a file that is not there.
    pub const FILE_NOT_FOUND: CuResult = 301;
    pub const INVALID_CONTEXT: CuResult = 201;
    pub const INVALID_HANDLE: CuResult = 400;
    pub const ILLEGAL_STATE: CuResult = 401;
    pub const NOT_FOUND: CuResult = 500;
    pub const NOT_READY: CuResult = 600;
    pub const ILLEGAL_ADDRESS: CuResult = 700;
    /// A call on a stream whose context is gone: an H100's driver answers it for the
    /// streams a destroyed green context leaves (docs/hardware.md).
    pub const CONTEXT_IS_DESTROYED: CuResult = 709;
    pub const LAUNCH_FAILED: CuResult = 719;
    /// A CUDA call from a stream callback or host function (cuStreamAddCallback's page).
    pub const NOT_PERMITTED: CuResult = 800;
    /// CUDA_ERROR_DEVICE_UNAVAILABLE: "all CUDA-capable devices are busy or unavailable",
    /// as a second process's context on an EXCLUSIVE_PROCESS GPU is answered.
    pub const DEVICE_UNAVAILABLE: CuResult = 46;
    /// CUDA_ERROR_MPS_MAX_CLIENTS_REACHED: the MPS server has its most clients.
    pub const MPS_MAX_CLIENTS_REACHED: CuResult = 808;
    pub const NOT_SUPPORTED: CuResult = 801;
    pub const TIMEOUT: CuResult = 909;
    /// cuDeviceGetDevResource of a resource type the device does not have.
    pub const INVALID_RESOURCE_TYPE: CuResult = 914;
    pub const UNKNOWN: CuResult = 999;
}
