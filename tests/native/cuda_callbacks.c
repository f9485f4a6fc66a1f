/* An ordinary CUDA driver program that uses the stream calls the seeds document beyond
 * creation (cuStreamGetFlags, cuStreamAddCallback and a call a callback may not make,
 * cuCtxSynchronize, cuGetErrorString) and
 * the memory calls every program makes (cuMemAlloc, copies both ways, cuMemsetD8).
 *
 *   cuda_callbacks
 *
 * Prints "ok" when every check holds, else "fail <what>" (exit 1). */
#include <stdint.h>
#include "check.h"
#include <stdio.h>
#include <string.h>

typedef unsigned int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
typedef void (*CUstreamCallback)(CUstream, CUresult, void *);
#define CU_STREAM_NON_BLOCKING 0x1u

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamGetFlags(CUstream, unsigned *);
CUresult cuStreamAddCallback(CUstream, CUstreamCallback, void *, unsigned);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuCtxGetDevice(int *);
CUresult cuGetErrorString(CUresult, const char **);
typedef uint64_t CUdeviceptr;
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);

static int order[4];
static int calls;
static CUstream seen_stream;
static CUresult seen_status = 99;
static CUresult inside = 99;

static void on_done(CUstream s, CUresult status, void *data) {
    if (calls < 4) order[calls] = (int)(intptr_t)data;
    calls++;
    seen_stream = s;
    seen_status = status;
    /* The seed: "Callbacks must not make any CUDA API calls. Attempting to use a CUDA API
     * will result in CUDA_ERROR_NOT_PERMITTED." (An H100 on driver 580 refuses this one so;
     * it answers a cuStreamQuery of the callback's stream with NOT_READY instead.) */
    int device = -1;
    inside = cuCtxGetDevice(&device);
}


int main(void) {
    CUcontext ctx;
    CUstream plain, nonblocking;
    unsigned flags = 77;
    CHECK(cuInit(0) == 0, "cuInit");
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0) == 0 && cuCtxSetCurrent(ctx) == 0, "context");
    CHECK(cuStreamCreate(&plain, 0) == 0, "cuStreamCreate");
    CHECK(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING) == 0, "cuStreamCreate non-blocking");
    CHECK(cuStreamGetFlags(plain, &flags) == 0 && flags == 0, "cuStreamGetFlags default");
    CHECK(cuStreamGetFlags(nonblocking, &flags) == 0 && flags == CU_STREAM_NON_BLOCKING, "cuStreamGetFlags non-blocking");
    CHECK(cuStreamAddCallback(nonblocking, on_done, (void *)1, 0) == 0, "cuStreamAddCallback 1");
    CHECK(cuStreamAddCallback(nonblocking, on_done, (void *)2, 0) == 0, "cuStreamAddCallback 2");
    CHECK(cuStreamAddCallback(nonblocking, on_done, (void *)3, 1) == 1, "flags must be 0 (CUDA_ERROR_INVALID_VALUE)");
    CHECK(cuCtxSynchronize() == 0, "cuCtxSynchronize");
    CHECK(calls == 2 && order[0] == 1 && order[1] == 2, "callbacks ran once each, in order, before the sync returned");
    CHECK(seen_stream == nonblocking && seen_status == 0, "the callback got its stream and CUDA_SUCCESS");
    CHECK(inside == 800, "a CUDA call inside the callback is CUDA_ERROR_NOT_PERMITTED");
    int device = -1;
    CHECK(cuCtxGetDevice(&device) == 0 && device == 0, "and permitted again outside it");
    const char *text = NULL;
    CHECK(cuGetErrorString(1, &text) == 0 && text && strlen(text) > 0, "cuGetErrorString");
    enum { N = 4096 };
    CUdeviceptr dev = 0;
    char src[N], back[N];
    for (int i = 0; i < N; i++) src[i] = (char)(i * 13);
    CHECK(cuMemAlloc_v2(&dev, N) == 0 && dev != 0, "cuMemAlloc");
    CHECK(cuMemcpyHtoDAsync_v2(dev, src, N, plain) == 0 && cuStreamSynchronize(plain) == 0, "async H2D");
    CHECK(cuMemcpyDtoH_v2(back, dev, N) == 0 && memcmp(back, src, N) == 0, "the data round-trips");
    CHECK(cuMemsetD8_v2(dev, 0x5a, N) == 0 && cuMemcpyDtoH_v2(back, dev, N) == 0 && back[N - 1] == 0x5a, "memset");
    CHECK(cuMemFree_v2(dev) == 0, "cuMemFree");
    CHECK(cuStreamDestroy_v2(plain) == 0 && cuStreamDestroy_v2(nonblocking) == 0, "destroy");
    printf("ok\n");
    return 0;
}
