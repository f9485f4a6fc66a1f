/* Graph captures that pull streams in while they go on, stopping at checkpoints so a test
 * can compare, mid-capture, what npud books for the process with what the device holds
 * (hicann/runtime feature/aclgraph: every stream that joins a capture by waiting on an
 * event recorded in it takes a capture stream, joins chain, and a capture stream whose
 * queue is full takes a cascade stream).
 *
 *   acl_capture_steps threads|fanout|long|reset|join [N]
 *
 * threads  two threads, each capturing in THREAD_LOCAL mode on a stream of its own, each
 *          pulling in three side streams by a chain of joins (a joins b joins c); both
 *          stop at "at joined" together, then join back and end: 4 streams a model.
 * fanout   a capture on the main stream forks to 8 side streams, then each side stream
 *          forks to one more (chained joins): "at fanned" after the 8, "at chained"
 *          after the 16; all join back and it ends ("at ended"): 17 streams.
 * long     a side stream joins a capture and issues 5,000 memsets into it: its capture
 *          stream fills (2048 entries less 32 kept) and cascade streams are taken; "at
 *          half" after 2,500, "at full" after 5,000; it joins back and ends: 4 streams.
 * reset    a capture with 4 joined streams, "at joined", then the device is reset in the
 *          middle of it ("at reset": everything the process had on the device is gone).
 * join N   a capture on the main stream forks to N side streams (at most 64): "at
 *          joined" with all N in it; they join back and it ends: N + 1 streams.
 *
 * At each checkpoint it prints "at NAME" and reads one line from standard input before
 * going on. At the end it prints "ok MODE streams S" (S from aclmdlRIGetStreams, summed
 * over the models kept) or "fail WHAT CODE", waits for standard input to close, tears
 * everything down and prints "done". */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl_rt.h"

#define N 64
#define FAIL(what, rc)                          \
    do {                                        \
        printf("fail %s %d\n", (what), (int)rc); \
        fflush(stdout);                         \
        exit(1);                                \
    } while (0)
#define TRY(call, what)                \
    do {                               \
        aclError rc_ = (call);         \
        if (rc_ != 0) FAIL(what, rc_); \
    } while (0)

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void checkpoint(const char *name) {
    char line[64];
    pthread_mutex_lock(&out_lock);
    printf("at %s\n", name);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) FAIL("stdin closed at a checkpoint", -1);
    pthread_mutex_unlock(&out_lock);
}

static uint32_t streams_of(aclmdlRI model) {
    uint32_t n = 0;
    TRY(aclmdlRIGetStreams(model, NULL, &n), "aclmdlRIGetStreams");
    return n;
}

/* `from` forks to `to`: an event recorded on `from`, waited on by `to` (a join when `from`
 * is in a capture and `to` is not). */
static void fork_to(aclrtStream from, aclrtStream to, aclrtEvent ev) {
    TRY(aclrtRecordEvent(ev, from), "aclrtRecordEvent");
    TRY(aclrtStreamWaitEvent(to, ev), "aclrtStreamWaitEvent");
}

static aclrtContext g_ctx;
static pthread_barrier_t g_joined;

struct chain {
    aclrtStream main, side[3];
    aclrtEvent ev[6];
    aclmdlRI model;
};

static void *capture_chain(void *arg) {
    struct chain *c = arg;
    TRY(aclrtSetCurrentContext(g_ctx), "aclrtSetCurrentContext");
    TRY(aclmdlRICaptureBegin(c->main, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL), "aclmdlRICaptureBegin");
    fork_to(c->main, c->side[0], c->ev[0]);
    fork_to(c->side[0], c->side[1], c->ev[1]);
    fork_to(c->side[1], c->side[2], c->ev[2]);
    pthread_barrier_wait(&g_joined);
    pthread_barrier_wait(&g_joined); /* the checkpoint is between the two */
    for (int i = 0; i < 3; i++) fork_to(c->side[i], c->main, c->ev[3 + i]);
    TRY(aclmdlRICaptureEnd(c->main, &c->model), "aclmdlRICaptureEnd");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s threads|fanout|long|reset|join N\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    TRY(aclInit(NULL), "aclInit");
    TRY(aclrtSetDevice(0), "aclrtSetDevice");
    TRY(aclrtGetCurrentContext(&g_ctx), "aclrtGetCurrentContext");
    void *buf = NULL;
    TRY(aclrtMalloc(&buf, N, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
    aclmdlRI models[2] = {NULL, NULL};
    static aclrtStream streams[72];
    static aclrtEvent events[72];
    int nstreams = 0, nevents = 72;
    for (int i = 0; i < nevents; i++) TRY(aclrtCreateEventExWithFlag(&events[i], ACL_EVENT_SYNC), "aclrtCreateEventExWithFlag");
    int reset = 0;

    if (strcmp(mode, "threads") == 0) {
        static struct chain chains[2];
        pthread_t t[2];
        pthread_barrier_init(&g_joined, NULL, 3);
        for (int k = 0; k < 2; k++) {
            TRY(aclrtCreateStream(&chains[k].main), "aclrtCreateStream");
            for (int i = 0; i < 3; i++) TRY(aclrtCreateStream(&chains[k].side[i]), "aclrtCreateStream");
            for (int i = 0; i < 6; i++) chains[k].ev[i] = events[k * 6 + i];
        }
        for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, capture_chain, &chains[k]);
        pthread_barrier_wait(&g_joined);
        checkpoint("joined");
        pthread_barrier_wait(&g_joined);
        for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
        for (int k = 0; k < 2; k++) {
            models[k] = chains[k].model;
            streams[nstreams++] = chains[k].main;
            for (int i = 0; i < 3; i++) streams[nstreams++] = chains[k].side[i];
        }
    } else if (strcmp(mode, "fanout") == 0) {
        nstreams = 17;
        for (int i = 0; i < nstreams; i++) TRY(aclrtCreateStream(&streams[i]), "aclrtCreateStream");
        TRY(aclmdlRICaptureBegin(streams[0], ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), "aclmdlRICaptureBegin");
        TRY(aclrtRecordEvent(events[0], streams[0]), "aclrtRecordEvent");
        for (int i = 1; i <= 8; i++) TRY(aclrtStreamWaitEvent(streams[i], events[0]), "fan-out");
        checkpoint("fanned");
        for (int i = 1; i <= 8; i++) fork_to(streams[i], streams[8 + i], events[i]);
        checkpoint("chained");
        for (int i = 1; i <= 16; i++) fork_to(streams[i], streams[0], events[8 + i]);
        TRY(aclmdlRICaptureEnd(streams[0], &models[0]), "aclmdlRICaptureEnd");
        checkpoint("ended");
    } else if (strcmp(mode, "long") == 0) {
        nstreams = 2;
        for (int i = 0; i < nstreams; i++) TRY(aclrtCreateStream(&streams[i]), "aclrtCreateStream");
        TRY(aclmdlRICaptureBegin(streams[0], ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), "aclmdlRICaptureBegin");
        fork_to(streams[0], streams[1], events[0]);
        for (int i = 0; i < 5000; i++) {
            TRY(aclrtMemsetAsync(buf, N, i & 0xff, N, streams[1]), "aclrtMemsetAsync");
            if (i == 2499) checkpoint("half");
        }
        checkpoint("full");
        fork_to(streams[1], streams[0], events[1]);
        TRY(aclmdlRICaptureEnd(streams[0], &models[0]), "aclmdlRICaptureEnd");
    } else if (strcmp(mode, "reset") == 0) {
        nstreams = 5;
        for (int i = 0; i < nstreams; i++) TRY(aclrtCreateStream(&streams[i]), "aclrtCreateStream");
        TRY(aclmdlRICaptureBegin(streams[0], ACL_MODEL_RI_CAPTURE_MODE_RELAXED), "aclmdlRICaptureBegin");
        for (int i = 1; i < nstreams; i++) fork_to(streams[i - 1], streams[i], events[i]);
        checkpoint("joined");
        TRY(aclrtResetDevice(0), "aclrtResetDevice");
        checkpoint("reset");
        reset = 1;
    } else if (strcmp(mode, "join") == 0 && argc == 3 && atoi(argv[2]) > 0 && atoi(argv[2]) <= 64) {
        int joins = atoi(argv[2]);
        nstreams = joins + 1;
        for (int i = 0; i < nstreams; i++) TRY(aclrtCreateStream(&streams[i]), "aclrtCreateStream");
        checkpoint("made");
        TRY(aclmdlRICaptureBegin(streams[0], ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), "aclmdlRICaptureBegin");
        TRY(aclrtRecordEvent(events[0], streams[0]), "aclrtRecordEvent");
        for (int i = 1; i <= joins; i++) TRY(aclrtStreamWaitEvent(streams[i], events[0]), "a join");
        checkpoint("joined");
        for (int i = 1; i <= joins; i++) fork_to(streams[i], streams[0], events[i]);
        TRY(aclmdlRICaptureEnd(streams[0], &models[0]), "aclmdlRICaptureEnd");
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    uint32_t total = 0;
    for (int k = 0; k < 2; k++)
        if (models[k]) total += streams_of(models[k]);
    printf("ok %s streams %u\n", mode, total);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    if (!reset) {
        for (int k = 0; k < 2; k++)
            if (models[k]) TRY(aclmdlRIDestroy(models[k]), "aclmdlRIDestroy");
        for (int i = 0; i < nstreams; i++) TRY(aclrtDestroyStream(streams[i]), "aclrtDestroyStream");
        for (int i = 0; i < nevents; i++) TRY(aclrtDestroyEvent(events[i]), "aclrtDestroyEvent");
        TRY(aclrtFree(buf), "aclrtFree");
        TRY(aclrtResetDevice(0), "aclrtResetDevice");
    }
    printf("done\n");
    return 0;
}
