/* An ordinary AscendCL program that makes events, as an inference server's start-up does:
 * set device 0, create N events (the "Ex" call for odd ones, as torch_npu prefers it),
 * say how it went, hold them until standard input closes, destroy them, reset the device.
 *
 *   acl_events N
 *
 * Prints "ok N available A" once all N exist and aclrtQueryEventWaitStatus calls an
 * unrecorded event's waits complete (A: aclrtGetEventAvailNum), or
 * "fail CODE after K" when creation K+1 failed (the process then exits without cleaning
 * up, as a failed start-up does), then "done" after the teardown. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int aclError;
typedef void *aclrtEvent;
#define ACL_EVENT_SYNC 0x1u

aclError aclInit(const char *);
aclError aclFinalize(void);
aclError aclrtSetDevice(int32_t);
aclError aclrtResetDevice(int32_t);
aclError aclrtCreateEventWithFlag(aclrtEvent *, uint32_t);
aclError aclrtCreateEventExWithFlag(aclrtEvent *, uint32_t);
aclError aclrtDestroyEvent(aclrtEvent);
aclError aclrtGetEventAvailNum(uint32_t *);
aclError aclrtQueryEventWaitStatus(aclrtEvent, uint32_t *);

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s EVENTS\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]);
    aclrtEvent *events = calloc(n > 0 ? n : 1, sizeof(aclrtEvent));
    aclError rc = aclInit(NULL);
    if (rc == 0) rc = aclrtSetDevice(0);
    if (rc != 0) {
        printf("fail %d after 0\n", rc);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        rc = (i % 2) ? aclrtCreateEventExWithFlag(&events[i], ACL_EVENT_SYNC)
                     : aclrtCreateEventWithFlag(&events[i], ACL_EVENT_SYNC);
        if (rc != 0) {
            printf("fail %d after %d\n", rc, i);
            fflush(stdout);
            return 1;
        }
    }
    /* A never-recorded event: stream waits on it end at once (ACL_EVENT_WAIT_STATUS_COMPLETE). */
    uint32_t wait_status = 9;
    if (n > 0 && (aclrtQueryEventWaitStatus(events[0], &wait_status) != 0 || wait_status != 0)) {
        printf("fail %d after %d\n", 1, n);
        return 1;
    }
    uint32_t available = 0;
    rc = aclrtGetEventAvailNum(&available);
    printf("ok %d available %u\n", n, rc == 0 ? available : 0);
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    for (int i = 0; i < n; i++) aclrtDestroyEvent(events[i]);
    aclrtResetDevice(0);
    aclFinalize();
    printf("done\n");
    return 0;
}
