/* Stream state callbacks and stream priorities, as the runtime pages and the open runtime
 * give them:
 *
 *   acl_stream_state MORE
 *
 * aclrtRegStreamStateCallback: the runtime calls every registered callback, in the order
 * of their names, with ACL_RT_STREAM_STATE_CREATE_POST (1) once a stream is made and
 * ACL_RT_STREAM_STATE_DESTROY_PRE (2) before one is freed, default streams included and
 * the streams a context's teardown frees; a NULL name is ACL_ERROR_INVALID_PARAM, a name
 * registered twice ACL_ERROR_RT_PARAM_INVALID, a NULL callback removes the registration.
 * aclrtDeviceGetStreamPriorityRange gives 7 (least) and 0 (greatest), and
 * aclrtCreateStreamWithConfig clamps a priority outside them instead of refusing it.
 * aclrtSetStreamAttribute / aclrtGetStreamAttribute: a stream's priority (clamped the
 * same way, and what aclrtStreamGetPriority reads), its failure mode (once per stream),
 * its cache-op-info switch (0 or 1), its overflow check and custom tag; an unknown
 * attribute is ACL_ERROR_RT_PARAM_INVALID, a NULL value ACL_ERROR_INVALID_PARAM.
 *
 * Then makes MORE streams, each heard of. Prints "ok state streams S" (S: its streams
 * left, besides the default one: 4 + MORE) or
 * "fail WHAT", waits for standard input to close, destroys everything, prints "done". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl_rt.h"
#include "check.h"

#define CREATE_POST 1u
#define DESTROY_PRE 2u

/* What each callback saw: per callback, creations and destructions; the last stream;
 * whether a stream about to go could still be asked its priority; the order of calls. */
static int g_made[2], g_gone[2], g_alive_at_destroy = 1;
static aclrtStream g_last;
static char g_order[64];
static int g_calls;

static void seen(aclrtStream stream, uint32_t state, void *args) {
    int who = (int)(intptr_t)args;
    uint32_t priority = 99;
    if (state == CREATE_POST) g_made[who]++;
    if (state == DESTROY_PRE) {
        g_gone[who]++;
        if (aclrtStreamGetPriority(stream, &priority) != 0) g_alive_at_destroy = 0;
    }
    g_last = stream;
    if (g_calls < (int)sizeof g_order - 1) g_order[g_calls++] = (char)('a' + who);
}

static void reset_seen(void) {
    g_made[0] = g_made[1] = g_gone[0] = g_gone[1] = 0;
    g_calls = 0;
    g_order[0] = 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MORE\n", argv[0]);
        return 2;
    }
    int more = atoi(argv[1]);
    CHECK(aclInit(NULL) == 0, "aclInit");
    CHECK(aclrtRegStreamStateCallback(NULL, seen, NULL) == 100000, "a NULL name: ACL_ERROR_INVALID_PARAM");
    CHECK(aclrtRegStreamStateCallback("b", seen, (void *)1) == 0, "register b");
    CHECK(aclrtRegStreamStateCallback("a", seen, (void *)0) == 0, "register a");
    CHECK(aclrtRegStreamStateCallback("a", seen, (void *)0) == 107000, "twice: ACL_ERROR_RT_PARAM_INVALID");
    CHECK(aclrtRegStreamStateCallback("never", NULL, NULL) == 0, "removing no registration");

    int32_t least = -1, greatest = -1;
    CHECK(aclrtDeviceGetStreamPriorityRange(&least, &greatest) == 0 && least == 7 && greatest == 0, "range");
    CHECK(aclrtDeviceGetStreamPriorityRange(NULL, &greatest) == 0, "range with a NULL out-pointer");

    /* The default stream is made with the default context. */
    reset_seen();
    CHECK(aclrtSetDevice(0) == 0, "aclrtSetDevice");
    aclrtStream default_stream = NULL;
    aclrtContext primary = NULL;
    CHECK(aclrtCtxGetCurrentDefaultStream(&default_stream) == 0, "aclrtCtxGetCurrentDefaultStream");
    CHECK(aclrtGetCurrentContext(&primary) == 0, "aclrtGetCurrentContext");
    CHECK(g_made[0] == 1 && g_made[1] == 1 && g_last == default_stream, "the default stream's CREATE_POST");
    CHECK(g_order[0] == 'a' && g_order[1] == 'b', "callbacks in the order of their names");

    /* Priorities outside 0..7 are clamped, as int32_t: 9 -> 7, 0xffffffff (-1) -> 0. */
    uint32_t asked[4] = {0, 7, 9, 0xffffffffu}, want[4] = {0, 7, 7, 0};
    aclrtStream streams[4];
    reset_seen();
    for (int i = 0; i < 4; i++) {
        uint32_t got = 99;
        CHECK(aclrtCreateStreamWithConfig(&streams[i], asked[i], 0) == 0, "aclrtCreateStreamWithConfig");
        CHECK(g_last == streams[i], "CREATE_POST names the new stream");
        CHECK(aclrtStreamGetPriority(streams[i], &got) == 0 && got == want[i], "priority clamped");
    }
    CHECK(g_made[0] == 4 && g_made[1] == 4 && g_gone[0] == 0, "four creations");

    /* A context of its own: its default stream, two streams; its teardown frees all three. */
    aclrtContext ctx = NULL;
    aclrtStream in_ctx[2];
    reset_seen();
    CHECK(aclrtCreateContext(&ctx, 0) == 0, "aclrtCreateContext");
    CHECK(aclrtCreateStream(&in_ctx[0]) == 0 && aclrtCreateStream(&in_ctx[1]) == 0, "aclrtCreateStream");
    CHECK(g_made[0] == 3, "the context's default stream and two more");
    CHECK(aclrtDestroyContext(ctx) == 0, "aclrtDestroyContext");
    CHECK(g_gone[0] == 3 && g_gone[1] == 3, "its teardown's DESTROY_PRE, three each");
    CHECK(g_alive_at_destroy, "streams can still be asked about at DESTROY_PRE");
    CHECK(aclrtSetCurrentContext(primary) == 0, "aclrtSetCurrentContext");

    reset_seen();
    CHECK(aclrtDestroyStream(streams[2]) == 0, "aclrtDestroyStream");
    CHECK(g_gone[0] == 1 && g_gone[1] == 1 && g_last == streams[2] && g_alive_at_destroy, "DESTROY_PRE");

    /* Removed, b hears no more. */
    CHECK(aclrtRegStreamStateCallback("b", NULL, NULL) == 0, "remove b");
    reset_seen();
    CHECK(aclrtCreateStream(&streams[2]) == 0, "aclrtCreateStream");
    CHECK(g_made[0] == 1 && g_made[1] == 0, "only a");

    /* Stream attributes, on the stream made last. */
    aclrtStream s = streams[2];
    aclrtStreamAttrValue v;
    uint32_t priority = 99;
    memset(&v, 0, sizeof v);
    v.streamPriority = 3;
    CHECK(aclrtSetStreamAttribute(s, 5, &v) == 0, "set priority");
    memset(&v, 0xff, sizeof v);
    CHECK(aclrtGetStreamAttribute(s, 5, &v) == 0 && v.streamPriority == 3, "get priority");
    CHECK(aclrtStreamGetPriority(s, &priority) == 0 && priority == 3, "aclrtStreamGetPriority after the attribute");
    v.streamPriority = 9;
    CHECK(aclrtSetStreamAttribute(s, 5, &v) == 0 && aclrtGetStreamAttribute(s, 5, &v) == 0, "priority 9");
    CHECK(v.streamPriority == 7, "priority 9 clamped to 7");
    v.failureMode = 1;
    CHECK(aclrtSetStreamAttribute(s, 1, &v) == 0, "set failure mode");
    v.failureMode = 0;
    CHECK(aclrtGetStreamAttribute(s, 1, &v) == 0 && v.failureMode == 1, "get failure mode");
    CHECK(aclrtSetStreamAttribute(s, 1, &v) != 0, "a failure mode is set once per stream");
    v.cacheOpInfoSwitch = 2;
    CHECK(aclrtSetStreamAttribute(s, 4, &v) == 107000, "cache op info 2: ACL_ERROR_RT_PARAM_INVALID");
    v.cacheOpInfoSwitch = 1;
    CHECK(aclrtSetStreamAttribute(s, 4, &v) == 0, "cache op info on");
    v.userCustomTag = 42;
    CHECK(aclrtSetStreamAttribute(s, 3, &v) == 0, "custom tag");
    v.overflowSwitch = 1;
    CHECK(aclrtSetStreamAttribute(s, 2, &v) == 0, "overflow check");
    CHECK(aclrtGetStreamAttribute(s, 4, &v) == 0 && v.cacheOpInfoSwitch == 1, "get cache op info");
    CHECK(aclrtGetStreamAttribute(s, 3, &v) == 0 && v.userCustomTag == 42, "get custom tag");
    CHECK(aclrtGetStreamAttribute(s, 2, &v) == 0 && v.overflowSwitch == 1, "get overflow check");
    CHECK(aclrtGetStreamAttribute(streams[0], 3, &v) == 0 && v.userCustomTag == 0, "another stream's tag");
    CHECK(aclrtSetStreamAttribute(s, 9, &v) == 107000, "attribute 9: ACL_ERROR_RT_PARAM_INVALID");
    CHECK(aclrtSetStreamAttribute(s, 3, NULL) == 100000, "a NULL value: ACL_ERROR_INVALID_PARAM");

    aclrtStream *extra = calloc(more > 0 ? (size_t)more : 1, sizeof *extra);
    CHECK(extra != NULL, "calloc");
    for (int i = 0; i < more; i++) CHECK(aclrtCreateStream(&extra[i]) == 0 && g_last == extra[i], "one more");
    CHECK(g_made[0] == 1 + more, "each heard of");
    printf("ok state streams %d\n", 4 + more);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    for (int i = 0; i < 4; i++) CHECK(aclrtDestroyStream(streams[i]) == 0, "aclrtDestroyStream");
    for (int i = 0; i < more; i++) CHECK(aclrtDestroyStream(extra[i]) == 0, "aclrtDestroyStream");
    free(extra);
    reset_seen();
    CHECK(aclrtResetDevice(0) == 0, "aclrtResetDevice");
    CHECK(g_gone[0] == 1 && g_last == default_stream, "the default stream's DESTROY_PRE at reset");
    CHECK(aclFinalize() == 0, "aclFinalize");
    printf("done\n");
    return 0;
}
