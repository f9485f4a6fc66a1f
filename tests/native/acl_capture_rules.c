/* The runtime's capture rules, one check each, as hicann/runtime @681ef76 answers them
 * (file and line beside each check; docs/hardware.md lists them with this program). Linked
 * against libascendcl and libruntime: AscendCL for the program's own calls, the runtime
 * layer for GE's and HCCL's (flags, kernels, rtStreamAddToModel).
 *
 * Prints "ok RULE" for each rule that holds, "fail RULE got CODE want CODE" for one that
 * does not (and goes on), then "done N" with the number that failed. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "acl_rt.h"

typedef void *rtStream_t;
int rtStreamCreateWithFlags(rtStream_t *, int32_t, uint32_t);
int rtStreamDestroy(rtStream_t);
int rtStreamAddToModel(rtStream_t, void *);
int rtStreamBeginCaptureToModel(rtStream_t, uint32_t, void *);
typedef struct { uint32_t magic, version; const void *data; uint64_t length; } rtDevBinary_t;
int rtDevBinaryRegister(const rtDevBinary_t *, void **);
int rtFunctionRegister(void *, const void *, const char *, const void *, uint32_t);
int rtKernelLaunch(const void *, uint32_t, void *, uint32_t, void *, rtStream_t);
aclError aclmdlRICaptureToModelRIBegin(aclrtStream, aclmdlRI, uint32_t);
aclError aclrtBinaryLoadFromData(const void *, size_t, const void *, void **);
aclError aclrtBinaryGetFunction(void *, const char *, void **);
aclError aclrtLaunchKernel(void *, uint32_t, const void *, size_t, aclrtStream);
aclError aclopExecuteV2(const char *, int, void *, void *, int, void *, void *, void *, aclrtStream);
aclError aclrtLaunchCallback(void (*)(void *), void *, uint32_t, aclrtStream);
aclError aclrtSubscribeReport(uint64_t, aclrtStream);
uint64_t npudFakeKernelsRun(void);
aclError aclrtCreateEventWithFlag(aclrtEvent *, uint32_t);
const char *aclrtGetSocName(void);

#define RT_STREAM_HUGE 0x04u
#define RT_STREAM_AICPU 0x08u
#define RT_STREAM_FORBIDDEN_DEFAULT 0x10u
#define RT_STREAM_FAST_LAUNCH 0x200u
#define RT_STREAM_CP_PROCESS_USE 0x800u
#define RT_STREAM_VECTOR_CORE_USE 0x1000u
#define RT_STREAM_ACSQ_LOCK 0x2000u

static int failed;

static void expect(const char *rule, int got, int want) {
    if (got == want) {
        printf("ok %s\n", rule);
    } else {
        printf("fail %s got %d want %d\n", rule, got, want);
        failed++;
    }
    fflush(stdout);
}

static aclrtStream stream(void) {
    aclrtStream s = NULL;
    if (aclrtCreateStream(&s) != 0) printf("fail a stream\n");
    return s;
}

static aclrtEvent ex_event(void) {
    aclrtEvent e = NULL;
    if (aclrtCreateEventExWithFlag(&e, ACL_EVENT_SYNC) != 0) printf("fail an event\n");
    return e;
}

/* Ends a capture begun on `s`, whatever it holds, and destroys its model. */
static void end(aclrtStream s) {
    aclmdlRI m = NULL;
    if (aclmdlRICaptureEnd(s, &m) == 0 && m) aclmdlRIDestroy(m);
}

static int kernel_body;
static int calls;
static void counted(void *arg) { (void)arg; calls++; }

int main(void) {
    if (aclInit(NULL) != 0 || aclrtSetDevice(0) != 0) {
        printf("fail setup\n");
        return 1;
    }
    aclrtStream s = stream(), side = stream();

    /* api_impl.cc 2169-2172: an old-mode event (aclrtCreateEvent) recorded in a capture. */
    aclrtEvent plain = NULL;
    aclrtCreateEvent(&plain);
    aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
    expect("old-event-record", aclrtRecordEvent(plain, s), 207000);
    /* api_impl.cc 1645-1652: ... and waited on by a capturing stream. */
    expect("old-event-wait", aclrtStreamWaitEvent(s, plain), 207000);
    /* aclrtCreateEventWithFlag is the old mode too. */
    aclrtEvent flagged = NULL;
    aclrtCreateEventWithFlag(&flagged, ACL_EVENT_SYNC);
    expect("old-flag-event-record", aclrtRecordEvent(flagged, s), 207000);
    end(s);

    /* api_impl.cc 1653-1666: a new-mode event recorded outside, waited on inside:
     * STREAM_CAPTURE_ISOLATION, reported as ACL_ERROR_RT_CAPTURE_DEPENDENCY. */
    aclrtEvent outside = ex_event();
    aclrtRecordEvent(outside, side);
    aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
    expect("isolation", aclrtStreamWaitEvent(s, outside), 107024);
    /* api_impl.cc 1630-1633: the default stream (NULL) waiting on a captured event. */
    aclrtEvent inside = ex_event();
    expect("ex-event-record", aclrtRecordEvent(inside, s), 0);
    expect("default-stream-joins", aclrtStreamWaitEvent(NULL, inside), 107031);
    end(s);

    /* capture_adapt_v100.cc 22-34, api_error_aclgraph.cc 46-49: streams made with AICPU,
     * FORBIDDEN_DEFAULT, CP_PROCESS_USE or VECTOR_CORE_USE cannot begin a capture
     * (RT_ERROR_STREAM_INVALID: ACL_ERROR_RT_INTERNAL_ERROR). */
    const uint32_t refused[] = {RT_STREAM_AICPU, RT_STREAM_FORBIDDEN_DEFAULT, RT_STREAM_CP_PROCESS_USE,
                                RT_STREAM_VECTOR_CORE_USE};
    for (int i = 0; i < 4; i++) {
        rtStream_t r = NULL;
        char rule[64];
        snprintf(rule, sizeof rule, "begin-on-flag-%#x", refused[i]);
        if (rtStreamCreateWithFlags(&r, 0, refused[i]) != 0) {
            expect(rule, -1, 507000);
            continue;
        }
        expect(rule, aclmdlRICaptureBegin(r, ACL_MODEL_RI_CAPTURE_MODE_RELAXED), 507000);
        rtStreamDestroy(r);
    }

    /* api_error.cc 1366-1381: flags above the known ones, and CP with anything but
     * ACSQ_LOCK (RT_ERROR_INVALID_VALUE, 107000); CP with ACSQ_LOCK is made. */
    rtStream_t r = NULL;
    expect("flag-0x10000", rtStreamCreateWithFlags(&r, 0, 0x10000u), 107000);
    expect("flag-0x80000000", rtStreamCreateWithFlags(&r, 0, 0x80000000u), 107000);
    expect("cp-with-fast-launch", rtStreamCreateWithFlags(&r, 0, RT_STREAM_CP_PROCESS_USE | RT_STREAM_FAST_LAUNCH),
           107000);
    int cp = rtStreamCreateWithFlags(&r, 0, RT_STREAM_CP_PROCESS_USE | RT_STREAM_ACSQ_LOCK);
    expect("cp-with-acsq-lock", cp, 0);
    if (cp == 0) rtStreamDestroy(r);
    /* api_error.cc 1359-1364: HUGE where the part lacks the feature (the inference part). */
    const char *soc = aclrtGetSocName();
    int huge = rtStreamCreateWithFlags(&r, 0, RT_STREAM_HUGE);
    expect("huge", huge, strncmp(soc, "Ascend310P", 10) == 0 ? 207000 : 0);
    if (huge == 0) rtStreamDestroy(r);

    /* context_aclgraph.cc 510: a failed End leaves NULL in the out-pointer. */
    aclmdlRI m = (aclmdlRI)0x1;
    expect("failed-end-status", aclmdlRICaptureEnd(s, &m), 107029);
    expect("failed-end-nulls-model", m == NULL ? 0 : 1, 0);

    /* capture_model.cc 726-731 -> context_aclgraph.cc 154-177: rtStreamAddToModel makes a
     * capture stream for the stream it adds (one stream of the device), once. */
    uint32_t before = 0, after = 0, again = 0;
    aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
    aclmdlRI model = NULL;
    uint32_t status = 0;
    aclmdlRICaptureGetInfo(s, &status, &model);
    aclrtGetStreamAvailableNum(&before);
    expect("add-to-model", rtStreamAddToModel(side, model), 0);
    aclrtGetStreamAvailableNum(&after);
    expect("add-to-model-takes-a-stream", (int)(before - after), 1);
    expect("add-to-model-again", rtStreamAddToModel(side, model), 0);
    aclrtGetStreamAvailableNum(&again);
    expect("add-to-model-once", (int)(after - again), 0);
    expect("add-to-model-no-model", rtStreamAddToModel(side, NULL), 107000);

    /* stream_capture.cc 75-118: every task counts toward the capture stream's depth, kernel
     * launches and callbacks included: 2,100 launches on one stream cascade into a second
     * capture stream (2048 deep, 32 kept for the model). aclopExecuteV2 launches by the
     * runtime's internal path. */
    void *bin = NULL, *func = NULL, *hdl = NULL;
    aclrtBinaryLoadFromData(&kernel_body, sizeof kernel_body, NULL, &bin);
    aclrtBinaryGetFunction(bin, "add_custom", &func);
    rtDevBinary_t dev_bin = {0xabceed50u, 0, &kernel_body, sizeof kernel_body};
    rtDevBinaryRegister(&dev_bin, &hdl);
    rtFunctionRegister(hdl, &kernel_body, "add_custom", NULL, 0);
    expect("unregistered-stub", rtKernelLaunch(&calls, 1, NULL, 0, NULL, s), 107000);
    aclrtGetStreamAvailableNum(&before);
    int rc = 0;
    for (int i = 0; i < 2100 && rc == 0; i++) {
        switch (i % 3) {
        case 0: rc = aclrtLaunchKernel(func, 8, NULL, 0, s); break;
        case 1: rc = rtKernelLaunch(&kernel_body, 8, NULL, 0, NULL, s); break;
        default: rc = aclopExecuteV2("Add", 2, NULL, NULL, 1, NULL, NULL, NULL, s); break;
        }
    }
    expect("launches-in-capture", rc, 0);
    aclrtGetStreamAvailableNum(&after);
    expect("launches-cascade", (int)(before - after), 1);
    expect("launches-wait-for-execution", (int)npudFakeKernelsRun(), 0);
    /* The side stream joined back (a record it makes, waited on by the origin). */
    aclrtEvent join = ex_event();
    aclrtRecordEvent(join, side);
    aclrtStreamWaitEvent(s, join);
    aclmdlRI done = NULL;
    expect("end", aclmdlRICaptureEnd(s, &done), 0);
    expect("execute", aclmdlRIExecute(done, -1), 0);
    /* 700 of each; an aclopExecuteV2 runs its operator's two kernels. */
    expect("launches-run-at-execution", (int)npudFakeKernelsRun(), 2800);
    aclmdlRIDestroy(done);

    /* A callback issued in a capture is a task of it, run at each execution. */
    aclrtSubscribeReport(0, side);
    aclmdlRICaptureBegin(side, ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
    expect("callback-in-capture", aclrtLaunchCallback(counted, NULL, 1, side), 0);
    expect("callback-not-run-yet", calls, 0);
    done = NULL;
    aclmdlRICaptureEnd(side, &done);
    aclmdlRIExecute(done, -1);
    aclmdlRIExecute(done, -1);
    expect("callback-at-each-execution", calls, 2);
    aclmdlRIDestroy(done);

    /* model_ri.cpp 411-423, api_error_aclgraph.cc 19-35: capturing into a model that is
     * not a sub ACL graph is RT_ERROR_INVALID_VALUE; with none it is an ordinary Begin. */
    aclrtStream t = stream();
    expect("to-model-not-sub-graph", aclmdlRICaptureToModelRIBegin(t, (aclmdlRI)0x40, 2), 107000);
    expect("to-model-none", aclmdlRICaptureToModelRIBegin(t, NULL, 2), 0);
    end(t);
    expect("rt-to-model-none", rtStreamBeginCaptureToModel(t, 2, NULL), 0);
    end(t);

    printf("done %d\n", failed);
    aclrtResetDevice(0);
    return failed != 0;
}
