/* An ordinary AscendCL program that runs host functions in stream order with
 * aclrtLaunchHostFunc, the callback API that needs no thread of the program's own (torch_npu
 * schedules its graph tensor saves this way): on a stream of its own and on the default
 * stream (NULL), COUNT functions each.
 *
 *   acl_host_func COUNT
 *
 * Its page: the runtime runs each function on a thread it creates and registers on the
 * stream itself, and the function blocks the stream's later tasks until it returns. So the
 * program checks that a function runs on a thread that is not its own, that an event
 * recorded after a function still waiting is not complete until the function returns,
 * that a stream synchronize returns only after every function ran, in the order issued.
 * And the refusals the open runtime gives: a NULL function (107000), a stream a thread of
 * the program subscribed (107011), and subscribing a stream the runtime's thread serves
 * (107011). Prints "ok COUNT" or "fail WHAT", waits for standard input to close, destroys
 * everything, prints "done". */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "acl_rt.h"
#include "check.h"

#define MAX_COUNT 64

/* What the functions saw: the order they ran in, and whether any ran on main's thread. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int ran[2 * MAX_COUNT];
static int runs = 0;
static int on_main = 0;
static pthread_t main_thread;
static int gate_open = 0;

static void note(void *arg) {
    pthread_mutex_lock(&lock);
    ran[runs++] = (int)(intptr_t)arg;
    if (pthread_equal(pthread_self(), main_thread)) on_main = 1;
    pthread_mutex_unlock(&lock);
}

/* Holds its stream until main opens the gate. */
static void gate(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    while (!gate_open) pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
}

static int ran_in_order(int from, int count) {
    pthread_mutex_lock(&lock);
    int ok = runs == from + count && !on_main;
    for (int i = 0; ok && i < count; i++) ok = ran[from + i] == from + i;
    pthread_mutex_unlock(&lock);
    return ok;
}

int main(int argc, char **argv) {
    if (argc != 2 || atoi(argv[1]) < 1 || atoi(argv[1]) > MAX_COUNT) {
        fprintf(stderr, "usage: %s COUNT (1..%d)\n", argv[0], MAX_COUNT);
        return 2;
    }
    int count = atoi(argv[1]);
    main_thread = pthread_self();
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    aclrtStream stream = NULL, mine = NULL;
    CHECK(aclrtCreateStream(&stream) == 0 && aclrtCreateStream(&mine) == 0, "aclrtCreateStream");
    CHECK(aclrtLaunchHostFunc(stream, NULL, NULL) == 107000, "null-function");

    /* A function still waiting holds back what was issued after it. */
    aclrtEvent after = NULL;
    uint32_t status = 9;
    CHECK(aclrtCreateEvent(&after) == 0, "aclrtCreateEvent");
    CHECK(aclrtLaunchHostFunc(stream, gate, NULL) == 0, "aclrtLaunchHostFunc gate");
    CHECK(aclrtRecordEvent(after, stream) == 0, "aclrtRecordEvent");
    CHECK(aclrtQueryEventStatus(after, &status) == 0 && status == ACL_EVENT_RECORDED_STATUS_NOT_READY,
          "the-event-after-a-waiting-function-completed");
    pthread_mutex_lock(&lock);
    gate_open = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    CHECK(aclrtSynchronizeStream(stream) == 0, "aclrtSynchronizeStream");
    CHECK(aclrtQueryEventStatus(after, &status) == 0 && status == ACL_EVENT_RECORDED_STATUS_COMPLETE,
          "the-event-after-the-function");

    /* COUNT on the stream, then COUNT on the default stream: each batch in order. */
    for (int i = 0; i < count; i++)
        CHECK(aclrtLaunchHostFunc(stream, note, (void *)(intptr_t)i) == 0, "aclrtLaunchHostFunc");
    CHECK(aclrtSynchronizeStream(stream) == 0, "aclrtSynchronizeStream");
    CHECK(ran_in_order(0, count), "functions-out-of-order-or-missing-or-on-main");
    for (int i = count; i < 2 * count; i++)
        CHECK(aclrtLaunchHostFunc(NULL, note, (void *)(intptr_t)i) == 0, "aclrtLaunchHostFunc default");
    CHECK(aclrtSynchronizeStream(NULL) == 0, "aclrtSynchronizeStream default");
    CHECK(ran_in_order(count, count), "default-stream-functions-out-of-order-or-missing");

    /* The two callback APIs do not mix on one stream. */
    uint64_t me = (uint64_t)pthread_self();
    CHECK(aclrtSubscribeReport(me, stream) == 107011, "subscribe-a-host-func-stream");
    CHECK(aclrtSubscribeReport(me, mine) == 0, "aclrtSubscribeReport");
    CHECK(aclrtLaunchHostFunc(mine, note, NULL) == 107011, "host-func-on-a-subscribed-stream");
    CHECK(aclrtUnSubscribeReport(me, mine) == 0, "aclrtUnSubscribeReport");
    printf("ok %d\n", count);
    fflush(stdout);

    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    CHECK(aclrtDestroyEvent(after) == 0, "aclrtDestroyEvent");
    CHECK(aclrtDestroyStream(stream) == 0 && aclrtDestroyStream(mine) == 0, "aclrtDestroyStream");
    CHECK(aclrtResetDevice(0) == 0, "aclrtResetDevice");
    CHECK(aclFinalize() == 0, "aclFinalize");
    printf("done\n");
    return 0;
}
