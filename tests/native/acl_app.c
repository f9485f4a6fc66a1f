/* An ordinary AscendCL program with no npud code in it, as a framework process starts:
 * set a device (0 unless DEVICE is given; its default context holds a default stream),
 * create N streams with FAST_LAUNCH|FAST_SYNC, say how it went, hold them, destroy them,
 * reset the device.
 *
 *   acl_app N HOLD_MS [DEVICE [ROUNDS]]     HOLD_MS < 0 holds until standard input closes
 *
 * With ROUNDS > 1 the program then sets the device again, creates and destroys its N
 * streams and resets, ROUNDS - 1 more times (as a process that reinitialises does).
 *
 * Prints "ok N available A" once all N exist (A: aclrtGetStreamAvailableNum), or
 * "fail CODE after K" when creation K+1 failed (the process then exits as a framework
 * start-up does, without cleaning up), followed by " last P/G/A" (aclrtPeekAtLastError,
 * aclrtGetLastError, and aclrtGetLastError again, which the first cleared) where the
 * library has them, and " msg " with the first line of aclGetRecentErrMsg where it says
 * something; then "done" after the teardown.
 * Built as is, it links against libascendcl.so; with -DUSE_DLOPEN it dlopen()s the
 * library RTLD_LOCAL and looks every function up with dlsym(handle, ...), as torch_npu
 * and MindSpore do. With -DWITHOUT_TSD it sets and resets the device with the open
 * runtime's aclrtSetDeviceWithoutTsdVXX and aclrtResetDeviceWithoutTsdVXX (its
 * aclrt/set_device_vxx.h: the same default context and default stream, without the TSD
 * daemon; Ascend 910 parts only, 200001 elsewhere). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int aclError;
typedef void *aclrtStream;
#define ACL_STREAM_FAST_LAUNCH 0x1u
#define ACL_STREAM_FAST_SYNC 0x2u

#ifdef USE_DLOPEN
#include <dlfcn.h>
static aclError (*aclInit)(const char *);
static aclError (*aclFinalize)(void);
static aclError (*aclrtSetDevice)(int32_t);
static aclError (*aclrtResetDevice)(int32_t);
static aclError (*aclrtCreateStreamWithConfig)(aclrtStream *, uint32_t, uint32_t);
static aclError (*aclrtDestroyStream)(aclrtStream);
static aclError (*aclrtGetStreamAvailableNum)(uint32_t *);
static const char *(*aclGetRecentErrMsg)(void);
static aclError (*aclrtPeekAtLastError)(int32_t);
static aclError (*aclrtGetLastError)(int32_t);

static void load(void) {
    const char *path = getenv("ACL_APP_LIBRARY");
    void *h = dlopen(path ? path : "libascendcl.so", RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(3);
    }
    *(void **)&aclInit = dlsym(h, "aclInit");
    *(void **)&aclFinalize = dlsym(h, "aclFinalize");
    *(void **)&aclrtSetDevice = dlsym(h, "aclrtSetDevice");
    *(void **)&aclrtResetDevice = dlsym(h, "aclrtResetDevice");
    *(void **)&aclrtCreateStreamWithConfig = dlsym(h, "aclrtCreateStreamWithConfig");
    *(void **)&aclrtDestroyStream = dlsym(h, "aclrtDestroyStream");
    *(void **)&aclrtGetStreamAvailableNum = dlsym(h, "aclrtGetStreamAvailableNum");
    *(void **)&aclGetRecentErrMsg = dlsym(h, "aclGetRecentErrMsg");
    *(void **)&aclrtPeekAtLastError = dlsym(h, "aclrtPeekAtLastError");
    *(void **)&aclrtGetLastError = dlsym(h, "aclrtGetLastError");
    if (!aclInit || !aclrtSetDevice || !aclrtCreateStreamWithConfig || !aclrtGetStreamAvailableNum) {
        fprintf(stderr, "dlsym: a function is missing\n");
        exit(3);
    }
}
#else
#ifdef WITHOUT_TSD
#define aclrtSetDevice aclrtSetDeviceWithoutTsdVXX
#define aclrtResetDevice aclrtResetDeviceWithoutTsdVXX
#endif
aclError aclInit(const char *);
aclError aclFinalize(void);
aclError aclrtSetDevice(int32_t);
aclError aclrtResetDevice(int32_t);
aclError aclrtCreateStreamWithConfig(aclrtStream *, uint32_t, uint32_t);
aclError aclrtDestroyStream(aclrtStream);
aclError aclrtGetStreamAvailableNum(uint32_t *);
const char *aclGetRecentErrMsg(void);
aclError aclrtPeekAtLastError(int32_t);
aclError aclrtGetLastError(int32_t);
static void load(void) {}
#endif

/* The failure line: the code, how many streams exist, the thread's last error (peeked,
 * read, read again) and its recent error message (its first line), which reading clears. */
static void fail(aclError rc, int after) {
    char last[64] = "";
#ifdef USE_DLOPEN
    const char *msg = aclGetRecentErrMsg ? aclGetRecentErrMsg() : NULL;
    if (aclrtPeekAtLastError && aclrtGetLastError)
#else
    const char *msg = aclGetRecentErrMsg();
#endif
    {
        aclError peek = aclrtPeekAtLastError(0);
        aclError got = aclrtGetLastError(0);
        snprintf(last, sizeof last, " last %d/%d/%d", peek, got, aclrtGetLastError(0));
    }
    int len = 0;
    while (msg && msg[len] != '\0' && msg[len] != '\n') len++;
    if (len > 0)
        printf("fail %d after %d%s msg %.*s\n", rc, after, last, len, msg);
    else
        printf("fail %d after %d%s\n", rc, after, last);
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: %s STREAMS HOLD_MS [DEVICE [ROUNDS]]\n", argv[0]);
        return 2;
    }
    int rounds = argc == 5 ? atoi(argv[4]) : 1;
    int n = atoi(argv[1]);
    int hold_ms = atoi(argv[2]);
    int device = argc >= 4 ? atoi(argv[3]) : 0;
    aclrtStream *streams = calloc(n > 0 ? n : 1, sizeof(aclrtStream));
    load();
    aclError rc = aclInit(NULL);
    if (rc == 0) rc = aclrtSetDevice(device);
    if (rc != 0) {
        fail(rc, 0);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        rc = aclrtCreateStreamWithConfig(&streams[i], 0, ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC);
        if (rc != 0) {
            fail(rc, i);
            return 1;
        }
    }
    uint32_t available = 0;
    rc = aclrtGetStreamAvailableNum(&available);
    printf("ok %d available %u\n", n, rc == 0 ? available : 0);
    fflush(stdout);
    if (hold_ms < 0) {
        char buf[64];
        while (read(0, buf, sizeof buf) > 0) {
        }
    } else {
        usleep((useconds_t)hold_ms * 1000);
    }
    for (int i = 0; i < n; i++) aclrtDestroyStream(streams[i]);
    aclrtResetDevice(device);
    for (int r = 1; r < rounds; r++) {
        rc = aclrtSetDevice(device);
        for (int i = 0; rc == 0 && i < n; i++) {
            rc = aclrtCreateStreamWithConfig(&streams[i], 0, ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC);
            if (rc != 0) {
                fail(rc, i);
                return 1;
            }
        }
        if (rc != 0) {
            fail(rc, 0);
            return 1;
        }
        for (int i = 0; i < n; i++) aclrtDestroyStream(streams[i]);
        aclrtResetDevice(device);
    }
    aclFinalize();
    printf("done\n");
    return 0;
}
