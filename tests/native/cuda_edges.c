/* An ordinary CUDA driver program that walks the driver's edge cases: bad flags and
 * priorities, events never recorded or not timed, NULL handles and functions, calls with
 * no current context, devices that do not exist. Each case runs in a process of its own,
 * so one answer cannot disturb the next. The answers expected are an H100's (driver
 * 580.159.04, 2026-11-26); fake-cuda gives the same, and scripts/gpu-check.sh runs this on
 * a GPU too.
 *
 *   cuda_edges
 *
 * Prints "ok" when every answer is the driver's, else "fail CASE got RC value V" for each
 * that is not (exit 1). */
#include <stdint.h>
#include <stdio.h>

#include "edges.h"

typedef unsigned int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef void (*CUstreamCallback)(CUstream, CUresult, void *);
typedef void (*CUhostFn)(void *);

CUresult cuInit(unsigned);
CUresult cuDeviceGet(int *, int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuDevicePrimaryCtxRelease(int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuCtxGetStreamPriorityRange(int *, int *);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamCreateWithPriority(CUstream *, unsigned, int);
CUresult cuStreamGetPriority(CUstream, int *);
CUresult cuStreamGetFlags(CUstream, unsigned *);
CUresult cuStreamQuery(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned);
CUresult cuStreamAddCallback(CUstream, CUstreamCallback, void *, unsigned);
CUresult cuLaunchHostFunc(CUstream, CUhostFn, void *);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventQuery(CUevent);
CUresult cuEventSynchronize(CUevent);
CUresult cuEventElapsedTime(float *, CUevent, CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuMemAlloc_v2(uint64_t *, size_t);

static CUstream s;
static CUevent e, f, untimed;
static int v = NONE;
static float ms;
static int failed;

static void nothing(CUstream stream, CUresult status, void *data) {
    (void)stream, (void)status, (void)data;
}

/* Device 0's primary context current, a stream, two timed events and an untimed one. */
static void with_context(void) {
    CUcontext c;
    cuDevicePrimaryCtxRetain(&c, 0);
    cuCtxSetCurrent(c);
    cuStreamCreate(&s, 0);
    cuEventCreate(&e, 0);
    cuEventCreate(&f, 0);
    cuEventCreate(&untimed, 2);
}

static void init(void) {
    cuInit(0);
}

static void init_with_context(void) {
    cuInit(0);
    with_context();
}

static CUresult run(int n);

/* Case N in a child of its own (set up with a current context when CTX); it must answer
 * WANT, and leave WANT_V in v unless WANT_V is NONE. */
static void expect(int n, int ctx, const char *name, CUresult want, int want_v) {
    failed += edge_case(n, ctx ? init_with_context : init, run, &v, name, want, want_v);
}

static CUresult run(int n) {
    int greatest;
    unsigned flags;
    uint64_t p;
    switch (n) {
    case 0: return cuStreamCreate(&s, 2);
    case 1: cuStreamCreateWithPriority(&s, 0, -100); return cuStreamGetPriority(s, &v);
    case 2: cuStreamCreateWithPriority(&s, 0, 100); return cuStreamGetPriority(s, &v);
    case 3: return cuCtxGetStreamPriorityRange(&v, &greatest);
    case 4: return cuEventCreate(&e, 4);
    case 5: return cuEventCreate(&e, 0x40);
    case 6: return cuEventQuery(e);
    case 7: return cuEventSynchronize(e);
    case 8: return cuEventElapsedTime(&ms, e, f);
    case 9: cuEventRecord(e, s); cuStreamSynchronize(s); return cuEventElapsedTime(&ms, e, f);
    case 10: cuEventRecord(untimed, s); cuEventRecord(f, s); cuStreamSynchronize(s); return cuEventElapsedTime(&ms, untimed, f);
    case 11: cuEventRecord(e, s); return cuStreamWaitEvent(s, e, 1);
    case 12: return cuStreamWaitEvent(s, e, 0);
    case 13: return cuStreamAddCallback(s, nothing, NULL, 1);
    case 14: return cuLaunchHostFunc(s, NULL, NULL);
    case 15: return cuStreamAddCallback(s, NULL, NULL, 0);
    case 16: return cuCtxSynchronize();
    case 17: return cuStreamCreate(&s, 0);
    case 18: return cuEventCreate(&e, 0);
    case 19: return cuDeviceGet(&v, 99);
    case 20: return cuDevicePrimaryCtxRelease(99);
    case 21: return cuDevicePrimaryCtxRelease(0);
    case 22: return cuMemAlloc_v2(&p, 0);
    case 23: return cuEventRecord(NULL, s);
    case 24: return cuEventDestroy_v2(NULL);
    case 25: return cuStreamQuery(s);
    default: cuStreamCreate(&s, 1); flags = 99; { CUresult rc = cuStreamGetFlags(s, &flags); v = (int)flags; return rc; }
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    expect(0, 1, "stream flags 0x2 (CUDA_ERROR_INVALID_VALUE)", 1, NONE);
    expect(1, 1, "priority -100 is clamped to the greatest, -5", 0, -5);
    expect(2, 1, "priority 100 is clamped to the least, 0", 0, 0);
    expect(3, 1, "the least priority is 0", 0, 0);
    expect(4, 1, "an interprocess event must not be timed", 1, NONE);
    expect(5, 1, "event flag 0x40", 1, NONE);
    expect(6, 1, "a never-recorded event queries as done", 0, NONE);
    expect(7, 1, "a never-recorded event synchronizes at once", 0, NONE);
    expect(8, 1, "elapsed time of never-recorded events (CUDA_ERROR_INVALID_HANDLE)", 400, NONE);
    expect(9, 1, "elapsed time with one event never recorded", 400, NONE);
    expect(10, 1, "elapsed time of an untimed event", 400, NONE);
    expect(11, 1, "CU_EVENT_WAIT_EXTERNAL outside a capture (CUDA_ERROR_ILLEGAL_STATE)", 401, NONE);
    expect(12, 1, "a wait on a never-recorded event is a no-op", 0, NONE);
    expect(13, 1, "cuStreamAddCallback flags must be 0", 1, NONE);
    expect(14, 1, "cuLaunchHostFunc without a function", 1, NONE);
    expect(15, 1, "cuStreamAddCallback without a function", 1, NONE);
    expect(16, 0, "cuCtxSynchronize without a context (CUDA_ERROR_INVALID_CONTEXT)", 201, NONE);
    expect(17, 0, "cuStreamCreate without a context", 201, NONE);
    expect(18, 0, "cuEventCreate without a context", 201, NONE);
    expect(19, 0, "cuDeviceGet of device 99 (CUDA_ERROR_INVALID_DEVICE)", 101, NONE);
    expect(20, 0, "releasing device 99's primary context", 101, NONE);
    expect(21, 0, "releasing a primary context never retained succeeds", 0, NONE);
    expect(22, 1, "cuMemAlloc of 0 bytes", 1, NONE);
    expect(23, 1, "recording a NULL event", 400, NONE);
    expect(24, 1, "destroying a NULL event", 400, NONE);
    expect(25, 1, "a fresh stream queries as done", 0, NONE);
    expect(26, 1, "a non-blocking stream's flags", 0, 1);
    if (failed) return 1;
    printf("ok\n");
    return 0;
}
