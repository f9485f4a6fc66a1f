/* An ordinary AscendCL program as the vendor's samples are written: device and host
 * buffers, copies both ways (one asynchronous on a stream), a memset, the run mode.
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
const char *aclGetRecentErrMsg(void);


int main(void) {
    enum { N = 4096 };
    void *dev = NULL, *dev2 = NULL, *host = NULL;
    char back[N];
    aclrtStream s;
    uint32_t mode = 99;
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtMalloc(&dev, N, ACL_MEM_MALLOC_HUGE_FIRST) == 107002, "no context yet: ACL_ERROR_RT_CONTEXT_NULL");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    CHECK(aclrtGetRunMode(&mode) == 0 && mode == 1, "aclrtGetRunMode: ACL_HOST");
    CHECK(aclrtCreateStream(&s) == 0, "aclrtCreateStream");
    CHECK(aclrtMalloc(&dev, N, ACL_MEM_MALLOC_HUGE_FIRST) == 0 && dev, "aclrtMalloc");
    CHECK(aclrtMalloc(&dev2, N, ACL_MEM_MALLOC_HUGE_FIRST) == 0 && dev2, "aclrtMalloc 2");
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
    CHECK(aclGetRecentErrMsg() != NULL, "aclGetRecentErrMsg");
    CHECK(aclrtFree(dev) == 0 && aclrtFree(dev2) == 0 && aclrtFreeHost(host) == 0, "free");
    CHECK(aclrtFree(NULL) == 100000, "aclrtFree(NULL)");
    CHECK(aclrtDestroyStream(s) == 0 && aclrtResetDevice(0) == 0 && aclFinalize() == 0, "teardown");
    printf("ok\n");
    return 0;
}
