/* An ordinary AscendCL program that builds graphs by capture, as torch_npu's NPUGraph and
 * vLLM-Ascend's graph mode do: set device 0, make a main stream and JOINED side streams,
 * then capture GRAPHS graphs on the main stream, each forking to every side stream and
 * joining back through events (so every side stream enters the capture).
 *
 *   acl_capture GRAPHS JOINED TEARDOWN     TEARDOWN: destroy | reset | exit
 *
 * Prints "ok GRAPHS streams S" once every graph is captured (S: the streams the models
 * hold, from aclmdlRIGetStreams), or "fail CODE after G" when capture G+1 failed, keeping
 * the G graphs it has (as vLLM-Ascend carries on after 207008 at capture; a failure
 * before the first capture exits at once); waits for standard input to close, then tears
 * down: destroys the
 * models and streams (destroy), resets the device without destroying them (reset), or
 * exits holding everything (exit); prints "done". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acl_rt.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s GRAPHS JOINED destroy|reset|exit\n", argv[0]);
        return 2;
    }
    int graphs = atoi(argv[1]), joined = atoi(argv[2]);
    const char *teardown = argv[3];
    aclrtStream main_stream = NULL, *side = calloc((size_t)joined + 1, sizeof *side);
    aclrtEvent fork_event = NULL, *join_events = calloc((size_t)joined + 1, sizeof *join_events);
    aclmdlRI *models = calloc((size_t)graphs + 1, sizeof *models);
    aclError rc = aclInit(NULL);
    if (rc == 0) rc = aclrtSetDevice(0);
    if (rc == 0) rc = aclrtCreateStream(&main_stream);
    if (rc == 0) rc = aclrtCreateEventExWithFlag(&fork_event, ACL_EVENT_SYNC);
    for (int j = 0; rc == 0 && j < joined; j++) {
        rc = aclrtCreateStream(&side[j]);
        if (rc == 0) rc = aclrtCreateEventExWithFlag(&join_events[j], ACL_EVENT_SYNC);
    }
    if (rc != 0) {
        printf("fail %d after 0\n", rc);
        return 1;
    }
    uint32_t total = 0;
    int captured = 0;
    for (int g = 0; g < graphs; g++) {
        rc = aclmdlRICaptureBegin(main_stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
        uint32_t status = 0;
        aclmdlRI capturing = NULL;
        if (rc == 0) rc = aclmdlRICaptureGetInfo(main_stream, &status, &capturing);
        if (rc == 0 && status != 1) rc = -1;
        for (int j = 0; rc == 0 && j < joined; j++) {
            rc = aclrtRecordEvent(fork_event, main_stream);
            if (rc == 0) rc = aclrtStreamWaitEvent(side[j], fork_event);
            if (rc == 0) rc = aclrtRecordEvent(join_events[j], side[j]);
            if (rc == 0) rc = aclrtStreamWaitEvent(main_stream, join_events[j]);
        }
        if (rc == 0) rc = aclmdlRICaptureEnd(main_stream, &models[g]);
        if (rc == 0 && models[g] != capturing) rc = -2;
        uint32_t n = 0;
        if (rc == 0) rc = aclmdlRIGetStreams(models[g], NULL, &n);
        aclrtStream *listed = calloc((size_t)n + 1, sizeof *listed);
        uint32_t m = n;
        if (rc == 0) rc = aclmdlRIGetStreams(models[g], listed, &m);
        if (rc == 0 && (m != n || (n > 0 && listed[n - 1] == NULL))) rc = -3;
        free(listed);
        if (rc != 0) break;
        total += n;
        captured++;
    }
    if (rc != 0)
        printf("fail %d after %d\n", rc, captured);
    else
        printf("ok %d streams %u\n", graphs, total);
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    if (strcmp(teardown, "exit") == 0) return 0;
    if (strcmp(teardown, "destroy") == 0) {
        for (int g = 0; g < captured; g++) aclmdlRIDestroy(models[g]);
        for (int j = 0; j < joined; j++) aclrtDestroyStream(side[j]);
        aclrtDestroyStream(main_stream);
    }
    aclrtResetDevice(0);
    aclFinalize();
    printf("done\n");
    return 0;
}
