/* An ordinary CUDA driver program with no npud code in it, as a PyTorch process fills its
 * stream pool: read device 0's compute capability (cuDeviceGetAttribute, as cudart's
 * device properties are read), retain its primary context, create N streams with
 * cuStreamCreateWithPriority, say how it went, hold them, destroy them.
 *
 *   cuda_app N HOLD_MS [reset|release]     HOLD_MS < 0 holds until standard input closes
 *
 * Prints "ok N" once all N exist, or "fail CODE after K" when creation K+1 failed (the
 * process then exits without cleaning up), then "done" after the teardown.
 * With reset or release, the first input makes it reset (cuDevicePrimaryCtxReset, what
 * cudaDeviceReset calls) or release (cuDevicePrimaryCtxRelease) the primary context,
 * which takes its streams with it, and print "gone RC"; it then holds until input
 * closes and exits without destroying anything.
 * Built as is, it links against libcuda; with -DUSE_PROC_ADDRESS it does what a static
 * cudart does: dlopen() the driver RTLD_LOCAL, dlsym(handle, "cuGetProcAddress_v2"), and
 * fetch every other entry point through it with a CUDA 12 version. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef unsigned int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75

#ifdef USE_PROC_ADDRESS
#include <dlfcn.h>
static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGetAttribute)(int *, int, int);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuStreamCreateWithPriority)(CUstream *, unsigned, int);
static CUresult (*cuStreamDestroy)(CUstream);
static CUresult (*cuDevicePrimaryCtxReset)(int);
static CUresult (*cuDevicePrimaryCtxRelease)(int);

static void load(void) {
    const char *path = getenv("CUDA_APP_LIBRARY");
    void *h = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(3);
    }
    CUresult (*get)(const char *, void **, int, uint64_t, int *);
    *(void **)&get = dlsym(h, "cuGetProcAddress_v2");
    if (!get) {
        fprintf(stderr, "dlsym: no cuGetProcAddress_v2\n");
        exit(3);
    }
    int status = 0;
    CUresult rc = get("cuInit", (void **)&cuInit, 12000, 0, &status);
    rc |= get("cuDeviceGetAttribute", (void **)&cuDeviceGetAttribute, 12000, 0, &status);
    rc |= get("cuDevicePrimaryCtxRetain", (void **)&cuDevicePrimaryCtxRetain, 12000, 0, &status);
    rc |= get("cuCtxSetCurrent", (void **)&cuCtxSetCurrent, 12000, 0, &status);
    rc |= get("cuStreamCreateWithPriority", (void **)&cuStreamCreateWithPriority, 12000, 0, &status);
    /* The base name at a version >= 4000 is cuStreamDestroy_v2. */
    rc |= get("cuStreamDestroy", (void **)&cuStreamDestroy, 12000, 0, &status);
    /* From 11000 these base names are their _v2 entry points. */
    rc |= get("cuDevicePrimaryCtxReset", (void **)&cuDevicePrimaryCtxReset, 12000, 0, &status);
    rc |= get("cuDevicePrimaryCtxRelease", (void **)&cuDevicePrimaryCtxRelease, 12000, 0, &status);
    if (rc != 0) {
        fprintf(stderr, "cuGetProcAddress_v2: a function is missing\n");
        exit(3);
    }
}
#else
CUresult cuInit(unsigned);
CUresult cuDeviceGetAttribute(int *, int, int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuStreamCreateWithPriority(CUstream *, unsigned, int);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuDevicePrimaryCtxReset_v2(int);
CUresult cuDevicePrimaryCtxRelease_v2(int);
#define cuDevicePrimaryCtxReset cuDevicePrimaryCtxReset_v2
#define cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2
#define cuStreamDestroy cuStreamDestroy_v2
static void load(void) {}
#endif

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s STREAMS HOLD_MS [reset|release]\n", argv[0]);
        return 2;
    }
    const char *teardown = argc == 4 ? argv[3] : "";
    int n = atoi(argv[1]), hold = atoi(argv[2]);
    CUstream *s = calloc((size_t)(n > 0 ? n : 1), sizeof *s);
    CUcontext ctx = 0;
    load();
    int major = 0;
    CUresult rc = cuInit(0);
    if (rc == 0) rc = cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0);
    if (rc == 0 && major < 1) rc = 999;
    if (rc == 0) rc = cuDevicePrimaryCtxRetain(&ctx, 0);
    if (rc == 0) rc = cuCtxSetCurrent(ctx);
    if (rc != 0) {
        printf("fail %u after 0\n", rc);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        rc = cuStreamCreateWithPriority(&s[i], CU_STREAM_NON_BLOCKING, -1);
        if (rc != 0) {
            printf("fail %u after %d\n", rc, i);
            return 1;
        }
    }
    printf("ok %d\n", n);
    fflush(stdout);
    if (teardown[0] != '\0') {
        char buf[64];
        if (read(0, buf, sizeof buf) > 0) {
            rc = teardown[2] == 's' ? cuDevicePrimaryCtxReset(0) : cuDevicePrimaryCtxRelease(0);
            printf("gone %u\n", rc);
            fflush(stdout);
        }
        while (read(0, buf, sizeof buf) > 0) {
        }
        return 0;
    }
    if (hold < 0) {
        char buf[64];
        while (read(0, buf, sizeof buf) > 0) {
        }
    } else {
        usleep((useconds_t)hold * 1000);
    }
    for (int i = 0; i < n; i++) cuStreamDestroy(s[i]);
    printf("done\n");
    return 0;
}
