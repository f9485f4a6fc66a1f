/* Graphs synchronised with streams outside them, and with each other, through events with
 * the EXTERNAL flags (the Event management pages: aclrtRecordEventWithFlag,
 * aclrtStreamWaitEventWithFlag, aclrtCreateEventExWithFlag):
 *
 *   acl_capture_external ROUNDS
 *
 * 1. A graph that waits (ACL_EVENT_WAIT_EXTERNAL) for an event an outside stream records
 *    after the capture, then copies its input to its output: executed after the host
 *    writes the input and the outside stream records, it copies what the host wrote.
 * 2. A graph that copies, then records an event (ACL_EVENT_RECORD_EXTERNAL): an outside
 *    stream that waits on the event after the execution copies the graph's output back.
 * 3. Graph A copies and records externally; graph B waits on that event externally and
 *    copies A's output on: executed ROUNDS times, each with a new input, B's output is
 *    the input each time.
 * Then what the runtime refuses, each with its code: a stream not in capture (107029,
 * ACL_ERROR_RT_STREAM_NOT_CAPTURED); an external wait with a timeout, an unknown flag and
 * a NULL event (100000, ACL_ERROR_INVALID_PARAM); in one graph an event recorded
 * externally twice, recorded and waited on externally, or waited on externally twice;
 * an event recorded the ordinary way, then externally; and an event whose first record
 * with a flag was EXTERNAL (refused, outside a capture) recorded with the default flag
 * (all 107000, ACL_ERROR_RT_PARAM_INVALID). The refusals leave the capture going: it ends.
 * An event recorded inside a capture may still be recorded externally in a later one.
 *
 * The four models of 1-3 are kept: prints "ok external streams S" (S: the streams they
 * hold, by aclmdlRIGetStreams) or "fail WHAT", waits for standard input to close,
 * destroys everything, prints "done". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl_rt.h"
#include "check.h"

#define N 8
#define NOT_CAPTURED 107029
#define RT_PARAM_INVALID 107000
#define INVALID_PARAM 100000

static int32_t g_in[N] = {3, 1, 4, 1, 5, 9, 2, 6};

static int same(const int32_t *a, const int32_t *b) {
    return memcmp(a, b, sizeof(int32_t) * N) == 0;
}

static uint32_t streams_of(aclmdlRI model) {
    uint32_t n = 0;
    return aclmdlRIGetStreams(model, NULL, &n) == 0 ? n : UINT32_MAX;
}

int main(int argc, char **argv) {
    const size_t size = sizeof g_in;
    int rounds = argc > 1 ? atoi(argv[1]) : 0;
    if (rounds < 1) {
        fprintf(stderr, "usage: %s ROUNDS (1 or more)\n", argv[0]);
        return 2;
    }
    int32_t back[N];
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    aclrtStream graph = NULL, outside = NULL, graph2 = NULL;
    CHECK(aclrtCreateStream(&graph) == 0 && aclrtCreateStream(&outside) == 0 && aclrtCreateStream(&graph2) == 0,
          "aclrtCreateStream");
    void *src = NULL, *mid = NULL, *dst = NULL;
    CHECK(aclrtMalloc(&src, size, ACL_MEM_MALLOC_HUGE_FIRST) == 0 && aclrtMalloc(&mid, size, 0) == 0 &&
              aclrtMalloc(&dst, size, 0) == 0,
          "aclrtMalloc");
    aclrtEvent ev[3];
    for (int i = 0; i < 3; i++) CHECK(aclrtCreateEventExWithFlag(&ev[i], ACL_EVENT_SYNC) == 0, "aclrtCreateEventExWithFlag");
    aclmdlRI waits = NULL, records = NULL, a = NULL, b = NULL;

    /* 1: the graph waits on an outside record. */
    CHECK(aclmdlRICaptureBegin(graph, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == 0, "begin 1");
    CHECK(aclrtStreamWaitEventWithFlag(graph, ev[0], 0, ACL_EVENT_WAIT_EXTERNAL) == 0, "external wait");
    CHECK(aclrtMemcpyAsync(dst, size, src, size, ACL_MEMCPY_DEVICE_TO_DEVICE, graph) == 0, "captured copy 1");
    CHECK(aclmdlRICaptureEnd(graph, &waits) == 0, "end 1");
    CHECK(aclrtMemcpy(src, size, g_in, size, ACL_MEMCPY_HOST_TO_DEVICE) == 0, "input 1");
    CHECK(aclrtRecordEvent(ev[0], outside) == 0, "the outside record");
    CHECK(aclmdlRIExecuteAsync(waits, graph) == 0 && aclrtSynchronizeStream(graph) == 0, "execute 1");
    CHECK(aclrtMemcpy(back, size, dst, size, ACL_MEMCPY_DEVICE_TO_HOST) == 0 && same(back, g_in), "output 1");

    /* 2: the graph records for an outside wait. */
    CHECK(aclrtMemset(dst, size, 0, size) == 0, "clear");
    CHECK(aclmdlRICaptureBegin(graph, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == 0, "begin 2");
    CHECK(aclrtMemcpyAsync(dst, size, src, size, ACL_MEMCPY_DEVICE_TO_DEVICE, graph) == 0, "captured copy 2");
    CHECK(aclrtRecordEventWithFlag(ev[1], graph, ACL_EVENT_RECORD_EXTERNAL) == 0, "external record");
    CHECK(aclmdlRICaptureEnd(graph, &records) == 0, "end 2");
    CHECK(aclmdlRIExecuteAsync(records, graph) == 0, "execute 2");
    memset(back, 0, size);
    CHECK(aclrtStreamWaitEvent(outside, ev[1]) == 0, "the outside wait");
    CHECK(aclrtMemcpyAsync(back, size, dst, size, ACL_MEMCPY_DEVICE_TO_HOST, outside) == 0, "copy back 2");
    CHECK(aclrtSynchronizeStream(outside) == 0 && same(back, g_in), "output 2");
    uint32_t status = 0;
    CHECK(aclrtQueryEventStatus(ev[1], &status) == 0 && status == ACL_EVENT_RECORDED_STATUS_COMPLETE,
          "the graph's record is complete");

    /* 3: graph to graph. */
    CHECK(aclmdlRICaptureBegin(graph, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == 0, "begin A");
    CHECK(aclrtMemcpyAsync(mid, size, src, size, ACL_MEMCPY_DEVICE_TO_DEVICE, graph) == 0, "captured copy A");
    CHECK(aclrtRecordEventWithFlag(ev[2], graph, ACL_EVENT_RECORD_EXTERNAL) == 0, "A records");
    CHECK(aclmdlRICaptureEnd(graph, &a) == 0, "end A");
    CHECK(aclmdlRICaptureBegin(graph2, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == 0, "begin B");
    CHECK(aclrtStreamWaitEventWithFlag(graph2, ev[2], 0, ACL_EVENT_WAIT_EXTERNAL) == 0, "B waits");
    CHECK(aclrtMemcpyAsync(dst, size, mid, size, ACL_MEMCPY_DEVICE_TO_DEVICE, graph2) == 0, "captured copy B");
    CHECK(aclmdlRICaptureEnd(graph2, &b) == 0, "end B");
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < N; i++) g_in[i] += r;
        CHECK(aclrtMemcpy(src, size, g_in, size, ACL_MEMCPY_HOST_TO_DEVICE) == 0, "input 3");
        CHECK(aclrtMemset(dst, size, 0, size) == 0 && aclrtMemset(mid, size, 0, size) == 0, "clear 3");
        CHECK(aclmdlRIExecuteAsync(a, graph) == 0 && aclmdlRIExecuteAsync(b, graph2) == 0, "execute A and B");
        CHECK(aclrtSynchronizeStream(graph2) == 0 && aclrtSynchronizeStream(graph) == 0, "synchronize 3");
        CHECK(aclrtMemcpy(back, size, dst, size, ACL_MEMCPY_DEVICE_TO_HOST) == 0 && same(back, g_in), "output 3");
    }

    /* What is refused. */
    aclrtEvent e[6];
    for (int i = 0; i < 6; i++) CHECK(aclrtCreateEventExWithFlag(&e[i], ACL_EVENT_SYNC) == 0, "more events");
    CHECK(aclrtRecordEventWithFlag(e[0], outside, ACL_EVENT_RECORD_EXTERNAL) == NOT_CAPTURED, "record outside a capture");
    CHECK(aclrtStreamWaitEventWithFlag(outside, e[1], 0, ACL_EVENT_WAIT_EXTERNAL) == NOT_CAPTURED,
          "wait outside a capture");
    CHECK(aclrtRecordEventWithFlag(e[0], outside, ACL_EVENT_RECORD_DEFAULT) == RT_PARAM_INVALID,
          "records keep the flag of the first, refused, record");
    CHECK(aclrtRecordEvent(e[3], outside) == 0, "an ordinary record");
    aclmdlRI refused = NULL;
    CHECK(aclmdlRICaptureBegin(graph, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == 0, "begin refusals");
    CHECK(aclrtStreamWaitEventWithFlag(graph, e[2], 5, ACL_EVENT_WAIT_EXTERNAL) == INVALID_PARAM, "a timeout");
    CHECK(aclrtRecordEventWithFlag(e[2], graph, 2) == INVALID_PARAM, "record flag 2");
    CHECK(aclrtStreamWaitEventWithFlag(graph, e[2], 0, 2) == INVALID_PARAM, "wait flag 2");
    CHECK(aclrtRecordEventWithFlag(NULL, graph, ACL_EVENT_RECORD_EXTERNAL) == INVALID_PARAM, "a NULL event");
    CHECK(aclrtRecordEventWithFlag(e[2], graph, ACL_EVENT_RECORD_EXTERNAL) == 0, "record e2");
    CHECK(aclrtRecordEventWithFlag(e[2], graph, ACL_EVENT_RECORD_EXTERNAL) == RT_PARAM_INVALID, "e2 twice");
    CHECK(aclrtStreamWaitEventWithFlag(graph, e[2], 0, ACL_EVENT_WAIT_EXTERNAL) == RT_PARAM_INVALID,
          "e2 recorded and waited on");
    CHECK(aclrtStreamWaitEventWithFlag(graph, e[4], 0, ACL_EVENT_WAIT_EXTERNAL) == 0, "wait e4");
    CHECK(aclrtStreamWaitEventWithFlag(graph, e[4], 0, ACL_EVENT_WAIT_EXTERNAL) == RT_PARAM_INVALID, "e4 twice");
    CHECK(aclrtRecordEventWithFlag(e[3], graph, ACL_EVENT_RECORD_EXTERNAL) == RT_PARAM_INVALID,
          "e3 recorded the ordinary way first");
    CHECK(aclmdlRICaptureEnd(graph, &refused) == 0, "the capture ends after its refusals");
    CHECK(aclmdlRIDestroy(refused) == 0, "destroy the refusals' model");
    /* A record made in a capture records the capture's event, not this one: it does not
     * stand in the way of a later external use. */
    aclmdlRI recorded = NULL;
    CHECK(aclmdlRICaptureBegin(graph, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == 0, "begin a captured record");
    CHECK(aclrtRecordEvent(e[5], graph) == 0, "a record in a capture");
    CHECK(aclmdlRICaptureEnd(graph, &recorded) == 0 && aclmdlRIDestroy(recorded) == 0, "end it");
    CHECK(aclmdlRICaptureBegin(graph, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == 0, "begin again");
    CHECK(aclrtRecordEventWithFlag(e[5], graph, ACL_EVENT_RECORD_EXTERNAL) == 0, "then an external record");
    CHECK(aclmdlRICaptureEnd(graph, &recorded) == 0 && aclmdlRIDestroy(recorded) == 0, "end that");

    printf("ok external streams %u\n", streams_of(waits) + streams_of(records) + streams_of(a) + streams_of(b));
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    CHECK(aclmdlRIDestroy(waits) == 0 && aclmdlRIDestroy(records) == 0 && aclmdlRIDestroy(a) == 0 &&
              aclmdlRIDestroy(b) == 0,
          "aclmdlRIDestroy");
    for (int i = 0; i < 6; i++) CHECK(aclrtDestroyEvent(e[i]) == 0, "destroy events");
    for (int i = 0; i < 3; i++) CHECK(aclrtDestroyEvent(ev[i]) == 0, "destroy the scenarios' events");
    CHECK(aclrtFree(src) == 0 && aclrtFree(mid) == 0 && aclrtFree(dst) == 0, "aclrtFree");
    CHECK(aclrtDestroyStream(graph) == 0 && aclrtDestroyStream(outside) == 0 && aclrtDestroyStream(graph2) == 0,
          "aclrtDestroyStream");
    CHECK(aclrtResetDevice(0) == 0 && aclFinalize() == 0, "teardown");
    printf("done\n");
    return 0;
}
