/* Two devices and the peer access between them, as a multi-device program uses them (the
 * aclrtDeviceCanAccessPeer, aclrtDeviceEnablePeerAccess, aclrtDeviceDisablePeerAccess and
 * aclrtDevicePeerAccessStatus pages):
 *
 *   acl_peer STREAMS
 *
 * Checks the refusals (a device as its own peer: ACL_ERROR_INVALID_PARAM; a device it
 * cannot see: ACL_ERROR_RT_INVALID_DEVICEID; flags other than 0:
 * ACL_ERROR_FEATURE_UNSUPPORTED), that access is enabled one way only, from the current
 * device, then sets device 0, makes STREAMS streams there, sets device 1, makes STREAMS
 * there too, copies device 0's buffer into device 1's and reads it back, and disables
 * access again. The ids are the program's (user) ids: under ASCEND_RT_VISIBLE_DEVICES=1,0
 * its device 0 is physical 1. Also checks aclrtGetVersion (1.17.0).
 *
 * Prints "ok peer streams STREAMS" or "fail WHAT", waits for standard input to close,
 * frees everything, prints "done". */
#include <stdio.h>
#include <stdlib.h>

#include "acl_rt.h"
#include "check.h"

#define N 256

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s STREAMS\n", argv[0]);
        return 2;
    }
    int streams = atoi(argv[1]);
    CHECK(aclInit(NULL) == 0, "aclInit");
    int32_t major = 0, minor = 0, patch = -1;
    CHECK(aclrtGetVersion(&major, &minor, &patch) == 0 && major == 1 && minor == 17 && patch == 0, "version");
    CHECK(aclrtGetVersion(&major, NULL, &patch) == 100000, "version with a NULL pointer");
    uint32_t count = 0;
    CHECK(aclrtGetDeviceCount(&count) == 0 && count >= 2, "two devices");

    int32_t can = 0, status = -1;
    CHECK(aclrtDeviceCanAccessPeer(&can, 0, 0) == 100000, "its own peer: ACL_ERROR_INVALID_PARAM");
    CHECK(aclrtDeviceCanAccessPeer(&can, 0, (int32_t)count) == 107001, "unseen: ACL_ERROR_RT_INVALID_DEVICEID");
    CHECK(aclrtDeviceCanAccessPeer(&can, 0, 1) == 0 && can == 1, "aclrtDeviceCanAccessPeer");

    aclrtStream *made = calloc(2 * (size_t)(streams > 0 ? streams : 1), sizeof *made);
    void *buf[2] = {NULL, NULL};
    CHECK(made != NULL, "calloc");
    for (int32_t dev = 0; dev < 2; dev++) {
        int32_t peer = 1 - dev;
        CHECK(aclrtSetDevice(dev) == 0, "aclrtSetDevice");
        CHECK(aclrtDeviceEnablePeerAccess(peer, 1) == 200006, "flags: ACL_ERROR_FEATURE_UNSUPPORTED");
        CHECK(aclrtDeviceEnablePeerAccess(dev, 0) == 100000, "the current device as its peer");
        CHECK(aclrtDevicePeerAccessStatus(dev, peer, &status) == 0 && status == 0, "not yet enabled");
        CHECK(aclrtDeviceEnablePeerAccess(peer, 0) == 0, "aclrtDeviceEnablePeerAccess");
        CHECK(aclrtDevicePeerAccessStatus(dev, peer, &status) == 0 && status == 1, "enabled");
        if (dev == 0) {
            CHECK(aclrtDevicePeerAccessStatus(peer, dev, &status) == 0 && status == 0, "one way only");
        }
        for (int i = 0; i < streams; i++) CHECK(aclrtCreateStream(&made[dev * streams + i]) == 0, "aclrtCreateStream");
        CHECK(aclrtMalloc(&buf[dev], N, ACL_MEM_MALLOC_HUGE_FIRST) == 0, "aclrtMalloc");
        CHECK(aclrtMemset(buf[dev], N, dev == 0 ? 0x3c : 0, N) == 0, "aclrtMemset");
    }
    CHECK(aclrtMemcpy(buf[1], N, buf[0], N, ACL_MEMCPY_DEVICE_TO_DEVICE) == 0, "device 0 to device 1");
    CHECK(holds(buf[1], N, 0x3c), "the copy arrived");
    CHECK(aclrtDeviceDisablePeerAccess(0) == 0, "aclrtDeviceDisablePeerAccess");
    CHECK(aclrtDevicePeerAccessStatus(1, 0, &status) == 0 && status == 0, "disabled");
    printf("ok peer streams %d\n", streams);
    fflush(stdout);

    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    for (int32_t dev = 1; dev >= 0; dev--) {
        CHECK(aclrtSetDevice(dev) == 0, "aclrtSetDevice");
        for (int i = 0; i < streams; i++) CHECK(aclrtDestroyStream(made[dev * streams + i]) == 0, "aclrtDestroyStream");
        CHECK(aclrtFree(buf[dev]) == 0, "aclrtFree");
        CHECK(aclrtResetDevice(dev) == 0 && aclrtResetDevice(dev) == 0, "aclrtResetDevice, once per set");
    }
    free(made);
    CHECK(aclFinalize() == 0, "aclFinalize");
    printf("done\n");
    return 0;
}
