/* An ordinary AscendCL program that builds a model by hand instead of capturing one
 * (aclmdlRIBuildBegin): persistent streams (aclrtCreateStreamWithConfig with
 * ACL_STREAM_PERSISTENT) are bound to the model, a memset and a copy are issued to the HEAD
 * stream and a memset to a DEFAULT stream (one only a branch or loop would activate), the
 * task list is ended (aclmdlRIEndTask) and the build too (aclmdlRIBuildEnd). Then ROUNDS
 * times it writes a new input and executes the model, alternately with aclmdlRIExecuteAsync
 * + aclrtSynchronizeStream and with aclmdlRIExecute.
 *
 *   acl_build ROUNDS
 *
 * The vendor: work on a persistent stream does not run when issued, only when the model is
 * executed; only a persistent stream may be bound, and only to one model; the build needs
 * aclmdlRIEndTask before aclmdlRIBuildEnd, and the model runs only once built; work issued
 * to a bound stream after the build ended makes the next execution fail. The program
 * checks each, and the codes the open runtime gives. Prints "ok ROUNDS streams S" (S from
 * aclmdlRIGetStreams) or "fail WHAT", waits for standard input to close, unbinds and
 * destroys everything, prints "done". */
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
    aclrtStream plain = NULL, head = NULL, side = NULL;
    CHECK(aclrtCreateStream(&plain) == 0, "aclrtCreateStream");
    CHECK(aclrtCreateStreamWithConfig(&head, 0, ACL_STREAM_PERSISTENT) == 0, "persistent stream");
    CHECK(aclrtCreateStreamWithConfig(&side, 0, ACL_STREAM_PERSISTENT) == 0, "persistent stream");
    void *in = NULL, *out = NULL, *scratch = NULL, *idle = NULL;
    CHECK(aclrtMalloc(&in, N, ACL_MEM_MALLOC_HUGE_FIRST) == 0 && aclrtMalloc(&out, N, ACL_MEM_MALLOC_HUGE_FIRST) == 0,
          "aclrtMalloc");
    CHECK(aclrtMalloc(&scratch, N, ACL_MEM_MALLOC_HUGE_FIRST) == 0 &&
              aclrtMalloc(&idle, N, ACL_MEM_MALLOC_HUGE_FIRST) == 0,
          "aclrtMalloc");
    CHECK(aclrtMemset(in, N, 0x5a, N) == 0 && aclrtMemset(out, N, 0, N) == 0, "aclrtMemset");
    CHECK(aclrtMemset(scratch, N, 0, N) == 0 && aclrtMemset(idle, N, 0, N) == 0, "aclrtMemset");

    aclmdlRI model = NULL;
    CHECK(aclmdlRIBuildBegin(NULL, 0) == 100000, "build-begin-null");
    CHECK(aclmdlRIBuildBegin(&model, 1) == 107000, "build-begin-flag");
    CHECK(aclmdlRIBuildBegin(&model, 0) == 0 && model != NULL, "aclmdlRIBuildBegin");
    CHECK(aclmdlRIBindStream(model, plain, ACL_MODEL_STREAM_FLAG_HEAD) == 107000, "bind-not-persistent");
    CHECK(aclmdlRIBindStream(model, NULL, ACL_MODEL_STREAM_FLAG_HEAD) != 0, "bind-null");
    CHECK(aclmdlRIBindStream(model, head, 5) == 107000, "bind-flag");
    CHECK(aclmdlRIBuildEnd(model, NULL) == 107005, "build-end-no-stream");
    CHECK(aclmdlRIBindStream(model, head, ACL_MODEL_STREAM_FLAG_HEAD) == 0, "aclmdlRIBindStream head");
    CHECK(aclmdlRIBindStream(model, head, ACL_MODEL_STREAM_FLAG_HEAD) == 107005, "bind-twice");
    CHECK(aclmdlRIBindStream(model, side, ACL_MODEL_STREAM_FLAG_DEFAULT) == 0, "aclmdlRIBindStream default");
    CHECK(aclrtMemsetAsync(scratch, N, 0xee, N, head) == 0, "aclrtMemsetAsync");
    CHECK(aclrtMemcpyAsync(out, N, in, N, ACL_MEMCPY_DEVICE_TO_DEVICE, head) == 0, "aclrtMemcpyAsync");
    CHECK(aclrtMemsetAsync(idle, N, 0x77, N, side) == 0, "aclrtMemsetAsync side");
    CHECK(aclrtSynchronizeStream(head) == 0, "aclrtSynchronizeStream head");
    CHECK(holds(out, N, 0) && holds(scratch, N, 0) && holds(idle, N, 0), "persistent-work-ran-when-issued");
    CHECK(aclmdlRIExecute(model, -1) == 507011, "execute-while-building");
    CHECK(aclmdlRIBuildEnd(model, NULL) == 507011, "build-end-before-end-task");
    CHECK(aclmdlRIEndTask(model, plain) == 507000, "end-task-unbound-stream");
    CHECK(aclmdlRIEndTask(model, head) == 0, "aclmdlRIEndTask");
    CHECK(aclmdlRIEndTask(model, head) == 507000, "end-task-twice");
    CHECK(aclmdlRIBuildEnd(model, (void *)&model) == 100000, "build-end-reserve");
    CHECK(aclmdlRIBuildEnd(model, NULL) == 0, "aclmdlRIBuildEnd");
    CHECK(holds(out, N, 0) && holds(scratch, N, 0), "work-ran-at-build-end");

    const char *failed = replay(model, plain, in, out, scratch, idle, N, rounds);
    CHECK(failed == NULL, failed);
    uint32_t streams = 0;
    CHECK(aclmdlRIGetStreams(model, NULL, &streams) == 0, "aclmdlRIGetStreams");
    CHECK(aclmdlRIUnbindStream(model, plain) == 107005, "unbind-unbound");
    /* Work after the build ended: the next execution fails. */
    CHECK(aclrtMemsetAsync(scratch, N, 0x11, N, head) == 0, "aclrtMemsetAsync after build");
    CHECK(aclmdlRIExecute(model, -1) == 507011, "execute-after-late-work");
    printf("ok %d streams %u\n", rounds, streams);
    fflush(stdout);

    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    CHECK(aclmdlRIUnbindStream(model, side) == 0, "aclmdlRIUnbindStream");
    CHECK(aclmdlRIGetStreams(model, NULL, &streams) == 0 && streams == 1, "streams-after-unbind");
    CHECK(aclmdlRIDestroy(model) == 0, "aclmdlRIDestroy");
    CHECK(aclrtFree(in) == 0 && aclrtFree(out) == 0 && aclrtFree(scratch) == 0 && aclrtFree(idle) == 0, "aclrtFree");
    CHECK(aclrtDestroyStream(head) == 0 && aclrtDestroyStream(side) == 0, "aclrtDestroyStream persistent");
    CHECK(aclrtDestroyStream(plain) == 0, "aclrtDestroyStream");
    CHECK(aclrtResetDevice(0) == 0, "aclrtResetDevice");
    CHECK(aclFinalize() == 0, "aclFinalize");
    printf("done\n");
    return 0;
}
