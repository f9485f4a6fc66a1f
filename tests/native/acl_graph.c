/* An ordinary AscendCL program that captures a graph once and replays it with new inputs,
 * which is what graphs are for (torch_npu's NPUGraph, vLLM-Ascend's graph mode): set device
 * 0, make a stream, capture a memset (a scratch buffer, aclrtMemsetAsync) and a copy
 * (input -> output, aclrtMemcpyAsync) on it, then
 * ROUNDS times write a new input and execute the model, alternately with
 * aclmdlRIExecuteAsync + aclrtSynchronizeStream and with aclmdlRIExecute. Within the capture
 * it swaps its thread's capture mode and back (aclmdlRICaptureThreadExchangeMode).
 *
 *   acl_graph ROUNDS
 *
 * The vendor (aclmdlRICaptureBegin): work issued to a stream in capture is kept in the
 * model, not run. So the output is checked after the capture (untouched) and after each
 * replay (that round's input), and the scratch buffer, cleared before each replay, holds
 * the captured memset's byte after it. Within the capture it also checks what a stream in
 * capture cannot do (the runtime's capture checks: synchronize, query, destroy, capture
 * again; a host wait on an event recorded there), and that ending a capture that never
 * began is refused. Prints "ok ROUNDS streams S" (S from aclmdlRIGetStreams)
 * or "fail WHAT", waits for standard input to close, destroys everything, prints "done". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "acl_rt.h"
#include "check.h"

#define N 4096

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s ROUNDS\n", argv[0]);
        return 2;
    }
    int rounds = atoi(argv[1]);
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    aclrtStream stream = NULL;
    CHECK(aclrtCreateStream(&stream) == 0, "aclrtCreateStream");
    void *in = NULL, *out = NULL, *scratch = NULL;
    CHECK(aclrtMalloc(&in, N, ACL_MEM_MALLOC_HUGE_FIRST) == 0, "aclrtMalloc");
    CHECK(aclrtMalloc(&out, N, ACL_MEM_MALLOC_HUGE_FIRST) == 0, "aclrtMalloc");
    CHECK(aclrtMalloc(&scratch, N, ACL_MEM_MALLOC_HUGE_FIRST) == 0, "aclrtMalloc");
    CHECK(aclrtMemset(in, N, 0x5a, N) == 0 && aclrtMemset(out, N, 0, N) == 0, "aclrtMemset");
    CHECK(aclrtMemset(scratch, N, 0, N) == 0, "aclrtMemset");

    aclmdlRI model = NULL;
    aclrtEvent event = NULL;
    uint32_t status = 9;
    CHECK(aclrtCreateEventExWithFlag(&event, ACL_EVENT_SYNC) == 0, "aclrtCreateEventExWithFlag");
    CHECK(aclmdlRICaptureEnd(stream, &model) == 107029, "no capture to end: ACL_ERROR_RT_STREAM_NOT_CAPTURED");
    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0, "aclmdlRICaptureBegin");
    CHECK(aclrtMemsetAsync(scratch, N, 0xee, N, stream) == 0, "aclrtMemsetAsync");
    CHECK(aclrtMemcpyAsync(out, N, in, N, ACL_MEMCPY_DEVICE_TO_DEVICE, stream) == 0, "aclrtMemcpyAsync");
    /* ACL_ERROR_RT_STREAM_CAPTURED and ACL_ERROR_RT_EVENT_CAPTURED. */
    CHECK(aclrtSynchronizeStream(stream) == 107027, "in-capture-sync");
    CHECK(aclrtStreamQuery(stream, &status) == 107027, "in-capture-query");
    CHECK(aclrtDestroyStream(stream) == 107027, "in-capture-destroy");
    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 107027, "in-capture-begin-again");
    CHECK(aclrtRecordEvent(event, stream) == 0 && aclrtSynchronizeEvent(event) == 107028, "in-capture-event-sync");
    /* The thread's mode is swapped and swapped back, as torch_npu does around calls the
     * capture must not see. A thread starts in GLOBAL. */
    uint32_t mode = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;
    CHECK(aclmdlRICaptureThreadExchangeMode(&mode) == 0 && mode == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL, "exchange-mode");
    CHECK(aclmdlRICaptureThreadExchangeMode(&mode) == 0 && mode == ACL_MODEL_RI_CAPTURE_MODE_RELAXED, "exchange-back");
    CHECK(aclmdlRICaptureEnd(stream, &model) == 0, "aclmdlRICaptureEnd");
    CHECK(holds(out, N, 0) && holds(scratch, N, 0), "captured-work-ran-before-execute");
    CHECK(aclrtSynchronizeEvent(event) == 0 && aclrtDestroyEvent(event) == 0, "the event once the capture ended");

    const char *failed = replay(model, stream, in, out, scratch, NULL, N, rounds);
    CHECK(failed == NULL, failed);
    uint32_t streams = 0;
    CHECK(aclmdlRIGetStreams(model, NULL, &streams) == 0, "aclmdlRIGetStreams");
    printf("ok %d streams %u\n", rounds, streams);
    fflush(stdout);

    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    CHECK(aclmdlRIDestroy(model) == 0, "aclmdlRIDestroy");
    CHECK(aclrtFree(in) == 0 && aclrtFree(out) == 0 && aclrtFree(scratch) == 0, "aclrtFree");
    CHECK(aclrtDestroyStream(stream) == 0, "aclrtDestroyStream");
    CHECK(aclrtResetDevice(0) == 0, "aclrtResetDevice");
    CHECK(aclFinalize() == 0, "aclFinalize");
    printf("done\n");
    return 0;
}
