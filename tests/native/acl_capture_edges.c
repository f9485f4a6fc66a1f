/* Graph capture where the streams a model holds are not what a program's calls suggest,
 * as the open runtime implements the aclmdlRI pages (hicann/runtime, aclgraph):
 *
 *   acl_capture_edges long|wrong-thread|unjoined|modes|refusals|context|codes
 *
 * long          captures LONG memsets on one stream. A capture stream takes 2016 tasks
 *               (an SQ of 2048 less 32 kept for the model), and the runtime binds one more
 *               stream to the model for each 2016 after that: the model holds 3.
 * wrong-thread  ends a RELAXED capture from another thread (allowed), then a GLOBAL one
 *               (ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD, 107038). The stream leaves
 *               capture, but the model is not destroyed: it still holds its stream, and
 *               only the handle aclmdlRICaptureGetInfo gave during the capture reaches it.
 * unjoined      a side stream joins a capture and never joins back: End fails with
 *               ACL_ERROR_RT_STREAM_UNJOINED (107025), both streams leave capture and the
 *               model is destroyed with its streams. Then a stream in a capture of its own
 *               waits on an event recorded in the first stream's capture:
 *               ACL_ERROR_STREAM_CAPTURE_CONFLICT (107032), and both captures are
 *               invalidated (the runtime's TerminateCapture on a failed captured wait):
 *               each reports status 2 and its End fails with 507903. The same capture with
 *               the side stream joined back then ends, holding 2.
 * modes         the unsafe calls (aclrtMemset, aclrtMemcpy) under each capture mode
 *               (aclmdlRICaptureThreadExchangeMode's page): in a GLOBAL capture no thread
 *               in GLOBAL exchange mode may make them (ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
 *               107030), a RELAXED thread may, and another thread in THREAD_LOCAL mode
 *               may; in a THREAD_LOCAL capture only the capturing thread may not; in a
 *               RELAXED one every thread may. The last capture's model is kept: 1 stream.
 * refusals      what Begin refuses before any stream is taken (ApiImpl::StreamBeginCapture):
 *               a thread with no current context (ACL_ERROR_RT_CONTEXT_NULL), a stream of
 *               another context (ACL_ERROR_RT_STREAM_CONTEXT), a stream bound to a model
 *               (ACL_ERROR_RT_STREAM_MODEL), the default stream
 *               (ACL_ERROR_RT_FEATURE_NOT_SUPPORT); and End refused the same way (no
 *               context, a NULL out-pointer), after which the capture goes on and ends
 *               properly: its model is kept, 1 stream.
 * context       a capture made in a context of its own (aclrtCreateContext), whose model
 *               is not destroyed before the context is: the context's teardown frees it
 *               with the context's streams (the runtime's TearDownModelsOnContextTearDown),
 *               so the device has as many free as before the context. No model kept: 0.
 * codes         what the runtime answers at its edges (hicann/runtime): Begin in mode 3
 *               and aclmdlRICaptureThreadExchangeMode(3) are RT_ERROR_INVALID_VALUE
 *               (107000); the exchange on a thread with no context 107002; End with a NULL
 *               out-pointer during a capture 107000; aclmdlRICaptureGetInfo with one NULL
 *               out-pointer 0; aclmdlRIGetStreams with an array too small 107039 and the
 *               count that fit. Then the device is filled but for one stream, a capture
 *               takes it, and a stream that waits to join it gets none: 207008, the capture
 *               is INVALIDATED (2), End fails with 507903 and its streams are free again.
 *               No model kept: 0.
 *
 * Prints "ok MODE streams S" (S from aclmdlRIGetStreams of the model kept, 0 if none) or
 * "fail WHAT", waits for standard input to close, destroys everything, prints "done". */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl_rt.h"
#include "check.h"

#define LONG 5000
#define N 64

static aclrtStream g_stream;
static aclError g_end_rc;
static aclmdlRI g_ended;

static void *g_buf;
static aclrtContext g_ctx;
static uint32_t g_thread_mode;
static aclError g_memset_rc;

static aclError g_begin_rc;

/* aclmdlRICaptureBegin, or End, from a thread with no current context. */
static void *begin_without_context(void *unused) {
    (void)unused;
    g_begin_rc = aclmdlRICaptureBegin(g_stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    return NULL;
}

static void *end_without_context(void *unused) {
    (void)unused;
    g_end_rc = aclmdlRICaptureEnd(g_stream, &g_ended);
    return NULL;
}

/* aclrtMemset from another thread in the main thread's context, in exchange mode
 * g_thread_mode (set back after). */
static void *memset_elsewhere(void *unused) {
    (void)unused;
    uint32_t mode = g_thread_mode;
    if (aclrtSetCurrentContext(g_ctx) != 0 || aclmdlRICaptureThreadExchangeMode(&mode) != 0) {
        g_memset_rc = -1;
        return NULL;
    }
    g_memset_rc = aclrtMemset(g_buf, N, 3, N);
    (void)aclmdlRICaptureThreadExchangeMode(&mode);
    return NULL;
}

static aclError memset_on_another_thread(uint32_t mode) {
    pthread_t t;
    g_thread_mode = mode;
    g_memset_rc = -2;
    if (pthread_create(&t, NULL, memset_elsewhere, NULL) != 0 || pthread_join(t, NULL) != 0) return -3;
    return g_memset_rc;
}

/* aclmdlRICaptureEnd from another thread, in the main thread's context (a thread with no
 * current context gets ACL_ERROR_RT_CONTEXT_NULL first). */
static void *end_elsewhere(void *unused) {
    (void)unused;
    g_end_rc = aclrtSetCurrentContext(g_ctx);
    if (g_end_rc == 0) g_end_rc = aclmdlRICaptureEnd(g_stream, &g_ended);
    return NULL;
}

/* The model a capture on `stream` is capturing into, or NULL. */
static aclmdlRI capturing_into(aclrtStream stream) {
    uint32_t status = 0;
    aclmdlRI model = NULL;
    if (aclmdlRICaptureGetInfo(stream, &status, &model) != 0 || status != 1) return NULL;
    return model;
}

static uint32_t streams_of(aclmdlRI model) {
    uint32_t n = 0;
    return aclmdlRIGetStreams(model, NULL, &n) == 0 ? n : UINT32_MAX;
}

static uint32_t g_exchange_rc;

static void *exchange_without_context(void *unused) {
    (void)unused;
    uint32_t mode = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;
    g_exchange_rc = (uint32_t)aclmdlRICaptureThreadExchangeMode(&mode);
    return NULL;
}

#define MAX_FILL 4096

/* The `codes` mode (see the top). Prints "fail WHAT" and returns 1 on a wrong answer. */
static int codes(aclrtStream stream) {
    static aclrtStream fill[MAX_FILL];
    uint32_t mode = 3, status = 9, n = 0;
    aclmdlRI model = NULL, kept = NULL;
    aclrtStream joiner = NULL, listed[1];
    aclrtEvent fork = NULL;
    pthread_t t;
    CHECK(aclmdlRICaptureBegin(stream, 3) == 107000, "Begin in mode 3: 107000");
    CHECK(aclmdlRICaptureThreadExchangeMode(&mode) == 107000, "exchange to mode 3: 107000");
    CHECK(pthread_create(&t, NULL, exchange_without_context, NULL) == 0 && pthread_join(t, NULL) == 0, "thread");
    CHECK(g_exchange_rc == 107002, "exchange with no context: ACL_ERROR_RT_CONTEXT_NULL");
    CHECK(aclrtCreateStream(&joiner) == 0 && aclrtCreateEventExWithFlag(&fork, ACL_EVENT_SYNC) == 0, "a stream and an event");
    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0, "aclmdlRICaptureBegin");
    CHECK(aclmdlRICaptureGetInfo(stream, &status, NULL) == 0 && status == 1, "GetInfo, status only");
    CHECK(aclmdlRICaptureGetInfo(stream, NULL, &model) == 0 && model != NULL, "GetInfo, model only");
    CHECK(aclmdlRICaptureEnd(stream, NULL) == 107000, "End with a NULL out-pointer: 107000");
    CHECK(aclrtRecordEvent(fork, stream) == 0 && aclrtStreamWaitEvent(joiner, fork) == 0, "a join");
    CHECK(aclrtRecordEvent(fork, joiner) == 0 && aclrtStreamWaitEvent(stream, fork) == 0, "joined back");
    CHECK(aclmdlRICaptureEnd(stream, &kept) == 0, "aclmdlRICaptureEnd");
    CHECK(aclmdlRIGetStreams(kept, NULL, &n) == 0 && n == 2, "the model holds the capture's and the join's");
    n = 1;
    CHECK(aclmdlRIGetStreams(kept, listed, &n) == 107039 && n == 1, "an array too small: 107039, one fit");
    CHECK(aclmdlRIDestroy(kept) == 0, "aclmdlRIDestroy");

    /* The device full but for one stream, which the next capture takes. */
    int filled = 0;
    aclError rc = 0;
    while (filled < MAX_FILL && (rc = aclrtCreateStream(&fill[filled])) == 0) filled++;
    CHECK(rc == 207008 && filled > 0, "the device fills up with 207008");
    CHECK(aclrtDestroyStream(fill[--filled]) == 0, "one stream free");
    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0, "a capture takes it");
    CHECK(aclrtRecordEvent(fork, stream) == 0, "record in the capture");
    CHECK(aclrtStreamWaitEvent(joiner, fork) == 207008, "the join gets no stream: 207008");
    CHECK(aclmdlRICaptureGetInfo(stream, &status, NULL) == 0 && status == 2, "the capture is INVALIDATED");
    CHECK(aclmdlRICaptureEnd(stream, &model) == 507903, "End: ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED");
    CHECK(aclrtCreateStream(&fill[filled]) == 0, "its stream is free again");
    filled++;
    while (filled > 0) CHECK(aclrtDestroyStream(fill[--filled]) == 0, "aclrtDestroyStream");
    CHECK(aclrtDestroyEvent(fork) == 0 && aclrtDestroyStream(joiner) == 0, "cleanup");
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s long|wrong-thread|unjoined|modes|refusals|context|codes\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    aclrtStream stream = NULL, side = NULL;
    aclrtEvent fork = NULL, join = NULL;
    void *buf = NULL;
    CHECK(aclrtCreateStream(&stream) == 0, "aclrtCreateStream");
    CHECK(aclrtMalloc(&buf, N, ACL_MEM_MALLOC_HUGE_FIRST) == 0, "aclrtMalloc");
    aclmdlRI kept = NULL;

    if (strcmp(mode, "long") == 0) {
        CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0, "aclmdlRICaptureBegin");
        for (int i = 0; i < LONG; i++) CHECK(aclrtMemsetAsync(buf, N, i & 0xff, N, stream) == 0, "aclrtMemsetAsync");
        CHECK(aclmdlRICaptureEnd(stream, &kept) == 0, "aclmdlRICaptureEnd");
    } else if (strcmp(mode, "wrong-thread") == 0) {
        pthread_t t;
        g_stream = stream;
        CHECK(aclrtGetCurrentContext(&g_ctx) == 0, "aclrtGetCurrentContext");
        CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == 0, "begin-relaxed");
        CHECK(pthread_create(&t, NULL, end_elsewhere, NULL) == 0 && pthread_join(t, NULL) == 0, "thread");
        CHECK(g_end_rc == 0 && g_ended != NULL, "a RELAXED capture ends from any thread");
        CHECK(aclmdlRIDestroy(g_ended) == 0, "aclmdlRIDestroy");
        CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0, "begin-global");
        CHECK(aclrtMemsetAsync(buf, N, 1, N, stream) == 0, "aclrtMemsetAsync");
        kept = capturing_into(stream);
        CHECK(kept != NULL, "aclmdlRICaptureGetInfo");
        g_ended = NULL;
        CHECK(pthread_create(&t, NULL, end_elsewhere, NULL) == 0 && pthread_join(t, NULL) == 0, "thread");
        CHECK(g_end_rc == 107038 && g_ended == NULL, "wrong-thread: ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD");
        CHECK(capturing_into(stream) == NULL, "the stream left capture");
        CHECK(aclrtSynchronizeStream(stream) == 0, "synchronize-after");
    } else if (strcmp(mode, "unjoined") == 0) {
        CHECK(aclrtCreateStream(&side) == 0, "aclrtCreateStream");
        CHECK(aclrtCreateEventExWithFlag(&fork, ACL_EVENT_SYNC) == 0 && aclrtCreateEventExWithFlag(&join, ACL_EVENT_SYNC) == 0, "aclrtCreateEventExWithFlag");
        for (int back = 0; back < 2; back++) {
            CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0, "aclmdlRICaptureBegin");
            CHECK(aclrtRecordEvent(fork, stream) == 0, "record-fork");
            CHECK(aclrtStreamWaitEvent(side, fork) == 0, "side-joins");
            CHECK(aclrtMemsetAsync(buf, N, 2, N, side) == 0, "aclrtMemsetAsync");
            if (back) {
                CHECK(aclrtRecordEvent(join, side) == 0, "record-join");
                CHECK(aclrtStreamWaitEvent(stream, join) == 0, "join-back");
                CHECK(aclmdlRICaptureEnd(stream, &kept) == 0, "aclmdlRICaptureEnd");
            } else {
                CHECK(aclmdlRICaptureEnd(stream, &kept) == 107025, "unjoined: ACL_ERROR_RT_STREAM_UNJOINED");
                CHECK(aclmdlRICaptureEnd(stream, &kept) == 107029, "ended: ACL_ERROR_RT_STREAM_NOT_CAPTURED");
                CHECK(capturing_into(side) == NULL && aclrtSynchronizeStream(side) == 0, "the side stream left");
                aclrtStream other = NULL;
                aclmdlRI own = NULL;
                uint32_t status = 0;
                CHECK(aclrtCreateStream(&other) == 0, "aclrtCreateStream");
                CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0, "begin-again");
                CHECK(aclrtRecordEvent(fork, stream) == 0, "record-fork-again");
                CHECK(aclmdlRICaptureBegin(other, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0, "begin-other");
                CHECK(aclrtStreamWaitEvent(other, fork) == 107032, "conflict: ACL_ERROR_STREAM_CAPTURE_CONFLICT");
                CHECK(aclmdlRICaptureGetInfo(stream, &status, NULL) == 0 && status == 2, "the event's capture invalidated");
                CHECK(aclmdlRICaptureGetInfo(other, &status, NULL) == 0 && status == 2, "the waiter's capture invalidated");
                CHECK(aclmdlRICaptureEnd(other, &own) == 507903 && own == NULL, "end-other: 507903");
                CHECK(aclmdlRICaptureEnd(stream, &kept) == 507903 && kept == NULL, "end: 507903");
                CHECK(aclrtDestroyStream(other) == 0, "aclrtDestroyStream");
            }
        }
    } else if (strcmp(mode, "modes") == 0) {
        uint32_t exchange = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;
        void *host = NULL;
        g_buf = buf;
        CHECK(aclrtGetCurrentContext(&g_ctx) == 0, "aclrtGetCurrentContext");
        CHECK((host = malloc(N)) != NULL, "malloc");
        CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0, "begin-global");
        CHECK(aclrtMemset(buf, N, 1, N) == 107030, "global: ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT");
        CHECK(aclrtMemcpy(host, N, buf, N, ACL_MEMCPY_DEVICE_TO_HOST) == 107030, "global: aclrtMemcpy");
        CHECK(aclmdlRICaptureThreadExchangeMode(&exchange) == 0, "exchange");
        CHECK(aclrtMemset(buf, N, 1, N) == 0, "global, this thread relaxed");
        CHECK(aclmdlRICaptureThreadExchangeMode(&exchange) == 0, "exchange-back");
        CHECK(memset_on_another_thread(ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 107030, "global, another thread");
        CHECK(memset_on_another_thread(ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL) == 0, "global, another thread local");
        CHECK(aclmdlRICaptureEnd(stream, &kept) == 0 && aclmdlRIDestroy(kept) == 0, "end-global");
        CHECK(aclrtMemset(buf, N, 1, N) == 0, "no capture");
        CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL) == 0, "begin-thread-local");
        CHECK(aclrtMemset(buf, N, 1, N) == 107030, "thread local: the capturing thread");
        CHECK(memset_on_another_thread(ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0, "thread local, another thread");
        CHECK(aclmdlRICaptureEnd(stream, &kept) == 0 && aclmdlRIDestroy(kept) == 0, "end-thread-local");
        CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == 0, "begin-relaxed");
        CHECK(aclrtMemcpy(host, N, buf, N, ACL_MEMCPY_DEVICE_TO_HOST) == 0, "relaxed: any call");
        CHECK(memset_on_another_thread(ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0, "relaxed, another thread");
        CHECK(aclmdlRICaptureEnd(stream, &kept) == 0, "end-relaxed");
        free(host);
    } else if (strcmp(mode, "refusals") == 0) {
        pthread_t t;
        aclrtContext primary = NULL, other = NULL;
        aclrtStream persistent = NULL, default_stream = NULL;
        aclmdlRI built = NULL;
        g_stream = stream;
        CHECK(pthread_create(&t, NULL, begin_without_context, NULL) == 0 && pthread_join(t, NULL) == 0, "thread");
        CHECK(g_begin_rc == 107002, "no context: ACL_ERROR_RT_CONTEXT_NULL");
        CHECK(aclrtGetCurrentContext(&primary) == 0 && aclrtCreateContext(&other, 0) == 0, "aclrtCreateContext");
        CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 107003, "ACL_ERROR_RT_STREAM_CONTEXT");
        CHECK(aclrtDestroyContext(other) == 0 && aclrtSetCurrentContext(primary) == 0, "aclrtDestroyContext");
        CHECK(aclrtCreateStreamWithConfig(&persistent, 0, ACL_STREAM_PERSISTENT) == 0, "persistent stream");
        CHECK(aclmdlRIBuildBegin(&built, 0) == 0, "aclmdlRIBuildBegin");
        CHECK(aclmdlRIBindStream(built, persistent, ACL_MODEL_STREAM_FLAG_HEAD) == 0, "aclmdlRIBindStream");
        CHECK(aclmdlRICaptureBegin(persistent, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 107005, "ACL_ERROR_RT_STREAM_MODEL");
        CHECK(aclmdlRIUnbindStream(built, persistent) == 0 && aclmdlRIDestroy(built) == 0, "aclmdlRIDestroy");
        CHECK(aclrtDestroyStream(persistent) == 0, "aclrtDestroyStream");
        CHECK(aclrtCtxGetCurrentDefaultStream(&default_stream) == 0, "aclrtCtxGetCurrentDefaultStream");
        CHECK(aclmdlRICaptureBegin(default_stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 207000, "the default stream");
        CHECK(capturing_into(stream) == NULL, "nothing began");
        CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == 0, "aclmdlRICaptureBegin");
        CHECK(pthread_create(&t, NULL, end_without_context, NULL) == 0 && pthread_join(t, NULL) == 0, "thread");
        CHECK(g_end_rc == 107002, "End with no context: ACL_ERROR_RT_CONTEXT_NULL");
        CHECK(aclmdlRICaptureEnd(stream, NULL) == 107000, "End with a NULL out-pointer: 107000");
        CHECK(capturing_into(stream) != NULL, "the refused Ends left the capture going");
        CHECK(aclmdlRICaptureEnd(stream, &kept) == 0, "aclmdlRICaptureEnd");
    } else if (strcmp(mode, "context") == 0) {
        aclrtContext primary = NULL, own = NULL;
        aclrtStream in_own = NULL;
        aclmdlRI model = NULL;
        uint32_t before = 0, after = 0;
        CHECK(aclrtGetCurrentContext(&primary) == 0, "aclrtGetCurrentContext");
        CHECK(aclrtGetStreamAvailableNum(&before) == 0, "aclrtGetStreamAvailableNum");
        CHECK(aclrtCreateContext(&own, 0) == 0 && aclrtCreateStream(&in_own) == 0, "a context of its own");
        CHECK(aclmdlRICaptureBegin(in_own, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == 0, "aclmdlRICaptureBegin");
        CHECK(aclrtMemsetAsync(buf, N, 4, N, in_own) == 0, "aclrtMemsetAsync");
        CHECK(aclmdlRICaptureEnd(in_own, &model) == 0 && streams_of(model) == 1, "aclmdlRICaptureEnd");
        CHECK(aclrtDestroyContext(own) == 0, "aclrtDestroyContext, the model and the stream still there");
        CHECK(aclrtSetCurrentContext(primary) == 0, "aclrtSetCurrentContext");
        CHECK(aclrtGetStreamAvailableNum(&after) == 0, "aclrtGetStreamAvailableNum");
        CHECK(after == before, "the context's model went with it");
    } else if (strcmp(mode, "codes") == 0) {
        CHECK(codes(stream) == 0, "codes");
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("ok %s streams %u\n", mode, kept ? streams_of(kept) : 0u);
    fflush(stdout);

    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    if (kept) CHECK(aclmdlRIDestroy(kept) == 0, "aclmdlRIDestroy");
    if (side) CHECK(aclrtDestroyStream(side) == 0, "aclrtDestroyStream");
    if (fork) CHECK(aclrtDestroyEvent(fork) == 0 && aclrtDestroyEvent(join) == 0, "aclrtDestroyEvent");
    CHECK(aclrtFree(buf) == 0, "aclrtFree");
    CHECK(aclrtDestroyStream(stream) == 0, "aclrtDestroyStream");
    CHECK(aclrtResetDevice(0) == 0, "aclrtResetDevice");
    CHECK(aclFinalize() == 0, "aclFinalize");
    printf("done\n");
    return 0;
}
