/* A CUDA driver program with no npud code in it that makes its streams in a green context
 * (CUDA 12.4+, the driver API's "Green Contexts"): device 0's SMs as a resource
 * (cuDeviceGetDevResource), a descriptor of them (cuDevResourceGenerateDesc), a green
 * context with its default stream (cuGreenCtxCreate), and N streams in it
 * (cuGreenCtxStreamCreate, which must be given CU_STREAM_NON_BLOCKING). With "current",
 * every other stream is made by cuStreamCreate instead, with the green context made
 * current as a CUcontext (cuCtxFromGreenCtx, cuCtxSetCurrent), as the CUDA runtime's
 * cudaStreamCreate would make it.
 *
 *   cuda_green N [current]
 *
 * Prints "ok N SMS" once all N exist (SMS: the resource's SM count), or "fail CODE after K"
 * when creation K+1 failed (the process then exits without cleaning up). On a first line
 * of input it destroys the green context ("detached RC"), which leaves its streams behind;
 * on a second it tries to destroy them ("destroyed D RC": D destroyed, RC the last
 * refusal; an H100 answers 709, CUDA_ERROR_CONTEXT_IS_DESTROYED, for each, and the
 * streams stay until the process exits). When input ends it destroys the streams if
 * nothing has tried yet (all must go) and prints "done".
 * Built as is, it links against libcuda; with -DUSE_PROC_ADDRESS it fetches every entry
 * point through cuGetProcAddress_v2 from a driver it dlopen()ed RTLD_LOCAL, as a static
 * cudart or cuda.bindings does. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_green.h"

#define DRIVER_CALLS(X)                                                   \
    X(cuInit, (unsigned))                                                 \
    X(cuDeviceGetDevResource, (int, CUdevResource *, int))                \
    X(cuDevResourceGenerateDesc, (CUdevResourceDesc *, CUdevResource *, unsigned)) \
    X(cuGreenCtxCreate, (CUgreenCtx *, CUdevResourceDesc, int, unsigned)) \
    X(cuGreenCtxStreamCreate, (CUstream *, CUgreenCtx, unsigned, int))    \
    X(cuGreenCtxDestroy, (CUgreenCtx))                                    \
    X(cuCtxFromGreenCtx, (CUcontext *, CUgreenCtx))                       \
    X(cuCtxSetCurrent, (CUcontext))                                       \
    X(cuStreamCreate, (CUstream *, unsigned))                             \
    X(cuStreamDestroy, (CUstream))

#ifdef USE_PROC_ADDRESS
#include <dlfcn.h>
#define DECLARE(name, args) static CUresult(*name) args;
DRIVER_CALLS(DECLARE)

static void load(void) {
    const char *path = getenv("CUDA_APP_LIBRARY");
    void *h = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CUresult (*get)(const char *, void **, int, uint64_t, int *) = NULL;
    if (h) *(void **)&get = dlsym(h, "cuGetProcAddress_v2");
    if (!get) {
        fprintf(stderr, "no driver or no cuGetProcAddress_v2\n");
        exit(3);
    }
    int status = 0;
    CUresult rc = 0;
    /* CUDA 12.5, the first with cuGreenCtxStreamCreate. */
#define FETCH(name, args) rc |= get(#name, (void **)&name, 12050, 0, &status);
    DRIVER_CALLS(FETCH)
    if (rc != 0) {
        fprintf(stderr, "cuGetProcAddress_v2 failed\n");
        exit(3);
    }
}
#else
#define DECLARE(name, args) CUresult name args;
DRIVER_CALLS(DECLARE)
static void load(void) {}
#endif

#define MAX_STREAMS 4096

/* Destroys all N streams: GONE counts those destroyed, LAST is the last refusal. */
static void destroy_all(CUstream *streams, int n, int *gone, CUresult *last) {
    for (int i = 0; i < n; i++) {
        CUresult rc = cuStreamDestroy(streams[i]);
        if (rc == 0)
            (*gone)++;
        else
            *last = rc;
    }
}

int main(int argc, char **argv) {
    static CUstream streams[MAX_STREAMS];
    int n = argc > 1 ? atoi(argv[1]) : 0;
    int current = argc > 2 && strcmp(argv[2], "current") == 0;
    if (n <= 0 || n > MAX_STREAMS) {
        printf("fail usage: cuda_green N [current] (N: 1..4096)\n");
        return 1;
    }
    load();
    CUdevResource sms;
    CUdevResourceDesc desc;
    CUgreenCtx green;
    memset(&sms, 0, sizeof sms);
    if (cuInit(0) != 0 || cuDeviceGetDevResource(0, &sms, CU_DEV_RESOURCE_TYPE_SM) != 0 ||
        cuDevResourceGenerateDesc(&desc, &sms, 1) != 0 ||
        cuGreenCtxCreate(&green, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM) != 0) {
        printf("fail the green context\n");
        return 1;
    }
    CUcontext as_context;
    if (current && (cuCtxFromGreenCtx(&as_context, green) != 0 || cuCtxSetCurrent(as_context) != 0)) {
        printf("fail the green context made current\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        CUresult rc = current && i % 2 ? cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING)
                                       : cuGreenCtxStreamCreate(&streams[i], green, CU_STREAM_NON_BLOCKING, 0);
        if (rc != 0) {
            printf("fail %u after %d\n", rc, i);
            return 1;
        }
    }
    printf("ok %d %u\n", n, sms.sm.smCount);
    fflush(stdout);
    char line[64];
    int detached = 0, destroyed = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (!detached) {
            printf("detached %u\n", cuGreenCtxDestroy(green));
            detached = 1;
        } else if (!destroyed) {
            int gone = 0;
            CUresult last = 0;
            destroy_all(streams, n, &gone, &last);
            printf("destroyed %d %u\n", gone, last);
            destroyed = 1;
        }
        fflush(stdout);
    }
    if (!destroyed) {
        int gone = 0;
        CUresult last = 0;
        destroy_all(streams, n, &gone, &last);
        if (gone != n) {
            printf("fail cuStreamDestroy %u\n", last);
            return 1;
        }
    }
    printf("done\n");
    return 0;
}
