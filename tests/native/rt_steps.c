/* A program that makes streams below AscendCL, through the runtime layer (libruntime.so),
 * as GE does when it loads a model, HCCL for its communicators, and AscendCL itself in
 * some builds. Built three ways:
 *
 *   -DRT_ONLY   linked against libruntime only: rtSetDevice, the rt and rts creators,
 *               rtStreamDestroy and its variants, rtDeviceReset; no aclInit
 *   -DACL_ONLY  linked against libascendcl only: the AscendCL calls alone
 *   (neither)   both layers mixed: streams made by one layer are destroyed by the other,
 *               and the device set through both (one default context)
 *
 * Signatures are the published headers' (hicann/runtime pkg_inc/runtime: runtime/stream.h,
 * rt_external_stream.h, runtime/rts/rts_stream.h, runtime/dev.h). It reads commands from
 * standard input, one per line:
 *
 *   +N     create N more streams (each by the next creator in turn)
 *   -N     destroy the N made last (each by the next destroyer in turn)
 *   avail  print "avail N": what the layers say is available (rtGetAvailStreamNum's
 *          normal type, or aclrtGetStreamAvailableNum with -DACL_ONLY)
 *   huge   print "huge RC N": rtGetAvailStreamNum for the huge type
 *   begin  begin a RELAXED capture on the stream made last (rtStreamBeginCapture with
 *          -DRT_ONLY, else aclmdlRICaptureBegin) and print "begin RC MS", MS the call's
 *          own time in milliseconds; a capture begun is ended at once and its model kept
 *          until the device is reset
 *
 * It prints "ready" once the device is set, "held K" after each +/-. At the end of its
 * input it destroys the rest, resets the device and prints "done". A failed call prints
 * "fail WHAT CODE" and exits. */
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void *stream_t;

#ifndef RT_ONLY
int aclInit(const char *);
int aclrtSetDevice(int32_t);
int aclrtResetDevice(int32_t);
int aclrtCreateStream(stream_t *);
int aclrtCreateStreamWithConfig(stream_t *, uint32_t, uint32_t);
int aclrtDestroyStream(stream_t);
int aclrtDestroyStreamForce(stream_t);
int aclrtGetStreamAvailableNum(uint32_t *);
int aclmdlRICaptureBegin(stream_t, uint32_t);
int aclmdlRICaptureEnd(stream_t, void **);
#define begin_capture aclmdlRICaptureBegin
#define end_capture aclmdlRICaptureEnd
#endif

#ifndef ACL_ONLY
typedef struct {
    uint32_t id;
    uint32_t value[4];
} rtStreamCreateAttr_t;
typedef struct {
    rtStreamCreateAttr_t *attrs;
    size_t numAttrs;
} rtStreamCreateConfig_t;
#define RT_STREAM_CREATE_ATTR_FLAGS 1
#define RT_STREAM_CREATE_ATTR_PRIORITY 2
#define RT_STREAM_FAST_LAUNCH 0x200
#define RT_STREAM_FAST_SYNC 0x400
#define RT_NORMAL_STREAM 0
#define RT_HUGE_STREAM 1
int rtSetDevice(int32_t);
int rtDeviceReset(int32_t);
int rtStreamCreate(stream_t *, int32_t);
int rtStreamCreateWithFlags(stream_t *, int32_t, uint32_t);
int rtStreamCreateWithFlagsExternal(stream_t *, int32_t, uint32_t);
int rtsStreamCreate(stream_t *, rtStreamCreateConfig_t *);
int rtStreamDestroy(stream_t);
int rtStreamDestroyForce(stream_t);
int rtsStreamDestroy(stream_t, uint64_t);
int rtGetAvailStreamNum(uint32_t, uint32_t *);
int rtStreamBeginCapture(stream_t, uint32_t);
int rtStreamEndCapture(stream_t, void **);
#ifdef RT_ONLY
#define begin_capture rtStreamBeginCapture
#define end_capture rtStreamEndCapture
#endif

static int rts_create(stream_t *s) {
    rtStreamCreateAttr_t attrs[2] = {{RT_STREAM_CREATE_ATTR_PRIORITY, {0}},
                                     {RT_STREAM_CREATE_ATTR_FLAGS, {RT_STREAM_FAST_LAUNCH | RT_STREAM_FAST_SYNC}}};
    rtStreamCreateConfig_t config = {attrs, 2};
    return rtsStreamCreate(s, &config);
}
static int rt_create(stream_t *s) { return rtStreamCreate(s, 0); }
static int rt_create_flags(stream_t *s) { return rtStreamCreateWithFlags(s, 0, RT_STREAM_FAST_LAUNCH); }
static int rt_create_external(stream_t *s) { return rtStreamCreateWithFlagsExternal(s, 0, 0); }
static int rts_create_default(stream_t *s) { return rtsStreamCreate(s, NULL); }
static int rts_destroy(stream_t s) { return rtsStreamDestroy(s, 0); }
#endif

#ifndef RT_ONLY
static int acl_create_config(stream_t *s) { return aclrtCreateStreamWithConfig(s, 0, 3); }
#endif

typedef int (*create_fn)(stream_t *);
typedef int (*destroy_fn)(stream_t);
struct creator {
    create_fn fn;
    const char *name;
};
struct destroyer {
    destroy_fn fn;
    const char *name;
};

#if defined(RT_ONLY)
static const struct creator creators[] = {{rt_create_flags, "rtStreamCreateWithFlags"},
                                          {rt_create, "rtStreamCreate"},
                                          {rts_create, "rtsStreamCreate"},
                                          {rt_create_external, "rtStreamCreateWithFlagsExternal"},
                                          {rts_create_default, "rtsStreamCreate(NULL)"}};
static const struct destroyer destroyers[] = {
    {rtStreamDestroy, "rtStreamDestroy"}, {rts_destroy, "rtsStreamDestroy"}, {rtStreamDestroyForce, "rtStreamDestroyForce"}};
#elif defined(ACL_ONLY)
static const struct creator creators[] = {{aclrtCreateStream, "aclrtCreateStream"},
                                          {acl_create_config, "aclrtCreateStreamWithConfig"}};
static const struct destroyer destroyers[] = {{aclrtDestroyStream, "aclrtDestroyStream"},
                                              {aclrtDestroyStreamForce, "aclrtDestroyStreamForce"}};
#else
static const struct creator creators[] = {{aclrtCreateStream, "aclrtCreateStream"},
                                          {rt_create_flags, "rtStreamCreateWithFlags"},
                                          {acl_create_config, "aclrtCreateStreamWithConfig"},
                                          {rts_create, "rtsStreamCreate"}};
/* One more destroyer than creators, so a stream made by one layer is freed by the other. */
static const struct destroyer destroyers[] = {{rtStreamDestroy, "rtStreamDestroy"},
                                              {aclrtDestroyStream, "aclrtDestroyStream"},
                                              {rts_destroy, "rtsStreamDestroy"},
                                              {aclrtDestroyStreamForce, "aclrtDestroyStreamForce"},
                                              {rtStreamDestroyForce, "rtStreamDestroyForce"}};
#endif
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

#define MAX_STREAMS 2048
static stream_t streams[MAX_STREAMS];

#define FAIL(what, rc)                        \
    do {                                      \
        printf("fail %s %d\n", (what), (rc)); \
        return 1;                             \
    } while (0)

static int available(uint32_t *n) {
#ifdef ACL_ONLY
    return aclrtGetStreamAvailableNum(n);
#else
    return rtGetAvailStreamNum(RT_NORMAL_STREAM, n);
#endif
}

int main(void) {
    int rc;
#ifndef RT_ONLY
    if ((rc = aclInit(NULL)) != 0) FAIL("aclInit", rc);
    if ((rc = aclrtSetDevice(0)) != 0) FAIL("aclrtSetDevice", rc);
#endif
#ifndef ACL_ONLY
    if ((rc = rtSetDevice(0)) != 0) FAIL("rtSetDevice", rc);
#endif
    printf("ready\n");
    fflush(stdout);
    int held = 0;
    unsigned made = 0, freed = 0;
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "avail", 5) == 0) {
            uint32_t n = 0;
            if ((rc = available(&n)) != 0) FAIL("available", rc);
            printf("avail %u\n", n);
            fflush(stdout);
            continue;
        }
        if (strncmp(line, "huge", 4) == 0) {
            uint32_t n = 0;
#ifdef ACL_ONLY
            rc = -1;
#else
            rc = rtGetAvailStreamNum(RT_HUGE_STREAM, &n);
#endif
            printf("huge %d %u\n", rc, n);
            fflush(stdout);
            continue;
        }
        if (strncmp(line, "begin", 5) == 0) {
            if (held == 0) FAIL("begin-without-a-stream", 0);
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            rc = begin_capture(streams[held - 1], 2 /* RELAXED */);
            clock_gettime(CLOCK_MONOTONIC, &b);
            long ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
            void *model = NULL;
            int end = rc == 0 ? end_capture(streams[held - 1], &model) : 0;
            if (end != 0) FAIL("end_capture", end);
            printf("begin %d %ld\n", rc, ms);
            fflush(stdout);
            continue;
        }
        char op = line[0];
        int n = atoi(line + 1);
        if ((op != '+' && op != '-') || n <= 0 || (op == '+' && n > MAX_STREAMS - held) || (op == '-' && n > held)) {
            printf("fail bad-command 0\n");
            return 2;
        }
        for (int i = 0; i < n; i++) {
            if (op == '+') {
                const struct creator *c = &creators[made++ % COUNT(creators)];
                if ((rc = c->fn(&streams[held])) != 0) FAIL(c->name, rc);
                held++;
            } else {
                const struct destroyer *d = &destroyers[freed++ % COUNT(destroyers)];
                if ((rc = d->fn(streams[held - 1])) != 0) FAIL(d->name, rc);
                held--;
            }
        }
        printf("held %d\n", held);
        fflush(stdout);
    }
    while (held > 0) {
        const struct destroyer *d = &destroyers[freed++ % COUNT(destroyers)];
        if ((rc = d->fn(streams[--held])) != 0) FAIL(d->name, rc);
    }
#ifndef ACL_ONLY
    if ((rc = rtDeviceReset(0)) != 0) FAIL("rtDeviceReset", rc);
#endif
#ifndef RT_ONLY
    if ((rc = aclrtResetDevice(0)) != 0) FAIL("aclrtResetDevice", rc);
#endif
    printf("done\n");
    return 0;
}
