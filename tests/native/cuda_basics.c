/* The everyday CUDA driver calls around streams that a program makes besides creating
 * them: the primary context's state and flags, a context's flags and API version, the
 * context a stream belongs to, the device's memory, 32-bit and stream-ordered memsets and
 * copies, and modules loaded from a file and unloaded. The answers expected are an
 * H100's (driver 580.159.04, 2026-11-27), refusals included; fake-cuda gives the same,
 * and scripts/gpu-check.sh runs this on a GPU too.
 *
 *   cuda_basics
 *
 * Prints "ok" when every answer is the driver's, else "fail WHAT" for the first that is
 * not (exit 1). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

typedef unsigned int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUmodule;
typedef void *CUfunction;

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuDevicePrimaryCtxRelease_v2(int);
CUresult cuDevicePrimaryCtxGetState(int, unsigned *, int *);
CUresult cuDevicePrimaryCtxSetFlags_v2(int, unsigned);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, int);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuCtxGetFlags(unsigned *);
CUresult cuCtxGetApiVersion(CUcontext, unsigned *);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamGetCtx(CUstream, CUcontext *);
CUresult cuDeviceTotalMem_v2(size_t *, int);
CUresult cuMemAlloc_v2(uint64_t *, size_t);
CUresult cuMemFree_v2(uint64_t);
CUresult cuMemcpyDtoH_v2(void *, uint64_t, size_t);
CUresult cuMemsetD32_v2(uint64_t, unsigned, size_t);
CUresult cuMemsetD8Async(uint64_t, unsigned char, size_t, CUstream);
CUresult cuMemcpyDtoDAsync_v2(uint64_t, uint64_t, size_t, CUstream);
CUresult cuModuleLoad(CUmodule *, const char *);
CUresult cuModuleUnload(CUmodule);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);

/* cuCtxCreate and cuDevicePrimaryCtxSetFlags flags. */
#define SCHED_SPIN 0x1u
#define SCHED_BLOCKING_SYNC 0x4u
#define MAP_HOST 0x8u
#define LEGACY_STREAM ((CUstream)0x1)
#define API_VERSION 3020u

static const char PTX[] = ".version 6.0\n.target sm_50\n.address_size 64\n.visible .entry npud_nop() { ret; }\n";

/* Writes TEXT to a new file in the temporary directory; its path in PATH. */
static int write_file(char *path, size_t size, const char *name, const char *text) {
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path, size, "%s/npud-cuda-basics-%d-%s", dir, (int)getpid(), name);
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

int main(void) {
    unsigned flags = 99, version = 0;
    int active = 99;
    CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active) == 3, "the state before cuInit is CUDA_ERROR_NOT_INITIALIZED");
    CHECK(cuInit(0) == 0, "cuInit");

    /* The primary context's state and flags, before and after it is retained. */
    CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active) == 0 && flags == 0 && active == 0, "state before a retain");
    CHECK(cuDevicePrimaryCtxSetFlags_v2(0, SCHED_BLOCKING_SYNC) == 0, "flags set while inactive");
    CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active) == 0 && flags == SCHED_BLOCKING_SYNC && active == 0,
          "the flags kept while inactive");
    CHECK(cuDevicePrimaryCtxSetFlags_v2(0, 0x100) == 1, "an unknown flag (CUDA_ERROR_INVALID_VALUE)");
    CHECK(cuDevicePrimaryCtxSetFlags_v2(0, 0x3) == 1, "two scheduling flags");
    CHECK(cuDevicePrimaryCtxSetFlags_v2(99, 0) == 101, "flags of device 99 (CUDA_ERROR_INVALID_DEVICE)");
    CHECK(cuDevicePrimaryCtxGetState(99, &flags, &active) == 101, "state of device 99");
    CHECK(cuDevicePrimaryCtxGetState(0, NULL, &active) == 1, "state into a NULL pointer");
    CHECK(cuCtxGetFlags(&flags) == 201, "cuCtxGetFlags without a context (CUDA_ERROR_INVALID_CONTEXT)");
    CUcontext primary = NULL, created = NULL, got = NULL;
    CHECK(cuDevicePrimaryCtxRetain(&primary, 0) == 0 && cuCtxSetCurrent(primary) == 0, "retain");
    CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active) == 0 && flags == SCHED_BLOCKING_SYNC && active == 1,
          "state once retained");
    CHECK(cuCtxGetFlags(&flags) == 0 && flags == (SCHED_BLOCKING_SYNC | MAP_HOST),
          "the primary context's flags (CU_CTX_MAP_HOST added)");
    CHECK(cuDevicePrimaryCtxSetFlags_v2(0, SCHED_SPIN) == 0, "flags set while active");
    CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active) == 0 && flags == SCHED_SPIN && active == 1,
          "state after flags set while active");
    CHECK(cuCtxGetFlags(&flags) == 0 && flags == (SCHED_SPIN | MAP_HOST), "the context's new flags");
    CHECK(cuCtxGetApiVersion(primary, &version) == 0 && version == API_VERSION, "the primary context's API version");
    CHECK(cuCtxGetApiVersion(NULL, &version) == 0 && version == API_VERSION, "the current context's API version");

    /* The context a stream belongs to. */
    CUstream s = NULL;
    CHECK(cuStreamCreate(&s, 0) == 0, "cuStreamCreate");
    CHECK(cuStreamGetCtx(s, &got) == 0 && got == primary, "a stream's context");
    got = NULL;
    CHECK(cuStreamGetCtx(NULL, &got) == 0 && got == primary, "the NULL stream's context is the current one");
    got = NULL;
    CHECK(cuStreamGetCtx(LEGACY_STREAM, &got) == 0 && got == primary, "CU_STREAM_LEGACY's context");

    /* Memory. */
    size_t total = 0;
    CHECK(cuDeviceTotalMem_v2(&total, 0) == 0 && total > 0, "cuDeviceTotalMem");
    CHECK(cuDeviceTotalMem_v2(&total, 99) == 101, "device 99's memory");
    CHECK(cuDeviceTotalMem_v2(NULL, 0) == 1, "memory into a NULL pointer");
    uint64_t a = 0, b = 0;
    unsigned words[4] = {0};
    CHECK(cuMemAlloc_v2(&a, 64) == 0 && cuMemAlloc_v2(&b, 64) == 0, "cuMemAlloc");
    CHECK(cuMemsetD32_v2(a, 0xdeadbeefu, 16) == 0, "cuMemsetD32");
    CHECK(cuMemcpyDtoDAsync_v2(b, a, 64, s) == 0, "cuMemcpyDtoDAsync");
    CHECK(cuMemsetD8Async(a, 7, 3, s) == 0, "cuMemsetD8Async");
    CHECK(cuStreamSynchronize(s) == 0, "cuStreamSynchronize");
    CHECK(cuMemcpyDtoH_v2(words, b, 16) == 0 && words[0] == 0xdeadbeefu && words[3] == 0xdeadbeefu,
          "the copy made before the memset");
    CHECK(cuMemcpyDtoH_v2(words, a, 16) == 0 && words[0] == 0xde070707u && words[1] == 0xdeadbeefu,
          "the memset of three bytes");
    CHECK(cuMemsetD32_v2(a + 1, 1, 4) == 1, "cuMemsetD32 at an address not 4-aligned");
    CHECK(cuMemsetD32_v2(0, 1, 4) == 1, "cuMemsetD32 at NULL");

    /* A module from a file. */
    char ptx[256], bad[256];
    CHECK(write_file(ptx, sizeof ptx, "nop.ptx", PTX) && write_file(bad, sizeof bad, "bad.ptx", "not ptx at all"),
          "writing the modules");
    CUmodule m = NULL;
    CUfunction fn = NULL;
    CHECK(cuModuleLoad(&m, ptx) == 0, "cuModuleLoad");
    CHECK(cuModuleGetFunction(&fn, m, "npud_nop") == 0, "a function of the loaded module");
    CHECK(cuModuleUnload(m) == 0, "cuModuleUnload");
    CHECK(cuModuleUnload(m) == 400, "unloading it twice (CUDA_ERROR_INVALID_HANDLE)");
    CHECK(cuModuleUnload(NULL) == 400, "unloading NULL");
    CHECK(cuModuleLoad(&m, "/nonexistent/npud.ptx") == 301, "a missing file (CUDA_ERROR_FILE_NOT_FOUND)");
    CHECK(cuModuleLoad(NULL, ptx) == 1, "loading into a NULL pointer");
    CHECK(cuModuleLoad(&m, bad) == 200, "a file that is not PTX (CUDA_ERROR_INVALID_IMAGE)");
    unlink(ptx);
    unlink(bad);

    /* A context of the program's own. */
    CHECK(cuCtxCreate_v2(&created, 0, 0) == 0, "cuCtxCreate");
    CHECK(cuCtxGetApiVersion(created, &version) == 0 && version == API_VERSION, "a created context's API version");
    CHECK(cuCtxGetFlags(&flags) == 0 && flags == 0, "a context created with no flags has none");
    CHECK(cuCtxDestroy_v2(created) == 0, "cuCtxDestroy");
    CHECK(cuCtxGetApiVersion(created, &version) == 201, "the API version of a destroyed context");

    /* The last release ends the primary context, and its flags with it. */
    CHECK(cuCtxSetCurrent(primary) == 0 && cuStreamDestroy_v2(s) == 0, "cuStreamDestroy");
    CHECK(cuMemFree_v2(a) == 0 && cuMemFree_v2(b) == 0, "cuMemFree");
    CHECK(cuDevicePrimaryCtxRelease_v2(0) == 0, "release");
    CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active) == 0 && flags == 0 && active == 0,
          "the state after the last release");
    printf("ok\n");
    return 0;
}
