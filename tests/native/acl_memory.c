/* An ordinary AscendCL program as the vendor's samples are written: device and host
 * buffers, copies both ways (one asynchronous on a stream), memsets (one asynchronous), the
 * run mode, and the device's free and total memory (aclrtGetMemInfo), which fall and rise
 * with the program's allocations.
 *
 *   acl_memory
 *
 * Prints "ok" when the data round-trips and the documented argument checks hold, else
 * "fail <what>" (exit 1). */
#include <stddef.h>
#include <stdint.h>
#include "check.h"
#include <stdio.h>
#include <string.h>

typedef int aclError;
typedef void *aclrtStream;
typedef enum { ACL_MEMCPY_HOST_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_DEVICE_TO_DEVICE } aclrtMemcpyKind;
#define ACL_MEM_MALLOC_HUGE_FIRST 0
typedef enum { ACL_DDR_MEM, ACL_HBM_MEM } aclrtMemAttr;

aclError aclInit(const char *);
aclError aclFinalize(void);
aclError aclrtSetDevice(int32_t);
aclError aclrtResetDevice(int32_t);
aclError aclrtGetRunMode(uint32_t *);
aclError aclrtCreateStream(aclrtStream *);
aclError aclrtDestroyStream(aclrtStream);
aclError aclrtSynchronizeStream(aclrtStream);
aclError aclrtMalloc(void **, size_t, int);
aclError aclrtMallocHost(void **, size_t);
aclError aclrtFree(void *);
aclError aclrtFreeHost(void *);
aclError aclrtMemcpy(void *, size_t, const void *, size_t, aclrtMemcpyKind);
aclError aclrtMemcpyAsync(void *, size_t, const void *, size_t, aclrtMemcpyKind, aclrtStream);
aclError aclrtMemset(void *, size_t, int32_t, size_t);
aclError aclrtMemsetAsync(void *, size_t, int32_t, size_t, aclrtStream);
aclError aclrtGetMemInfo(aclrtMemAttr, size_t *, size_t *);
const char *aclGetRecentErrMsg(void);


int main(void) {
    enum { N = 4096 };
    void *dev = NULL, *dev2 = NULL, *host = NULL;
    char back[N];
    aclrtStream s;
    uint32_t mode = 99;
    size_t free0 = 0, total = 0, free1 = 0, total1 = 0, ddr_free = 1, ddr_total = 1;
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtMalloc(&dev, N, ACL_MEM_MALLOC_HUGE_FIRST) == 107002, "no context yet: ACL_ERROR_RT_CONTEXT_NULL");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    CHECK(aclrtGetRunMode(&mode) == 0 && mode == 1, "aclrtGetRunMode: ACL_HOST");
    CHECK(aclrtCreateStream(&s) == 0, "aclrtCreateStream");
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &free0, &total) == 0 && total > 0 && free0 <= total, "aclrtGetMemInfo HBM");
    CHECK(aclrtGetMemInfo(ACL_DDR_MEM, &ddr_free, &ddr_total) == 0 && ddr_free == 0 && ddr_total == 0,
          "aclrtGetMemInfo: a training part has no DDR for programs, both sizes 0");
    CHECK(aclrtGetMemInfo((aclrtMemAttr)99, &free1, &total1) == 100000, "an unknown attribute is ACL_ERROR_INVALID_PARAM");
    CHECK(aclrtMalloc(&dev, N, ACL_MEM_MALLOC_HUGE_FIRST) == 0 && dev, "aclrtMalloc");
    CHECK(aclrtMalloc(&dev2, N, ACL_MEM_MALLOC_HUGE_FIRST) == 0 && dev2, "aclrtMalloc 2");
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total1) == 0 && total1 == total && free1 <= free0 - 2 * N,
          "the free size falls by what was allocated");
    CHECK(aclrtMallocHost(&host, N) == 0 && host, "aclrtMallocHost");
    for (int i = 0; i < N; i++) ((char *)host)[i] = (char)(i * 7);
    CHECK(aclrtMemcpy(dev, N, host, N, ACL_MEMCPY_HOST_TO_DEVICE) == 0, "H2D");
    CHECK(aclrtMemcpy(dev, N / 2, host, N, ACL_MEMCPY_HOST_TO_DEVICE) == 100000, "count > destMax is ACL_ERROR_INVALID_PARAM");
    CHECK(aclrtMemcpyAsync(dev2, N, dev, N, ACL_MEMCPY_DEVICE_TO_DEVICE, s) == 0, "D2D async");
    CHECK(aclrtSynchronizeStream(s) == 0, "sync");
    CHECK(aclrtMemcpy(back, N, dev2, N, ACL_MEMCPY_DEVICE_TO_HOST) == 0, "D2H");
    CHECK(memcmp(back, host, N) == 0, "the data round-trips");
    CHECK(aclrtMemset(dev, N, 0x5a, N) == 0 && aclrtMemcpy(back, N, dev, N, ACL_MEMCPY_DEVICE_TO_HOST) == 0, "memset");
    CHECK(back[0] == 0x5a && back[N - 1] == 0x5a, "memset wrote every byte");
    CHECK(aclrtMemsetAsync(dev, N, 0x33, N / 2, s) == 0 && aclrtSynchronizeStream(s) == 0, "memset async");
    CHECK(aclrtMemsetAsync(dev, N / 2, 0x33, N, s) == 100000, "memset async: count > maxCount is ACL_ERROR_INVALID_PARAM");
    CHECK(aclrtMemcpy(back, N, dev, N, ACL_MEMCPY_DEVICE_TO_HOST) == 0, "D2H after memset async");
    CHECK(back[0] == 0x33 && back[N / 2 - 1] == 0x33 && back[N / 2] == 0x5a, "memset async wrote its count");
    CHECK(aclGetRecentErrMsg() != NULL, "aclGetRecentErrMsg");
    CHECK(aclrtFree(dev) == 0 && aclrtFree(dev2) == 0 && aclrtFreeHost(host) == 0, "free");
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total1) == 0 && free1 == free0, "the free size is back after the frees");
    CHECK(aclrtFree(NULL) == 100000, "aclrtFree(NULL)");
    CHECK(aclrtFree(dev) != 0, "a block freed twice is refused");
    CHECK(aclrtMallocHost(&host, N) == 0 && aclrtFree(host) != 0 && aclrtFreeHost(host) == 0,
          "host memory is freed with aclrtFreeHost, not aclrtFree");
    CHECK(aclrtDestroyStream(s) == 0 && aclrtResetDevice(0) == 0, "teardown");
    CHECK(aclrtResetDevice(0) == 507007, "a device no longer set: ACL_ERROR_RT_CONTEXT_RELEASE_ERROR");
    CHECK(aclFinalize() == 0, "aclFinalize");
    printf("ok\n");
    return 0;
}
