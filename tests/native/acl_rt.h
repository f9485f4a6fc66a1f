/* The part of the AscendCL runtime API the test programs that include it use (graphs,
 * models, host functions, processes that end in unusual ways, stream state callbacks, peer
 * access between devices), declared with the vendor's signatures (shared/reference/acl.md
 * and the pages cited in each program) in place of the vendor's acl/acl.h, which CI does
 * not have. The programs link against libascendcl by these names, as any AscendCL program
 * does.
 * Also holds(): whether a device buffer holds one byte value throughout; and replay(): a
 * model executed round after round with new input, checked each time. */
#ifndef NPUD_TEST_ACL_RT_H
#define NPUD_TEST_ACL_RT_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;
typedef void *aclmdlRI;

#define ACL_MEM_MALLOC_HUGE_FIRST 0u
enum { ACL_MEMCPY_HOST_TO_DEVICE = 1, ACL_MEMCPY_DEVICE_TO_HOST = 2, ACL_MEMCPY_DEVICE_TO_DEVICE = 3 };
#define ACL_STREAM_PERSISTENT 0x00000004u
#define ACL_EVENT_RECORDED_STATUS_NOT_READY 0u
#define ACL_EVENT_RECORDED_STATUS_COMPLETE 1u
#define ACL_MODEL_RI_CAPTURE_MODE_GLOBAL 0u
#define ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL 1u
#define ACL_MODEL_RI_CAPTURE_MODE_RELAXED 2u
#define ACL_MODEL_STREAM_FLAG_HEAD 0x00000000u
#define ACL_MODEL_STREAM_FLAG_DEFAULT 0x7FFFFFFFu

aclError aclInit(const char *);
aclError aclFinalize(void);
aclError aclrtSetDevice(int32_t);
aclError aclrtResetDevice(int32_t);
aclError aclrtCreateContext(aclrtContext *, int32_t);
aclError aclrtDestroyContext(aclrtContext);
aclError aclrtSetCurrentContext(aclrtContext);
aclError aclrtGetCurrentContext(aclrtContext *);
aclError aclrtCtxGetCurrentDefaultStream(aclrtStream *);
aclError aclrtDeviceGetStreamPriorityRange(int32_t *, int32_t *);
aclError aclrtGetVersion(int32_t *, int32_t *, int32_t *);
aclError aclrtGetDeviceCount(uint32_t *);
aclError aclrtDeviceCanAccessPeer(int32_t *, int32_t, int32_t);
aclError aclrtDeviceEnablePeerAccess(int32_t, uint32_t);
aclError aclrtDeviceDisablePeerAccess(int32_t);
aclError aclrtDevicePeerAccessStatus(int32_t, int32_t, int32_t *);

aclError aclrtCreateStream(aclrtStream *);
aclError aclrtCreateStreamWithConfig(aclrtStream *, uint32_t, uint32_t);
aclError aclrtDestroyStream(aclrtStream);
aclError aclrtSynchronizeStream(aclrtStream);
aclError aclrtStreamQuery(aclrtStream, uint32_t *);
aclError aclrtStreamWaitEvent(aclrtStream, aclrtEvent);
aclError aclrtStreamGetPriority(aclrtStream, uint32_t *);
aclError aclrtGetStreamAvailableNum(uint32_t *);
/* aclrtStreamState: ACL_RT_STREAM_STATE_CREATE_POST 1, ACL_RT_STREAM_STATE_DESTROY_PRE 2. */
typedef void (*aclrtStreamStateCallback)(aclrtStream, uint32_t, void *);
aclError aclrtRegStreamStateCallback(const char *, aclrtStreamStateCallback, void *);
/* aclrtStreamAttr: FAILURE_MODE 1, FLOAT_OVERFLOW_CHECK 2, USER_CUSTOM_TAG 3,
 * CACHE_OP_INFO 4, PRIORITY 5. */
typedef union {
    uint64_t failureMode;
    uint32_t overflowSwitch;
    uint32_t userCustomTag;
    uint32_t cacheOpInfoSwitch;
    uint32_t streamPriority;
    uint32_t reserve[4];
} aclrtStreamAttrValue;
aclError aclrtSetStreamAttribute(aclrtStream, uint32_t, aclrtStreamAttrValue *);
aclError aclrtGetStreamAttribute(aclrtStream, uint32_t, aclrtStreamAttrValue *);

aclError aclrtCreateEvent(aclrtEvent *);
aclError aclrtDestroyEvent(aclrtEvent);
aclError aclrtRecordEvent(aclrtEvent, aclrtStream);
aclError aclrtSynchronizeEvent(aclrtEvent);
aclError aclrtQueryEventStatus(aclrtEvent, uint32_t *);
aclError aclrtEventElapsedTime(float *, aclrtEvent, aclrtEvent);
aclError aclrtEventGetTimestamp(aclrtEvent, uint64_t *);
aclError aclrtGetEventId(aclrtEvent, uint32_t *);
aclError aclrtStreamWaitEventWithTimeout(aclrtStream, aclrtEvent, int32_t);
#define ACL_EVENT_SYNC 0x00000001u
#define ACL_EVENT_RECORD_DEFAULT 0x00u
#define ACL_EVENT_RECORD_EXTERNAL 0x01u
#define ACL_EVENT_WAIT_DEFAULT 0x00u
#define ACL_EVENT_WAIT_EXTERNAL 0x01u
aclError aclrtCreateEventExWithFlag(aclrtEvent *, uint32_t);
aclError aclrtRecordEventWithFlag(aclrtEvent, aclrtStream, uint32_t);
aclError aclrtStreamWaitEventWithFlag(aclrtStream, aclrtEvent, uint32_t, uint32_t);

aclError aclrtSubscribeReport(uint64_t, aclrtStream);
aclError aclrtUnSubscribeReport(uint64_t, aclrtStream);
aclError aclrtLaunchHostFunc(aclrtStream, void (*)(void *), void *);

aclError aclrtMalloc(void **, size_t, uint32_t);
aclError aclrtFree(void *);
aclError aclrtMemset(void *, size_t, int32_t, size_t);
aclError aclrtMemcpy(void *, size_t, const void *, size_t, int);
aclError aclrtMemcpyAsync(void *, size_t, const void *, size_t, int, aclrtStream);
aclError aclrtMemsetAsync(void *, size_t, int32_t, size_t, aclrtStream);
aclError aclrtMallocHost(void **, size_t);
aclError aclrtFreeHost(void *);
#define ACL_STREAM_WAIT_VALUE_GEQ 0x0u
#define ACL_STREAM_WAIT_VALUE_EQ 0x1u
#define ACL_STREAM_WAIT_VALUE_AND 0x2u
#define ACL_STREAM_WAIT_VALUE_NOR 0x3u
aclError aclrtValueWrite(void *, uint64_t, uint32_t, aclrtStream);
aclError aclrtValueWait(void *, uint64_t, uint32_t, aclrtStream);

aclError aclmdlRICaptureBegin(aclrtStream, uint32_t);
aclError aclmdlRICaptureEnd(aclrtStream, aclmdlRI *);
aclError aclmdlRICaptureGetInfo(aclrtStream, uint32_t *, aclmdlRI *);
aclError aclmdlRICaptureThreadExchangeMode(uint32_t *);
aclError aclmdlRIBuildBegin(aclmdlRI *, uint32_t);
aclError aclmdlRIBindStream(aclmdlRI, aclrtStream, uint32_t);
aclError aclmdlRIEndTask(aclmdlRI, aclrtStream);
aclError aclmdlRIBuildEnd(aclmdlRI, void *);
aclError aclmdlRIUnbindStream(aclmdlRI, aclrtStream);
aclError aclmdlRIGetStreams(aclmdlRI, aclrtStream *, uint32_t *);
aclError aclmdlRIExecuteAsync(aclmdlRI, aclrtStream);
aclError aclmdlRIExecute(aclmdlRI, int32_t);
aclError aclmdlRIDestroy(aclmdlRI);

/* Whether every one of the `size` bytes of the device buffer `dev` is `value` (read back
 * with aclrtMemcpy); 0 when it cannot be read. */
static inline int holds(const void *dev, size_t size, unsigned char value) {
    unsigned char *host = malloc(size);
    int ok = host != NULL && aclrtMemcpy(host, size, dev, size, ACL_MEMCPY_DEVICE_TO_HOST) == 0;
    for (size_t i = 0; ok && i < size; i++) ok = host[i] == value;
    free(host);
    return ok;
}

/* Executes `model` `rounds` times with the `size`-byte device buffer `in` set to the
 * round's number first and `scratch` to 0: odd rounds with aclmdlRIExecuteAsync on
 * `stream` and a stream synchronize, even ones with aclmdlRIExecute. After each, `out`
 * must hold the round's number and `scratch` 0xee (the model's copy and memset ran), and
 * `idle`, where given, still 0. Returns NULL, or what failed. */
static inline const char *replay(aclmdlRI model, aclrtStream stream, void *in, void *out, void *scratch,
                                 const void *idle, size_t size, int rounds) {
    unsigned char *input = malloc(size);
    const char *failed = input == NULL ? "malloc" : NULL;
    for (int r = 1; failed == NULL && r <= rounds; r++) {
        unsigned char value = (unsigned char)r;
        memset(input, value, size);
        if (aclrtMemcpy(in, size, input, size, ACL_MEMCPY_HOST_TO_DEVICE) != 0)
            failed = "aclrtMemcpy";
        else if (aclrtMemset(scratch, size, 0, size) != 0)
            failed = "aclrtMemset";
        else if (r % 2 && aclmdlRIExecuteAsync(model, stream) != 0)
            failed = "aclmdlRIExecuteAsync";
        else if (r % 2 && aclrtSynchronizeStream(stream) != 0)
            failed = "aclrtSynchronizeStream";
        else if (r % 2 == 0 && aclmdlRIExecute(model, -1) != 0)
            failed = "aclmdlRIExecute";
        else if (!holds(out, size, value))
            failed = "replay-result";
        else if (!holds(scratch, size, 0xee))
            failed = "replay-memset";
        else if (idle != NULL && !holds(idle, size, 0))
            failed = "a-default-stream-ran-unactivated";
    }
    free(input);
    return failed;
}

#endif
