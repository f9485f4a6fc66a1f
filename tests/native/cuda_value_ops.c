/* Streams synchronised through memory with the CUDA driver's stream memory operations
 * (cuStreamWaitValue32/64, cuStreamWriteValue32/64, CUDA 12's _v2 entry points), as a
 * program with no npud code in it uses them. The answers expected are an H100's (driver
 * 580.159.04, 2026-11-27); fake-cuda gives the same, and scripts/gpu-check.sh runs this on
 * a GPU too.
 *
 *   cuda_value_ops
 *
 * A stream waiting for a value (CU_STREAM_WAIT_VALUE_EQ 42) holds its later work (a host
 * function) while another stream writes 41 and lets it run once that stream writes 42;
 * waits already met (GEQ, AND, NOR, a 64-bit EQ) hold nothing; values written read back,
 * in device memory and in page-locked host memory. Then the driver's refusals, all
 * CUDA_ERROR_INVALID_VALUE (1): an address not aligned to the value's size, NULL, memory
 * the driver does not know (a stack address), an unknown wait or write flag, and a write
 * flag other than 0; CU_STREAM_WAIT_VALUE_FLUSH and the pre-12 entry points (the H100
 * reports no CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1) are CUDA_ERROR_NOT_SUPPORTED
 * (801). Prints "ok", or "fail WHAT" (exit 1). */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "check.h"

typedef unsigned int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuDevicePrimaryCtxRelease_v2(int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamQuery(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuLaunchHostFunc(CUstream, void (*)(void *), void *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocHost_v2(void **, size_t);
CUresult cuMemFreeHost(void *);
CUresult cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuStreamWaitValue32_v2(CUstream, CUdeviceptr, uint32_t, unsigned);
CUresult cuStreamWaitValue64_v2(CUstream, CUdeviceptr, uint64_t, unsigned);
CUresult cuStreamWriteValue32_v2(CUstream, CUdeviceptr, uint32_t, unsigned);
CUresult cuStreamWriteValue64_v2(CUstream, CUdeviceptr, uint64_t, unsigned);
CUresult cuStreamWaitValue32(CUstream, CUdeviceptr, uint32_t, unsigned);
CUresult cuStreamWriteValue32(CUstream, CUdeviceptr, uint32_t, unsigned);

#define GEQ 0x0u
#define EQ 0x1u
#define AND 0x2u
#define NOR 0x3u
#define FLUSH (1u << 30)
#define NOT_READY 600u
#define NOT_SUPPORTED 801u

static volatile int g_ran;

static void mark(void *unused) {
    (void)unused;
    g_ran = 1;
}

int main(void) {
    CUcontext ctx = NULL;
    CUstream a = NULL, b = NULL;
    CUdeviceptr d = 0;
    void *host = NULL;
    uint32_t words[4] = {0};
    uint32_t local = 0;
    CHECK(cuStreamWaitValue32_v2(NULL, 0, 0, 0) == 3, "a wait before cuInit");
    CHECK(cuInit(0) == 0 && cuDevicePrimaryCtxRetain(&ctx, 0) == 0 && cuCtxSetCurrent(ctx) == 0, "a context");
    CHECK(cuStreamCreate(&a, 0) == 0 && cuStreamCreate(&b, 0) == 0, "cuStreamCreate");
    CHECK(cuMemAlloc_v2(&d, 64) == 0 && cuMemsetD8_v2(d, 0, 64) == 0, "device memory");
    CHECK(cuMemAllocHost_v2(&host, 64) == 0, "page-locked host memory");

    CHECK(cuStreamWaitValue32_v2(a, d, 42, EQ) == 0, "a wait for 42");
    CHECK(cuLaunchHostFunc(a, mark, NULL) == 0, "a host function behind it");
    usleep(50000);
    CHECK(cuStreamQuery(a) == NOT_READY && !g_ran, "the wait holds the stream");
    CHECK(cuStreamWriteValue32_v2(b, d, 41, 0) == 0 && cuStreamSynchronize(b) == 0, "writing 41");
    usleep(50000);
    CHECK(cuStreamQuery(a) == NOT_READY && !g_ran, "41 is not 42: still held");
    CHECK(cuStreamWriteValue32_v2(b, d, 42, 0) == 0 && cuStreamSynchronize(b) == 0, "writing 42");
    CHECK(cuStreamSynchronize(a) == 0, "42 lets the stream go on");
    CHECK(g_ran, "the host function ran");

    CHECK(cuStreamWriteValue64_v2(b, d + 8, 0x1122334455667788ull, 0) == 0 && cuStreamSynchronize(b) == 0,
          "a 64-bit write");
    CHECK(cuMemcpyDtoH_v2(words, d, sizeof words) == 0 && words[0] == 42 && words[2] == 0x55667788u &&
              words[3] == 0x11223344u,
          "the values written read back");
    CHECK(cuStreamWaitValue64_v2(a, d + 8, 0x1122334455667788ull, EQ) == 0, "a 64-bit wait already met");
    CHECK(cuStreamWaitValue32_v2(a, d, 40, GEQ) == 0, "GEQ 40");
    CHECK(cuStreamWaitValue32_v2(a, d, 2, AND) == 0, "AND 2");
    CHECK(cuStreamWaitValue32_v2(a, d, 0, NOR) == 0, "NOR 0");
    CHECK(cuStreamSynchronize(a) == 0, "waits already met hold nothing");
    CHECK(cuStreamWriteValue32_v2(a, (CUdeviceptr)host, 7, 0) == 0 && cuStreamSynchronize(a) == 0 &&
              *(volatile uint32_t *)host == 7,
          "a write to page-locked host memory");
    CHECK(cuStreamWaitValue32_v2(a, (CUdeviceptr)host, 7, EQ) == 0 && cuStreamSynchronize(a) == 0,
          "a wait on page-locked host memory");

    CHECK(cuStreamWaitValue32_v2(a, d + 1, 0, GEQ) == 1, "a 32-bit wait not 4-aligned");
    CHECK(cuStreamWriteValue32_v2(a, d + 2, 0, 0) == 1, "a 32-bit write not 4-aligned");
    CHECK(cuStreamWaitValue64_v2(a, d + 4, 0, GEQ) == 1, "a 64-bit wait not 8-aligned");
    CHECK(cuStreamWriteValue64_v2(a, d + 4, 0, 0) == 1, "a 64-bit write not 8-aligned");
    CHECK(cuStreamWaitValue32_v2(a, 0, 0, GEQ) == 1 && cuStreamWriteValue32_v2(a, 0, 0, 0) == 1, "NULL");
    CHECK(cuStreamWaitValue32_v2(a, (CUdeviceptr)&local, 0, GEQ) == 1, "a wait on the stack");
    CHECK(cuStreamWriteValue32_v2(a, (CUdeviceptr)&local, 0, 0) == 1, "a write to the stack");
    CHECK(cuStreamWaitValue32_v2(a, d, 0, 4) == 1 && cuStreamWaitValue32_v2(a, d, 0, 7) == 1, "unknown wait flags");
    CHECK(cuStreamWriteValue32_v2(a, d, 0, 1) == 1 && cuStreamWriteValue32_v2(a, d, 0, 2) == 1, "write flags");
    CHECK(cuStreamWaitValue32_v2(a, d, 0, FLUSH) == NOT_SUPPORTED, "CU_STREAM_WAIT_VALUE_FLUSH");
    CHECK(cuStreamWaitValue32(a, d, 42, EQ) == NOT_SUPPORTED, "the pre-12 wait");
    CHECK(cuStreamWriteValue32(a, d, 42, 0) == NOT_SUPPORTED, "the pre-12 write");
    CHECK(cuStreamSynchronize(a) == 0, "nothing refused was issued");

    CHECK(cuMemFreeHost(host) == 0 && cuMemFree_v2(d) == 0, "free");
    CHECK(cuStreamDestroy_v2(a) == 0 && cuStreamDestroy_v2(b) == 0, "cuStreamDestroy");
    CHECK(cuDevicePrimaryCtxRelease_v2(0) == 0, "release");
    printf("ok\n");
    return 0;
}
