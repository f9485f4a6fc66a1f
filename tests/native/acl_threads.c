/* An ordinary AscendCL program with no npud code in it whose threads start together, as a
 * framework's do: THREADS threads each set device 0 (they share its default context and
 * its one default stream) and create STREAMS streams and EVENTS events (none if not
 * given), all at once. With "context", each thread instead creates a context of its own
 * on device 0 (with its own default stream; the first also makes the device's default
 * stream, since the program never sets the device), which is then that thread's context
 * without aclrtSetCurrentContext, as the vendor documents; it destroys it at the end, and
 * with it the streams made in it. With "context+set", once the threads' contexts exist the
 * program prints "contexts THREADS" and reads a line; then the main thread sets device 0
 * (its default context uses the device's default stream, which the contexts already
 * made) and creates one stream there; it resets the device after the threads destroyed
 * their contexts.
 *
 *   acl_threads THREADS STREAMS [EVENTS [context|context+set]]
 *
 * Prints "ok THREADS STREAMS" once every thread has them, or "fail WHAT" (a thread that
 * fails says what, then the program exits at once); holds them until standard input
 * closes; then every thread destroys its own, the device is reset, and it prints "done". */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;
int aclInit(const char *);
int aclrtSetDevice(int32_t);
int aclrtResetDevice(int32_t);
int aclrtCreateStream(aclrtStream *);
int aclrtDestroyStream(aclrtStream);
int aclrtCreateEvent(aclrtEvent *);
int aclrtCreateContext(aclrtContext *, int32_t);
int aclrtDestroyContext(aclrtContext);
int aclrtDestroyEvent(aclrtEvent);

#define MAX_THREADS 64
#define MAX_STREAMS 256

static int streams_each, events_each, own_context, then_set;
static pthread_barrier_t go, made, release;

static void fail(const char *what) {
    printf("fail %s\n", what);
    fflush(stdout);
    _exit(1);
}

static void *thread_main(void *arg) {
    (void)arg;
    aclrtStream s[MAX_STREAMS];
    aclrtEvent e[MAX_STREAMS];
    aclrtContext ctx = NULL;
    pthread_barrier_wait(&go);
    if (own_context) {
        if (aclrtCreateContext(&ctx, 0) != 0) fail("aclrtCreateContext");
    } else if (aclrtSetDevice(0) != 0) {
        fail("aclrtSetDevice");
    }
    for (int i = 0; i < streams_each; i++)
        if (aclrtCreateStream(&s[i]) != 0) fail("aclrtCreateStream");
    for (int i = 0; i < events_each; i++)
        if (aclrtCreateEvent(&e[i]) != 0) fail("aclrtCreateEvent");
    pthread_barrier_wait(&made);
    pthread_barrier_wait(&release);
    for (int i = 0; i < events_each; i++)
        if (aclrtDestroyEvent(e[i]) != 0) fail("aclrtDestroyEvent");
    if (own_context) {
        if (aclrtDestroyContext(ctx) != 0) fail("aclrtDestroyContext");
        return NULL;
    }
    for (int i = 0; i < streams_each; i++)
        if (aclrtDestroyStream(s[i]) != 0) fail("aclrtDestroyStream");
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 2 ? atoi(argv[1]) : 0;
    streams_each = argc > 2 ? atoi(argv[2]) : 0;
    events_each = argc > 3 ? atoi(argv[3]) : 0;
    then_set = argc > 4 && strcmp(argv[4], "context+set") == 0;
    own_context = then_set || (argc > 4 && strcmp(argv[4], "context") == 0);
    CHECK(threads > 0 && threads <= MAX_THREADS && streams_each > 0 && streams_each <= MAX_STREAMS &&
              events_each >= 0 && events_each <= MAX_STREAMS && (argc <= 4 || own_context),
          "usage: acl_threads THREADS STREAMS [EVENTS [context|context+set]] (1..64, 1..256, 0..256)");
    CHECK(aclInit(NULL) == 0, "aclInit");
    unsigned n = (unsigned)threads + 1;
    CHECK(pthread_barrier_init(&go, NULL, n) == 0 && pthread_barrier_init(&made, NULL, n) == 0 &&
              pthread_barrier_init(&release, NULL, n) == 0,
          "pthread_barrier_init");
    pthread_t t[MAX_THREADS];
    for (int i = 0; i < threads; i++) CHECK(pthread_create(&t[i], NULL, thread_main, NULL) == 0, "pthread_create");
    pthread_barrier_wait(&go);
    pthread_barrier_wait(&made);
    aclrtStream main_stream = NULL;
    if (then_set) {
        printf("contexts %d\n", threads);
        fflush(stdout);
        for (int c = getchar(); c != EOF && c != '\n'; c = getchar()) {
        }
        CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
        CHECK(aclrtCreateStream(&main_stream) == 0, "aclrtCreateStream");
    }
    printf("ok %d %d\n", threads, streams_each);
    fflush(stdout);
    while (getchar() != EOF) {
    }
    pthread_barrier_wait(&release);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    if (then_set) CHECK(aclrtDestroyStream(main_stream) == 0, "aclrtDestroyStream");
    if (!own_context || then_set) CHECK(aclrtResetDevice(0) == 0, "aclrtResetDevice");
    printf("done\n");
    return 0;
}
