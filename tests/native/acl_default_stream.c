/* An ordinary AscendCL program that works on the default stream, as the vendor's samples
 * do ("pass NULL to use the default stream": the seeds' record_event and stream_wait_event,
 * the runtime's synchronize, query, callback and subscription calls): it synchronizes and
 * queries the NULL stream, records an event there and waits on it from a stream of its
 * own and from the NULL stream, launches a callback on the NULL stream to a thread that
 * processes reports, does the same in a context of its own (whose default stream is
 * another stream), and checks that using the default streams takes no stream from the
 * device, that a stream is destroyed only from the context it was made in, and that
 * aclrtDestroyStream waits for the stream's tasks.
 *
 *   acl_default_stream
 *
 * Prints "ok" when every check holds, else "fail <what>" (exit 1). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "check.h"

typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;
typedef void (*aclrtCallback)(void *);
#define ACL_CALLBACK_BLOCK 1
#define ACL_STREAM_STATUS_COMPLETE 0
#define ACL_EVENT_RECORDED_STATUS_COMPLETE 1

aclError aclInit(const char *);
aclError aclFinalize(void);
aclError aclrtSetDevice(int32_t);
aclError aclrtResetDevice(int32_t);
aclError aclrtCreateContext(aclrtContext *, int32_t);
aclError aclrtDestroyContext(aclrtContext);
aclError aclrtSetCurrentContext(aclrtContext);
aclError aclrtGetCurrentContext(aclrtContext *);
aclError aclrtCreateStream(aclrtStream *);
aclError aclrtDestroyStream(aclrtStream);
aclError aclrtSynchronizeStream(aclrtStream);
aclError aclrtSynchronizeStreamWithTimeout(aclrtStream, int32_t);
aclError aclrtStreamQuery(aclrtStream, uint32_t *);
aclError aclrtStreamGetId(aclrtStream, int32_t *);
aclError aclrtCtxGetCurrentDefaultStream(aclrtStream *);
aclError aclrtStreamWaitEvent(aclrtStream, aclrtEvent);
aclError aclrtGetStreamAvailableNum(uint32_t *);
aclError aclrtCreateEvent(aclrtEvent *);
aclError aclrtDestroyEvent(aclrtEvent);
aclError aclrtRecordEvent(aclrtEvent, aclrtStream);
aclError aclrtResetEvent(aclrtEvent, aclrtStream);
aclError aclrtSynchronizeEvent(aclrtEvent);
aclError aclrtQueryEventStatus(aclrtEvent, uint32_t *);
aclError aclrtSubscribeReport(uint64_t, aclrtStream);
aclError aclrtUnSubscribeReport(uint64_t, aclrtStream);
aclError aclrtLaunchCallback(aclrtCallback, void *, int, aclrtStream);
aclError aclrtProcessReport(int32_t);
aclError aclrtSetStreamFailureMode(aclrtStream, uint64_t);
const char *aclrtGetSocName(void);

static volatile int stop;
static aclrtContext reports_ctx;

/* The thread the callbacks run on: it processes reports until told to stop. */
static void *process_reports(void *arg) {
    (void)arg;
    aclrtSetCurrentContext(reports_ctx);
    while (!stop) aclrtProcessReport(100);
    return NULL;
}

static void count_call(void *data) { ++*(int *)data; }

/* A callback that takes a while: the stream it runs on stays busy until it returns. */
static void slow_call(void *data) {
    usleep(100 * 1000);
    *(int *)data = 1;
}

/* The callback round on the current context's default stream, through `thread`. */
static int callback_on_default_stream(pthread_t thread, int *calls) {
    int before = *calls;
    CHECK(aclrtSubscribeReport((uint64_t)thread, NULL) == 0, "subscribe the thread to the NULL stream");
    CHECK(aclrtLaunchCallback(count_call, calls, ACL_CALLBACK_BLOCK, NULL) == 0, "callback on the NULL stream");
    CHECK(aclrtSynchronizeStream(NULL) == 0, "sync after the callback");
    CHECK(*calls == before + 1, "the callback ran before the NULL stream's sync returned");
    CHECK(aclrtUnSubscribeReport((uint64_t)thread, NULL) == 0, "unsubscribe");
    return 0;
}

int main(void) {
    uint32_t status = 99, before = 0, during = 0, after = 0;
    int32_t default_id = -1, own_id = -1, ctx_id = -1;
    int calls = 0;
    aclrtStream s = NULL;
    aclrtEvent ev = NULL;
    aclrtContext ctx = NULL;
    pthread_t thread;

    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    CHECK(aclrtGetCurrentContext(&reports_ctx) == 0, "the device's default context");
    CHECK(aclrtSynchronizeStream(NULL) == 0, "aclrtSynchronizeStream(NULL): the default stream");
    CHECK(aclrtSynchronizeStreamWithTimeout(NULL, 1000) == 0, "aclrtSynchronizeStreamWithTimeout(NULL)");
    CHECK(aclrtStreamQuery(NULL, &status) == 0 && status == ACL_STREAM_STATUS_COMPLETE, "query the NULL stream");
    CHECK(aclrtCreateStream(&s) == 0, "aclrtCreateStream");
    CHECK(aclrtGetStreamAvailableNum(&before) == 0, "available before");
    CHECK(aclrtStreamGetId(NULL, &default_id) == 0 && aclrtStreamGetId(s, &own_id) == 0, "stream ids");
    CHECK(default_id != own_id, "the NULL stream is the default stream, not the one created");
    aclrtStream dflt = NULL;
    int32_t dflt_id = -2;
    CHECK(aclrtCtxGetCurrentDefaultStream(&dflt) == 0 && dflt != NULL, "aclrtCtxGetCurrentDefaultStream");
    CHECK(aclrtStreamGetId(dflt, &dflt_id) == 0 && dflt_id == default_id, "its handle is the NULL stream's");
    CHECK(aclrtSynchronizeStream(dflt) == 0 && aclrtDestroyStream(dflt) != 0, "synchronized by handle, not destroyed");

    CHECK(aclrtCreateEvent(&ev) == 0, "aclrtCreateEvent");
    CHECK(aclrtRecordEvent(ev, NULL) == 0, "record on the NULL stream");
    CHECK(aclrtSynchronizeEvent(ev) == 0, "sync the event");
    CHECK(aclrtQueryEventStatus(ev, &status) == 0 && status == ACL_EVENT_RECORDED_STATUS_COMPLETE,
          "the event recorded on the default stream completed");
    CHECK(aclrtStreamWaitEvent(s, ev) == 0, "a stream waits on the default stream's event");
    CHECK(aclrtStreamWaitEvent(NULL, ev) == 0, "the NULL stream waits on an event");
    CHECK(aclrtResetEvent(ev, NULL) == 0, "reset the event on the NULL stream");
    CHECK(aclrtSynchronizeStream(s) == 0 && aclrtSynchronizeStream(NULL) == 0, "both streams drain");
    CHECK(aclrtDestroyStream(NULL) != 0, "the NULL stream cannot be destroyed");
    /* Its page: the default stream's failure mode can be set on A2, A3 and 950 parts only. */
    const char *soc = aclrtGetSocName();
    int a2_a3 = soc && (!strncmp(soc, "Ascend910B", 10) || !strncmp(soc, "Ascend910_93", 12) || !strncmp(soc, "Ascend950", 9));
    CHECK((aclrtSetStreamFailureMode(NULL, 1) == 0) == a2_a3, "the NULL stream's failure mode where the part allows it");

    CHECK(pthread_create(&thread, NULL, process_reports, NULL) == 0, "the report thread");
    if (callback_on_default_stream(thread, &calls)) return 1;

    /* aclrtDestroyStream waits for the stream's pending tasks (the runtime's stream
     * teardown loops while any is pending), here a blocking callback still running. */
    aclrtStream busy = NULL;
    int slow = 0;
    CHECK(aclrtCreateStream(&busy) == 0 && aclrtSubscribeReport((uint64_t)thread, busy) == 0, "a stream to destroy busy");
    CHECK(aclrtLaunchCallback(slow_call, &slow, ACL_CALLBACK_BLOCK, busy) == 0, "a slow callback on it");
    CHECK(aclrtDestroyStream(busy) == 0, "destroy the busy stream");
    CHECK(slow == 1, "aclrtDestroyStream returned only once the stream's callback had run");

    /* A context of its own has a default stream of its own. */
    CHECK(aclrtCreateContext(&ctx, 0) == 0, "aclrtCreateContext");
    CHECK(aclrtStreamGetId(NULL, &ctx_id) == 0 && ctx_id != default_id, "the new context's default stream is its own");
    CHECK(aclrtDestroyStream(s) == 107003, "a stream goes only from its own context: ACL_ERROR_RT_STREAM_CONTEXT");
    CHECK(aclrtRecordEvent(ev, NULL) == 0 && aclrtSynchronizeStream(NULL) == 0, "record and sync in the new context");
    if (callback_on_default_stream(thread, &calls)) return 1;
    CHECK(aclrtGetStreamAvailableNum(&during) == 0, "available with a context more");

    stop = 1;
    pthread_join(thread, NULL);
    CHECK(aclrtDestroyContext(ctx) == 0, "aclrtDestroyContext");
    CHECK(aclrtSetCurrentContext(reports_ctx) == 0, "back on the default context");
    CHECK(aclrtGetStreamAvailableNum(&after) == 0, "available after");
    /* A context holds its default stream, and on the inference parts an internal-sync one. */
    CHECK(during == before - 1 || during == before - 2, "the new context took its own streams, no more");
    CHECK(after == before, "using the default streams took nothing from the device");
    CHECK(aclrtDestroyEvent(ev) == 0 && aclrtDestroyStream(s) == 0, "destroy");
    CHECK(aclrtResetDevice(0) == 0, "aclrtResetDevice");
    CHECK(aclrtSynchronizeStream(NULL) == 107002, "no context left: ACL_ERROR_RT_CONTEXT_NULL");
    CHECK(aclFinalize() == 0, "aclFinalize");
    printf("ok\n");
    return 0;
}
