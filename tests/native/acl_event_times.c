/* Events' ids, completion times and timed waits (the aclrtGetEventId,
 * aclrtEventGetTimestamp and aclrtStreamWaitEventWithTimeout pages):
 *
 *   acl_event_times STREAMS
 *
 * Records two events (aclrtCreateEvent's, which are timed) on one stream and reads when
 * each completed: the second no earlier than the first, their difference what
 * aclrtEventElapsedTime says (to the microsecond), and no time for an event never
 * recorded; the two ids differ. Then STREAMS more streams each wait on the first event
 * with a timeout of 5 s (a negative timeout is ACL_ERROR_RT_PARAM_INVALID) and are
 * synchronized.
 *
 * Prints "ok times streams STREAMS" or "fail WHAT", waits for standard input to close,
 * frees everything, prints "done". */
#include <stdio.h>
#include <stdlib.h>

#include "acl_rt.h"
#include "check.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s STREAMS\n", argv[0]);
        return 2;
    }
    int streams = atoi(argv[1]);
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    aclrtStream stream = NULL;
    aclrtEvent first = NULL, second = NULL, never = NULL;
    CHECK(aclrtCreateStream(&stream) == 0, "aclrtCreateStream");
    CHECK(aclrtCreateEvent(&first) == 0 && aclrtCreateEvent(&second) == 0, "aclrtCreateEvent");
    CHECK(aclrtCreateEvent(&never) == 0, "aclrtCreateEvent");

    uint32_t id_first = 0, id_second = 0;
    CHECK(aclrtGetEventId(first, &id_first) == 0 && aclrtGetEventId(second, &id_second) == 0, "aclrtGetEventId");
    CHECK(id_first != id_second, "two events, two ids");
    CHECK(aclrtGetEventId(first, NULL) == 100000, "a NULL id: ACL_ERROR_INVALID_PARAM");

    uint64_t at_first = 0, at_second = 0;
    CHECK(aclrtRecordEvent(first, stream) == 0, "aclrtRecordEvent");
    CHECK(aclrtRecordEvent(second, stream) == 0, "aclrtRecordEvent");
    CHECK(aclrtSynchronizeStream(stream) == 0, "aclrtSynchronizeStream");
    CHECK(aclrtEventGetTimestamp(first, &at_first) == 0, "aclrtEventGetTimestamp");
    CHECK(aclrtEventGetTimestamp(second, &at_second) == 0, "aclrtEventGetTimestamp");
    CHECK(at_second >= at_first, "the second completed no earlier");
    float ms = -1.0f;
    CHECK(aclrtEventElapsedTime(&ms, first, second) == 0, "aclrtEventElapsedTime");
    double apart = (double)(at_second - at_first) / 1000.0;
    CHECK(apart - (double)ms < 0.002 && (double)ms - apart < 0.002, "the timestamps agree with the elapsed time");
    CHECK(aclrtEventGetTimestamp(never, &at_first) != 0, "an event never recorded has no time");
    CHECK(aclrtEventGetTimestamp(first, NULL) == 100000, "a NULL timestamp: ACL_ERROR_INVALID_PARAM");

    aclrtStream *waiting = calloc(streams > 0 ? (size_t)streams : 1, sizeof *waiting);
    CHECK(waiting != NULL, "calloc");
    for (int i = 0; i < streams; i++) {
        CHECK(aclrtCreateStream(&waiting[i]) == 0, "aclrtCreateStream");
        CHECK(aclrtStreamWaitEventWithTimeout(waiting[i], first, -1) == 107000, "ACL_ERROR_RT_PARAM_INVALID");
        CHECK(aclrtStreamWaitEventWithTimeout(waiting[i], first, 5) == 0, "aclrtStreamWaitEventWithTimeout");
        CHECK(aclrtSynchronizeStream(waiting[i]) == 0, "aclrtSynchronizeStream");
    }
    printf("ok times streams %d\n", streams);
    fflush(stdout);

    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    for (int i = 0; i < streams; i++) CHECK(aclrtDestroyStream(waiting[i]) == 0, "aclrtDestroyStream");
    free(waiting);
    CHECK(aclrtDestroyEvent(first) == 0 && aclrtDestroyEvent(second) == 0, "aclrtDestroyEvent");
    CHECK(aclrtDestroyEvent(never) == 0, "aclrtDestroyEvent");
    CHECK(aclrtDestroyStream(stream) == 0, "aclrtDestroyStream");
    CHECK(aclrtResetDevice(0) == 0, "aclrtResetDevice");
    CHECK(aclFinalize() == 0, "aclFinalize");
    printf("done\n");
    return 0;
}
