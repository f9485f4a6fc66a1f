/* An ordinary CUDA driver program that walks the edge cases of green contexts (CUDA 12.4+,
 * the driver API's "Green Contexts"): bad resource types, devices and flags, priorities
 * out of range, a green context used after it is destroyed, and which green context a
 * stream says it was made in. Each case runs in a process of its own, so one answer cannot
 * disturb the next; a case that crashes its process fails. The answers expected are an
 * H100's (driver 580.159.04, 2026-11-27); fake-cuda gives the same, and
 * scripts/gpu-check.sh runs this on a GPU too. (A descriptor of no resources,
 * cuDevResourceGenerateDesc with a count of 0, crashed the process there: not a case.)
 *
 *   cuda_green_edges
 *
 * Prints "ok" when every answer is the expected one, else "fail CASE got RC value V" for
 * each that is not (exit 1). */
#include <stdio.h>
#include <string.h>

#include "cuda_green.h"
#include "edges.h"

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamGetPriority(CUstream, int *);
CUresult cuStreamQuery(CUstream);
CUresult cuStreamDestroy(CUstream);
CUresult cuDeviceGetDevResource(int, CUdevResource *, int);
CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *, CUdevResource *, unsigned);
CUresult cuGreenCtxCreate(CUgreenCtx *, CUdevResourceDesc, int, unsigned);
CUresult cuGreenCtxStreamCreate(CUstream *, CUgreenCtx, unsigned, int);
CUresult cuGreenCtxDestroy(CUgreenCtx);
CUresult cuCtxFromGreenCtx(CUcontext *, CUgreenCtx);
CUresult cuStreamGetGreenCtx(CUstream, CUgreenCtx *);

static CUdevResource sms;
static CUdevResourceDesc desc;
static CUgreenCtx green;
static CUstream s;
static int v = NONE;

/* Device 0's SMs as a resource, a descriptor of them, a green context (not current). */
static CUresult make_green(void) {
    memset(&sms, 0, sizeof sms);
    CUresult rc = cuDeviceGetDevResource(0, &sms, CU_DEV_RESOURCE_TYPE_SM);
    if (rc == 0) rc = cuDevResourceGenerateDesc(&desc, &sms, 1);
    if (rc == 0) rc = cuGreenCtxCreate(&green, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM);
    return rc;
}

static CUresult run(int n) {
    CUresult rc;
    CUcontext a = NULL, b = NULL;
    CUgreenCtx made_in = (CUgreenCtx)1;
    switch (n) {
    case 0: return cuDeviceGetDevResource(0, &sms, 99);
    case 1: return cuDeviceGetDevResource(99, &sms, CU_DEV_RESOURCE_TYPE_SM);
    case 2:
        if (make_green() || cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, 0) || cuGreenCtxDestroy(green)) return 999;
        return cuStreamGetPriority(s, &v);
    case 3:
        if ((rc = cuDeviceGetDevResource(0, &sms, CU_DEV_RESOURCE_TYPE_SM)) || (rc = cuDevResourceGenerateDesc(&desc, &sms, 1))) return rc;
        return cuGreenCtxCreate(&green, desc, 0, 0);
    case 4: return make_green() ? 999 : cuGreenCtxStreamCreate(&s, green, 0, 0);
    case 5:
        if (make_green() || (rc = cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, -100))) return 999;
        return cuStreamGetPriority(s, &v);
    case 6:
        if (make_green() || (rc = cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, 100))) return 999;
        return cuStreamGetPriority(s, &v);
    case 7:
        if (make_green() || cuCtxFromGreenCtx(&a, green) || cuCtxFromGreenCtx(&b, green)) return 999;
        v = a == b && a != NULL;
        return 0;
    case 8:
        if (make_green() || cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, 0)) return 999;
        rc = cuStreamGetGreenCtx(s, &made_in);
        v = made_in == green;
        return rc;
    case 9:
        if (make_green() || cuCtxFromGreenCtx(&a, green) || cuCtxSetCurrent(a) || cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) return 999;
        rc = cuStreamGetGreenCtx(s, &made_in);
        v = made_in == green;
        return rc;
    case 10:
        if (cuDevicePrimaryCtxRetain(&a, 0) || cuCtxSetCurrent(a) || cuStreamCreate(&s, 0)) return 999;
        rc = cuStreamGetGreenCtx(s, &made_in);
        v = made_in == NULL;
        return rc;
    case 11:
        if (make_green() || cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, 0) || cuGreenCtxDestroy(green)) return 999;
        return cuStreamQuery(s);
    case 12:
        if (make_green() || cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, 0) || cuGreenCtxDestroy(green)) return 999;
        return cuStreamDestroy(s);
    case 13: return make_green() ? 999 : cuGreenCtxDestroy(NULL);
    default: return make_green() ? 999 : cuGreenCtxStreamCreate(NULL, green, CU_STREAM_NON_BLOCKING, 0);
    }
}

static int failed;

static void init(void) {
    cuInit(0);
}

/* Case N in a child of its own; it must answer WANT, and leave WANT_V in v unless WANT_V
 * is NONE. */
static void expect(int n, const char *name, CUresult want, int want_v) {
    failed += edge_case(n, init, run, &v, name, want, want_v);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    expect(0, "a resource type that is not SM (CUDA_ERROR_INVALID_RESOURCE_TYPE)", 914, NONE);
    expect(1, "device 99's resources (CUDA_ERROR_INVALID_DEVICE)", 101, NONE);
    expect(2, "a stream its green context left: its priority (CUDA_ERROR_CONTEXT_IS_DESTROYED)", 709, NONE);
    expect(3, "a green context without CU_GREEN_CTX_DEFAULT_STREAM", 1, NONE);
    expect(4, "a green context's stream without CU_STREAM_NON_BLOCKING", 1, NONE);
    expect(5, "a green context's priority -100 is clamped to the greatest, -5", 0, -5);
    expect(6, "a green context's priority 100 is clamped to the least, 0", 0, 0);
    expect(7, "cuCtxFromGreenCtx gives one CUcontext each time", 0, 1);
    expect(8, "a stream made by cuGreenCtxStreamCreate names its green context", 0, 1);
    expect(9, "a stream made with the green context current names it", 0, 1);
    expect(10, "a primary context's stream names no green context", 0, 1);
    expect(11, "a stream its green context left: a query", 709, NONE);
    expect(12, "a stream its green context left cannot be destroyed", 709, NONE);
    expect(13, "destroying a NULL green context (CUDA_ERROR_INVALID_CONTEXT)", 201, NONE);
    expect(14, "a green context's stream into a NULL pointer", 1, NONE);
    if (failed) return 1;
    printf("ok\n");
    return 0;
}
